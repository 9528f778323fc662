"""Remote access: what a front end's public URL may be, and what a client is told (docs/remote-access.md).

The rules, each once: a public URL (``--public-url NAME=URL``) is one a client can be told
(``validate_public_url``, against the form its front end declares: ``PublicForm``); a
bound address is made dialable (``dialable_host``, ``bound_url``) and said undialable when
a phone elsewhere cannot reach it (``undialable_reason``); ``--public-fp`` is a SHA-256
fingerprint (``fingerprint_hex``); ``--trusted-proxy`` is a list of networks
(``parse_trusted_proxies``). ``config.build_config`` reads the options with them.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any, Mapping, Optional
from urllib.parse import urlsplit

import attrs

from ..model.errors import ConfigError
from .security import is_loopback

WILDCARD_HOSTS = ("0.0.0.0", "::", "[::]", "")


@attrs.frozen
class PublicForm:
    """What a front end's URL looks like: its schemes, plain and with TLS, and its path."""

    schemes: tuple[str, str]  # ("ws", "wss") or ("http", "https")
    path: str  # the path it ends in ("/ws"), or "" when it is served at the root of its origin
    root_reason: str = ""  # path "": why, for the message refusing a path

    @property
    def example(self) -> str:
        return f"{self.schemes[1]}://host.example.com{self.path}"


def pairs(value: Any, what: str) -> dict:
    """``NAME=VALUE,NAME=VALUE`` (a flag), or a TOML table, as a dict; ConfigError otherwise."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return {str(k).strip(): v for k, v in value.items()}
    out: dict = {}
    for item in str(value).split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, val = item.partition("=")
        if not sep or not name.strip() or not val.strip():
            raise ConfigError(f"{what}: {item!r} is not NAME=VALUE (e.g. {what} loomi=...)")
        out[name.strip()] = val.strip()
    return out


def validate_public_url(name: str, url: Any, forms: Mapping[str, PublicForm]) -> str:
    """Front end ``name``'s public URL as given, when it is one a client can be told; ConfigError (one
    line) otherwise. ``forms``: each front end's (a path ending in ``/ws`` for a WebSocket's; none for
    lvmh, whose web UI and API live at the root of their origin: one hostname or port per front end,
    docs/remote-access.md). No user, query or fragment anywhere."""
    form = forms.get(name)
    if form is None:
        raise ConfigError(f"--public-url: unknown front end {name!r}; choose from {', '.join(forms)}")
    schemes, example = form.schemes, form.example
    text = str(url).strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"--public-url {name}={text}: not a URL ({exc}); e.g. {name}={example}")
    if parts.scheme.lower() not in schemes or not parts.hostname:
        raise ConfigError(f"--public-url {name}={text}: must start with {' or '.join(s + '://' for s in schemes)} "
                          f"and name a host, e.g. {name}={example}")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ConfigError(f"--public-url {name}={text}: no user, query or fragment allowed; e.g. {name}={example}")
    if port == 0:
        raise ConfigError(f"--public-url {name}={text}: port 0 cannot be dialled")
    if not form.path:
        if parts.path not in ("", "/"):
            raise ConfigError(f"--public-url {name}={text}: no path allowed ({form.root_reason}), e.g. "
                              f"{name}={schemes[1]}://{name}.example.com")
        return f"{parts.scheme.lower()}://{parts.netloc}"
    if not parts.path.endswith(form.path):
        raise ConfigError(f"--public-url {name}={text}: the path must end in {form.path}, e.g. {name}={example}")
    return f"{parts.scheme.lower()}://{parts.netloc}{parts.path}"


def dialable_host(host: str) -> str:
    """The host a client is told for a bind address: a wildcard (``0.0.0.0``, ``::``) becomes this
    machine's primary address (the one its default route leaves from; no packet is sent), else as is."""
    if host not in WILDCARD_HOSTS:
        return host
    family, probe = (socket.AF_INET6, "2001:db8::1") if ":" in host else (socket.AF_INET, "192.0.2.1")
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((probe, 9))
            return str(s.getsockname()[0])
    except OSError:
        return socket.gethostname()


def bound_url(form: PublicForm, host: str, port: int, tls: bool) -> str:
    """A front end's URL at its bound address (a wildcard made dialable): ws(s)://H:P/ws, http(s)://H:P."""
    h = dialable_host(host)
    h = f"[{h}]" if ":" in h else h
    return f"{form.schemes[1] if tls else form.schemes[0]}://{h}:{port}{form.path}"


def served_directly(url: str, bound_port: Optional[int]) -> bool:
    """Whether clients of ``url`` reach the bridge's own listener (its port is the bound one), so they
    see the bridge's certificate; otherwise a proxy or a port forward presents its own."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme in ("wss", "https") else 80)
    return port == bound_port


def undialable_reason(url: str) -> Optional[str]:
    """Why a phone elsewhere cannot dial ``url`` (a loopback or wildcard host), or None."""
    host = (urlsplit(url).hostname or "").strip("[]")
    if host in WILDCARD_HOSTS or host == "::":
        return f"{host or 'an empty host'} is a wildcard address, not one a phone can dial"
    if is_loopback(host):
        return f"{host} is loopback: only this machine can reach it"
    return None


def fingerprint_hex(name: str, value: Any) -> str:
    hexstr = str(value).strip().lower().replace(":", "")
    if len(hexstr) != 64 or any(c not in "0123456789abcdef" for c in hexstr):
        raise ConfigError(f"--public-fp {name}=...: must be a SHA-256 fingerprint, 64 hex digits (colons allowed)")
    return hexstr


def parse_trusted_proxies(value: Any) -> tuple:
    """``CIDR,CIDR`` (a flag) or a TOML list as ``ipaddress`` networks; ConfigError naming the bad one."""
    if value is None:
        return ()
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    nets = []
    for item in items:
        item = str(item).strip()
        if not item:
            continue
        try:
            nets.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ConfigError(f"--trusted-proxy: {item!r} is not an address or CIDR (e.g. 127.0.0.1/32,10.0.0.0/8)")
    return tuple(nets)
