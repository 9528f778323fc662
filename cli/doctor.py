"""``agent-bridge doctor [--json] [--ca FILE]``: reach every front end from the outside in, through
its public URL (or its bound address), the way a phone or a browser will, and say what to fix.

The URLs come from the running server (``<data-dir>/run/endpoints.json``: its ``--public-url``
values, else its bound addresses), the credentials from the data directory (the command runs on
the user's own machine). With no server running on the data directory it says so and probes
nothing. One line per check; exit status 1 when one fails. The checks, the fix each failure names,
and what is sent where are in docs/remote-access.md ("agent-bridge doctor").

- ``tls``: the certificate's names, expiry and SHA-256, and whether a phone accepts it (a public CA,
  ``--ca``, or for Loomi the QR's pinned ``fp``);
- ``credential`` (Pheby, lvmh): whether the URL is verified, so that its credential may go there
  (``doctor_trust.py``: verified TLS or plain loopback; the admin key to loopback only);
- ``upgrade``: the WebSocket upgrade answers 101 at the URL (Pheby: and the secret gets ``ready``);
- ``internal``: ``/internal/*`` is refused through the Loomi URL (with the admin key too, on loopback);
- ``attachments``: an attachment path reaches the bridge (its JSON 404 for an unknown id);
- ``web-ui``: the lvmh page and its script load.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import hashlib
import json
import os
import socket
import ssl
import sys
from typing import Any, Optional
from urllib.parse import urlsplit

import aiohttp
import attrs

from bridge_core.kit.config import Config, read_endpoints
from bridge_core.model.errors import ConfigError
from bridge_core.kit.security import read_admin_key

from .config import build_config
from .doctor_trust import DOCS, Channel, Seen, admin_note, channel_for, credential_verdict, loopback_host

TIMEOUT = 10.0
EXPIRY_WARNING_DAYS = 14
UNKNOWN_ID = "0" * 32

UPGRADE_FIX = ("the proxy does not pass the WebSocket upgrade: nginx needs `proxy_http_version 1.1;`, "
               "`proxy_set_header Upgrade $http_upgrade;` and `proxy_set_header Connection \"upgrade\";` in the "
               f"location (Caddy's reverse_proxy passes it by itself); see {DOCS}")
REDIRECTS = (301, 302, 303, 307, 308)


@attrs.define
class Check:
    frontend: str
    name: str
    ok: bool
    detail: str
    fix: str = ""

    def line(self) -> str:
        head = f"{'ok  ' if self.ok else 'FAIL'} {self.frontend:<6} {self.name:<11} {self.detail}"
        return head if self.ok or not self.fix else f"{head}\n     fix: {self.fix}"


def add_parser(subparsers: Any, common_options: Any) -> None:
    p = subparsers.add_parser("doctor", help="reach every front end through its public URL and report what to fix")
    common_options(p)
    p.add_argument("--json", action="store_true", help="print the checks as one JSON list")
    p.add_argument("--ca", metavar="FILE", default=None,
                   help="CA certificates your phones trust (e.g. Caddy's `tls internal` root), instead of the system's")
    p.set_defaults(func=cmd_doctor)


# --- what the answers mean (pure) -------------------------------------------------------------------


def upgrade_verdict(status: Optional[int], error: Optional[str]) -> tuple[bool, str, str]:
    """(ok, detail, fix) for a WebSocket upgrade that answered ``status`` (None: no HTTP answer)."""
    if status == 101:
        return True, "answers the WebSocket upgrade", ""
    if status in REDIRECTS:
        return False, f"HTTP {status}, a redirect to {error or 'nowhere'}", (
            "the URL redirects, and neither the apps nor doctor follow a redirect: give the final URL as --public-url")
    if status is None:
        return False, f"no answer ({error})", ("nothing answers there: is the proxy (or the bridge) running and its "
                                               "port open from outside? Check the host, port and firewall")
    if status in (400, 426) or status == 200:
        return False, f"HTTP {status} instead of 101 Switching Protocols", UPGRADE_FIX
    if status in (502, 503, 504):
        return False, f"HTTP {status} from the proxy", ("the proxy cannot reach the bridge: check the address in "
                                                        "proxy_pass / reverse_proxy against `agent-bridge serve`'s ports")
    if status == 404:
        return False, "HTTP 404", f"the URL's path does not reach the bridge: proxy the whole host to it ({DOCS})"
    if status == 429:
        return False, "HTTP 429 (rate limited)", ("every client has the proxy's address: pass --trusted-proxy "
                                                 "<proxy address> so each one counts on its own")
    return False, f"HTTP {status} instead of 101 Switching Protocols", UPGRADE_FIX


def cert_verdict(frontend: str, host: str, der: bytes, trusted: Optional[str], qr_fp: str,
                 now: float) -> tuple[bool, str, str]:
    """(ok, detail, fix) for the certificate a client met at ``host``; ``trusted`` is None when a
    verifying handshake succeeded, else why it failed."""
    from cryptography import x509

    cert = x509.load_der_x509_certificate(der)
    fp = hashlib.sha256(der).hexdigest()
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [*san.get_values_for_type(x509.DNSName), *(str(a) for a in san.get_values_for_type(x509.IPAddress))]
    except x509.ExtensionNotFound:
        names = []
    left = (cert.not_valid_after_utc.timestamp() - now) / 86400
    detail = (f"names {', '.join(names) or 'none'}; expires {cert.not_valid_after_utc:%Y-%m-%d} ({left:.0f} days); "
              f"sha256 {fp}")
    if left < 0:
        return False, detail, "the certificate has expired: renew it (the bridge reloads it by itself, or on SIGHUP)"
    if frontend == "loomi" and qr_fp:
        if qr_fp != fp:
            return False, detail + f"; the QR pins {qr_fp}", (
                f"phones pin another certificate: pass --public-fp loomi={fp} (the one served at the public URL), "
                "then pair again")
        return True, detail + "; matches the QR's fp (pinned)", ""
    if trusted is not None:
        if frontend == "loomi":
            fix = (f"phones will refuse it ({trusted}): pass --public-fp loomi={fp} so the QR pins it, or use a "
                   "certificate from a public CA")
        else:
            fix = (f"phones and browsers will refuse it ({trusted}): use a certificate from a public CA (Caddy's "
                   "automatic HTTPS) or install its CA on your devices (then run doctor --ca <that CA>)")
        return False, detail, fix
    if left < EXPIRY_WARNING_DAYS:
        return True, detail + f"; renew soon (under {EXPIRY_WARNING_DAYS} days left)", ""
    return True, detail + ("; trusted" + ("; the QR carries no pin (a public CA)" if frontend == "loomi" else "")), ""


# --- the checks (I/O) -----------------------------------------------------------------------------------


def _http_base(url: str) -> str:
    parts = urlsplit(url)
    return f"{'https' if parts.scheme in ('wss', 'https') else 'http'}://{parts.netloc}"


def _ws_url(base: str, path: str) -> str:
    parts = urlsplit(base)
    return f"{'wss' if parts.scheme == 'https' else 'ws'}://{parts.netloc}{path}"


class Redirected(aiohttp.ClientError):
    """A redirect doctor refused to follow (it would carry the request, and a Pheby hello after it,
    to a URL nobody verified)."""

    def __init__(self, status: int, location: str):
        super().__init__(f"HTTP {status}, a redirect to {location or 'nowhere'}")
        self.status, self.location = status, location


def refuse_redirects() -> aiohttp.TraceConfig:
    async def on_redirect(_session: Any, _ctx: Any, params: Any) -> None:
        raise Redirected(params.response.status, params.response.headers.get("Location", ""))

    trace = aiohttp.TraceConfig()
    trace.on_request_redirect.append(on_redirect)
    return trace


class Doctor:
    def __init__(self, cfg: Config, urls: dict[str, str], qr_fp: str, ca: Optional[str], public: tuple = ()):
        self.cfg, self.urls, self.qr_fp, self.ca, self.public = cfg, urls, qr_fp, ca, tuple(public)
        self.checks: list[Check] = []
        self.no_verify = ssl.create_default_context()  # only for what carries no credential
        self.no_verify.check_hostname = False
        self.no_verify.verify_mode = ssl.CERT_NONE

    def add(self, frontend: str, name: str, ok: bool, detail: str, fix: str = "") -> None:
        self.checks.append(Check(frontend, name, ok, detail, fix))

    def verifying(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca) if self.ca else ssl.create_default_context()

    def ssl_for(self, channel: Channel) -> Any:
        """The TLS setting of a request on ``channel``: each connection that carries a credential
        verifies the peer itself (the CAs and the host name, or the pinned SHA-256)."""
        if channel.via == "ca":
            return self.verifying()
        if channel.via == "pin":
            return aiohttp.Fingerprint(bytes.fromhex(channel.pin))
        return self.no_verify if not channel.verified else True

    async def run(self) -> list[Check]:
        timeout = aiohttp.ClientTimeout(total=TIMEOUT)
        async with aiohttp.ClientSession(timeout=timeout, trace_configs=[refuse_redirects()]) as http:
            for name, url in self.urls.items():
                seen = await self.tls(name, url) if url.startswith(("wss://", "https://")) else None
                channel = channel_for(url, seen, self.qr_fp, self.ca)
                await getattr(self, name)(http, url, channel)
        return self.checks

    def credential(self, frontend: str, channel: Channel) -> bool:
        ok, detail, fix = credential_verdict(frontend, channel)
        self.add(frontend, "credential", ok, detail, fix)
        return ok

    async def upgrade(self, http: aiohttp.ClientSession, frontend: str, url: str, tls: Any,
                      headers: Optional[dict] = None, hello: Optional[dict] = None, expect: str = "") -> bool:
        status, error, answer = None, None, ""
        try:
            async with http.ws_connect(url, headers=headers or {}, ssl=tls, autoping=True) as ws:
                status = 101
                if hello is not None:
                    await ws.send_str(json.dumps(hello))
                    msg = await ws.receive(timeout=TIMEOUT)
                    if msg.type == aiohttp.WSMsgType.TEXT:
                        answer = str(json.loads(msg.data).get("type"))
        except aiohttp.WSServerHandshakeError as exc:
            status = exc.status
        except Redirected as exc:
            status, error = exc.status, exc.location
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError) as exc:
            error = str(exc) or type(exc).__name__
        ok, detail, fix = upgrade_verdict(status, error)
        if ok and expect and answer != expect:
            ok, detail = False, f"upgraded, but the hello got {answer or 'no answer'} instead of {expect}"
            fix = "the secret does not match the running server's (PHEBY_SECRET / <data-dir>/secrets/pheby_secret)"
        elif ok and expect:
            detail += f" and the hello gets {expect}"
        self.add(frontend, "upgrade", ok, f"{url}: {detail}", fix)
        return ok

    async def tls(self, frontend: str, url: str) -> Optional[Seen]:
        """The ``tls`` check; what the handshake showed (None: there was none)."""
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port or 443
        try:  # nothing is sent on these two connections but the TLS handshake
            _, w = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=self.no_verify,
                                                                  server_hostname=host), TIMEOUT)
            der = w.get_extra_info("ssl_object").getpeercert(binary_form=True)
            w.close()
        except (OSError, asyncio.TimeoutError, ssl.SSLError) as exc:
            self.add(frontend, "tls", False, f"{host}:{port}: no TLS handshake ({exc})",
                     "nothing speaks TLS there: check the proxy's listener, or serve with --tls-cert/--tls-key")
            return None
        trusted: Optional[str] = None
        try:
            _, w = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=self.verifying(),
                                                                  server_hostname=host), TIMEOUT)
            w.close()
        except ssl.SSLCertVerificationError as exc:
            trusted = exc.verify_message or str(exc)
        except (OSError, asyncio.TimeoutError, ssl.SSLError) as exc:
            trusted = str(exc) or type(exc).__name__
        ok, detail, fix = cert_verdict(frontend, host, der, trusted, self.qr_fp if frontend == "loomi" else "",
                                       datetime.datetime.now(datetime.timezone.utc).timestamp())
        self.add(frontend, "tls", ok, detail, fix)
        return Seen(hashlib.sha256(der).hexdigest(), trusted)

    async def pheby(self, http: aiohttp.ClientSession, url: str, channel: Channel) -> None:
        if not self.credential("pheby", channel):
            return
        secret, tls = self.cfg.secret("pheby"), self.ssl_for(channel)
        await self.upgrade(http, "pheby", url, tls, hello={"type": "hello", "secret": secret, "protocol_version": 1},
                           expect="ready")
        await self.attachment(http, "pheby", _http_base(url) + f"/attachments/{UNKNOWN_ID}", tls,
                              {"Authorization": f"Bearer {secret}"})

    async def loomi(self, http: aiohttp.ClientSession, url: str, channel: Channel) -> None:
        await self.upgrade(http, "loomi", url, self.ssl_for(channel))  # a Loomi upgrade carries no credential
        base = _http_base(url)
        if "loomi" not in self.public and loopback_host(urlsplit(url).hostname or ""):
            self.add("loomi", "internal", True, f"{base}/internal/*: not checked, this URL is the bridge's own "
                     "loopback address (no proxy, no public URL)")
            return
        tries: list[dict] = [{}]  # the admin key only over a verified channel to a loopback host
        if channel.admin:
            tries.append({"Authorization": f"Bearer {read_admin_key(self.cfg.data_dir) or ''}"})
        opened, status, tls = [], "", self.ssl_for(channel)
        for headers in tries:
            try:
                async with http.get(base + "/internal/devices", headers=headers, ssl=tls, allow_redirects=False) as r:
                    if r.status == 200:
                        opened.append("with the admin key" if headers else "without a key")
                    status = str(r.status)
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
                status = f"no answer ({exc})"
        note = "" if channel.admin else "; " + admin_note(channel)
        if opened:
            self.add("loomi", "internal", False, f"{base}/internal/devices answered 200 from outside ({opened[0]})",
                     "the loopback-only endpoints are reachable through the public URL: upgrade agent-bridge, and "
                     f"block /internal/ at the proxy ({DOCS})")
        else:
            self.add("loomi", "internal", True, f"{base}/internal/* refused from outside ({status}){note}")

    async def lvmh(self, http: aiohttp.ClientSession, url: str, channel: Channel) -> None:
        if self.credential("lvmh", channel):
            token, tls = self.cfg.secret("lvmh"), self.ssl_for(channel)
            await self.upgrade(http, "lvmh", _ws_url(url, "/agent/ws"), tls,
                               headers={"Authorization": f"Bearer {token}"})
            await self.attachment(http, "lvmh", url + f"/api/attachments/{UNKNOWN_ID}", tls,
                                  {"Authorization": f"Bearer {token}"})
        await self.web_ui(http, url, self.ssl_for(channel))

    async def web_ui(self, http: aiohttp.ClientSession, url: str, tls: Any) -> None:
        """The lvmh page and its script (no credential: the page asks for the token itself)."""
        try:
            async with http.get(url + "/", ssl=tls) as r:
                page = await r.text() if r.status == 200 else ""
            script_ok = False
            if 'src="/static/app.js"' in page:
                async with http.get(url + "/static/app.js", ssl=tls) as r:
                    script_ok = r.status == 200 and "javascript" in r.headers.get("Content-Type", "")
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            self.add("lvmh", "web-ui", False, f"{url}/: no answer ({exc})", "check the lvmh public URL and the proxy")
            return
        if page and script_ok:
            self.add("lvmh", "web-ui", True, f"{url}/ serves the web UI and its script")
        else:
            self.add("lvmh", "web-ui", False, f"{url}/ does not serve the web UI (page {'ok' if page else 'missing'}, "
                     f"/static/app.js {'ok' if script_ok else 'missing'})",
                     f"proxy the whole host (every path) to the lvmh port; a path prefix is not supported ({DOCS})")

    async def attachment(self, http: aiohttp.ClientSession, frontend: str, url: str, tls: Any, headers: dict) -> None:
        try:
            async with http.get(url, headers=headers, ssl=tls, allow_redirects=False) as r:
                status, ctype = r.status, r.headers.get("Content-Type", "")
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            self.add(frontend, "attachments", False, f"{url}: no answer ({exc})", "check the proxy for this host")
            return
        if status == 404 and "json" in ctype:
            self.add(frontend, "attachments", True, f"{url.rsplit('/', 1)[0]}/<id> reaches the bridge")
        else:
            self.add(frontend, "attachments", False, f"{url}: HTTP {status} ({ctype or 'no type'}), not the bridge's",
                     f"attachment downloads are served at the root of the front end's host: proxy every path ({DOCS})")


# --- which server, which URLs ---------------------------------------------------------------------------


def listening_ports() -> Optional[set[int]]:
    """The TCP ports something listens on here, from /proc/net/tcp and tcp6 (no packet sent);
    None where there is no /proc."""
    ports: set[int] = set()
    try:
        for name in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(name, "r", encoding="ascii") as f:
                for line in f.readlines()[1:]:
                    fields = line.split()
                    if len(fields) > 3 and fields[3] == "0A":  # TCP_LISTEN
                        ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    except (OSError, ValueError, IndexError):
        return None
    return ports


def answers(hosts: list[str], port: int) -> bool:
    """Whether ``port`` accepts a TCP connection on one of ``hosts`` (closed at once, nothing sent)."""
    for host in dict.fromkeys(h for h in hosts if h):
        try:
            socket.create_connection((host, port), timeout=2.0).close()
            return True
        except OSError:
            continue
    return False


def server_absent(cfg: Config) -> Optional[str]:
    """Why no server runs on ``cfg``'s data directory, or None when one does. The one place doctor
    decides it: the server wrote ``run/ports.json`` and ``run/endpoints.json`` (and removes them on
    a clean stop), and one of those ports is still listening (a killed server leaves the files
    behind): seen in /proc, else by a bare TCP connection on loopback or its bound address."""
    try:
        with open(os.path.join(cfg.run_dir, "ports.json"), "r", encoding="utf-8") as f:
            ports = json.load(f)
    except (OSError, ValueError):
        return "no run/ports.json"
    info = read_endpoints(cfg.run_dir)
    if not info or not isinstance(ports, dict):
        return "no run/endpoints.json"
    ours = [p for p in ports.values() if isinstance(p, int) and 0 < p < 65536]
    listening = listening_ports()
    if listening is not None:
        alive = any(p in listening for p in ours)
    else:
        public = info.get("public") or ()
        hosts = ["127.0.0.1", "::1"] + [urlsplit(u).hostname or "" for n, u in info["urls"].items() if n not in public]
        alive = any(answers(hosts, p) for p in ours)
    return None if alive else "run/ports.json is left from a server that no longer listens on its ports"


def gather_urls(cfg: Config) -> tuple[dict[str, str], str, tuple]:
    """(front end -> URL, the Loomi QR's fp, the public ones), as the running server wrote them."""
    info = read_endpoints(cfg.run_dir) or {"urls": {}}
    urls = {k: v for k, v in info["urls"].items() if isinstance(v, str) and k in ("pheby", "loomi", "lvmh")}
    return urls, str(info.get("loomi_fp") or ""), tuple(info.get("public") or ())


def cmd_doctor(args: argparse.Namespace) -> int:
    try:
        cfg = build_config({"data_dir": getattr(args, "data_dir", None), "config": getattr(args, "config", None)},
                           dict(os.environ), with_secrets=True)
    except ConfigError as exc:
        print(f"agent-bridge: {exc.message}", file=sys.stderr)
        return 2
    absent = server_absent(cfg)
    if absent:
        checks = [Check("-", "server", False, f"no server is running on {cfg.data_dir} ({absent}); nothing was probed",
                        "start `agent-bridge serve` on this data directory (--data-dir), then run doctor again")]
    else:
        urls, qr_fp, public = gather_urls(cfg)
        checks = asyncio.run(Doctor(cfg, urls, qr_fp, args.ca, public).run())
    if args.json:
        print(json.dumps([attrs.asdict(c) for c in checks]), flush=True)
    else:
        for c in checks:
            print(c.line())
        failed = sum(not c.ok for c in checks)
        print(f"{len(checks) - failed} ok, {failed} failed" + ("" if not failed else f" (see {DOCS})"))
    return 1 if any(not c.ok for c in checks) else 0
