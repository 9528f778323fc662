"""What ``agent-bridge doctor`` may send where (pure: no I/O). docs/remote-access.md, "What doctor
sends where"; the threat it answers is docs/security.md's "an impostor on a public URL".

A credential (the Pheby secret, ``LVMH_TOKEN``, the admin key) goes only over a connection doctor
has verified: TLS checked against the system's CAs or ``--ca FILE``, or a certificate whose SHA-256
is the Loomi QR's ``fp`` pin; plain ``ws://``/``http://`` only to a loopback host. The admin key
also needs a loopback host. Anything else gets no credential, and the check that needed one fails
with why and the fix.
"""

from __future__ import annotations

import ipaddress
from typing import Optional
from urllib.parse import urlsplit

import attrs

DOCS = "docs/remote-access.md"

PLAIN_FIX = ("serve this front end over TLS (a reverse proxy, or --tls-cert/--tls-key) and give that wss:// / "
             "https:// URL as --public-url; doctor sends credentials in clear text to loopback addresses only")


def loopback_host(host: str) -> bool:
    """Whether ``host`` (a URL's host) is this machine: judged by parsing it as an address (127.0.0.0/8,
    ``::1``, their IPv4-mapped forms); the one name taken on its word is ``localhost``. Any other
    name (which DNS may point anywhere) is not loopback."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


@attrs.frozen
class Seen:
    """What a TLS handshake at a URL showed: the certificate's SHA-256 (hex), and why a handshake
    verifying it against the CAs (system or ``--ca``) and the URL's host failed (None: it passed)."""

    fp: str
    ca_error: Optional[str]


@attrs.frozen
class Channel:
    """How doctor may talk to one URL. ``via``: ``ca`` (TLS verified against the CAs), ``pin`` (the
    certificate is the QR's ``fp``), ``loopback`` (plain, to a loopback host), or ``""``: not
    verified, no credential. ``how``: the verification, or why there is none; ``admin``: whether the
    admin key may go there too (verified and loopback)."""

    url: str
    via: str
    how: str
    fix: str = ""
    pin: str = ""
    admin: bool = False

    @property
    def verified(self) -> bool:
        return bool(self.via)


def channel_for(url: str, seen: Optional[Seen], qr_fp: str, ca: Optional[str]) -> Channel:
    """The channel to ``url``; ``seen``: its TLS handshake (None when it is plain, or when no TLS
    handshake succeeded on a ``wss://``/``https://`` URL)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    loopback = loopback_host(host)
    if parts.scheme in ("ws", "http"):
        if loopback:
            return Channel(url, "loopback", f"plain {parts.scheme}:// to the loopback address {host}", admin=True)
        return Channel(url, "", f"plain {parts.scheme}:// to {host}, which is not loopback: anyone on the way "
                       "reads what is sent", PLAIN_FIX)
    if seen is None:
        return Channel(url, "", "no TLS handshake, so nothing to verify",
                       "make TLS answer at this URL (see the tls check), then run doctor again")
    if seen.ca_error is None:
        return Channel(url, "ca", f"TLS verified against {'--ca ' + ca if ca else 'the system CAs'} for {host}",
                       admin=loopback)
    if qr_fp and seen.fp == qr_fp:
        return Channel(url, "pin", "TLS pinned to the Loomi QR's fp", pin=seen.fp, admin=loopback)
    return Channel(url, "", f"its certificate (sha256 {seen.fp}) is not trusted ({seen.ca_error}) and is not the "
                   "Loomi QR's fp", unverified_fix(seen.fp))


def unverified_fix(fp: str) -> str:
    return (f"if the certificate with sha256 {fp} is yours, pass doctor --ca <the CA that signed it, or the "
            "certificate itself> (phones must trust it too), or pin it for Loomi with serve --public-fp "
            f"loomi={fp}; if it is not yours, something else answers at this URL: check its DNS and the proxy "
            f"({DOCS})")


CREDENTIAL_NAMES = {"pheby": "the Pheby secret", "lvmh": "LVMH_TOKEN"}


def credential_verdict(frontend: str, channel: Channel) -> tuple[bool, str, str]:
    """(ok, detail, fix) of the ``credential`` check: whether ``frontend``'s credential may go to its URL."""
    what = CREDENTIAL_NAMES[frontend]
    if channel.verified:
        return True, f"{channel.url}: {what} sent over {channel.how}", ""
    return (False, f"{channel.url}: {what} not sent, so its checks are skipped: {channel.how}",
            channel.fix)


def admin_note(channel: Channel) -> str:
    """Why the admin key was not sent to ``channel`` (empty when it may be)."""
    if channel.admin:
        return ""
    if not channel.verified:
        return f"the admin key not sent: {channel.how}"
    return "the admin key not sent: it goes to loopback addresses only"
