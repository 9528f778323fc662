"""``agent-bridge doctor [--json] [--ca FILE]``: reach every front end from the outside in, through
its public URL (or its bound address), the way a phone or a browser will, and say what to fix.

The URLs come from the running server (``<data-dir>/run/endpoints.json``: its ``--public-url``
values, else its bound addresses), the credentials from the data directory (the command runs on
the user's own machine). One line per check; exit status 1 when one fails. The checks, and the
fix each failure names, are in docs/remote-access.md ("agent-bridge doctor").

- ``upgrade``: the WebSocket upgrade answers 101 at the URL (Pheby: and the secret gets ``ready``);
- ``tls``: the certificate's names, expiry and SHA-256, and whether a phone accepts it (a public CA,
  ``--ca``, or for Loomi the QR's pinned ``fp``);
- ``internal``: ``/internal/*`` is refused through the Loomi URL, even with the admin key;
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
import ssl
import sys
from typing import Any, Optional
from urllib.parse import urlsplit

import aiohttp
import attrs

from bridge_core.config import Config, ConfigError, bound_url, build_config, read_endpoints
from bridge_core.security import is_loopback, read_admin_key

TIMEOUT = 10.0
EXPIRY_WARNING_DAYS = 14
UNKNOWN_ID = "0" * 32
DOCS = "docs/remote-access.md"

UPGRADE_FIX = ("the proxy does not pass the WebSocket upgrade: nginx needs `proxy_http_version 1.1;`, "
               "`proxy_set_header Upgrade $http_upgrade;` and `proxy_set_header Connection \"upgrade\";` in the "
               f"location (Caddy's reverse_proxy passes it by itself); see {DOCS}")


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


class Doctor:
    def __init__(self, cfg: Config, urls: dict[str, str], qr_fp: str, ca: Optional[str], public: tuple = ()):
        self.cfg, self.urls, self.qr_fp, self.ca, self.public = cfg, urls, qr_fp, ca, tuple(public)
        self.checks: list[Check] = []
        self.no_verify = ssl.create_default_context()
        self.no_verify.check_hostname = False
        self.no_verify.verify_mode = ssl.CERT_NONE

    def add(self, frontend: str, name: str, ok: bool, detail: str, fix: str = "") -> None:
        self.checks.append(Check(frontend, name, ok, detail, fix))

    def verifying(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca) if self.ca else ssl.create_default_context()

    async def run(self) -> list[Check]:
        timeout = aiohttp.ClientTimeout(total=TIMEOUT)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            for name, url in self.urls.items():
                if url.startswith(("wss://", "https://")):
                    await self.tls(name, url)
                await getattr(self, name)(http, url)
        return self.checks

    async def upgrade(self, http: aiohttp.ClientSession, frontend: str, url: str, headers: Optional[dict] = None,
                      hello: Optional[dict] = None, expect: str = "") -> bool:
        status, error, answer = None, None, ""
        try:
            async with http.ws_connect(url, headers=headers or {}, ssl=self.no_verify, autoping=True) as ws:
                status = 101
                if hello is not None:
                    await ws.send_str(json.dumps(hello))
                    msg = await ws.receive(timeout=TIMEOUT)
                    if msg.type == aiohttp.WSMsgType.TEXT:
                        answer = str(json.loads(msg.data).get("type"))
        except aiohttp.WSServerHandshakeError as exc:
            status = exc.status
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

    async def tls(self, frontend: str, url: str) -> None:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port or 443
        try:
            _, w = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=self.no_verify,
                                                                  server_hostname=host), TIMEOUT)
            der = w.get_extra_info("ssl_object").getpeercert(binary_form=True)
            w.close()
        except (OSError, asyncio.TimeoutError, ssl.SSLError) as exc:
            self.add(frontend, "tls", False, f"{host}:{port}: no TLS handshake ({exc})",
                     "nothing speaks TLS there: check the proxy's listener, or serve with --tls-cert/--tls-key")
            return
        trusted: Optional[str] = None
        try:
            _, w = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=self.verifying(),
                                                                  server_hostname=host), TIMEOUT)
            w.close()
        except ssl.SSLCertVerificationError as exc:
            trusted = exc.verify_message or str(exc)
        except (OSError, asyncio.TimeoutError, ssl.SSLError) as exc:
            trusted = str(exc)
        ok, detail, fix = cert_verdict(frontend, host, der, trusted, self.qr_fp if frontend == "loomi" else "",
                                       datetime.datetime.now(datetime.timezone.utc).timestamp())
        self.add(frontend, "tls", ok, detail, fix)

    async def pheby(self, http: aiohttp.ClientSession, url: str) -> None:
        secret = self.cfg.pheby_secret
        await self.upgrade(http, "pheby", url, hello={"type": "hello", "secret": secret, "protocol_version": 1},
                           expect="ready")
        await self.attachment(http, "pheby", _http_base(url) + f"/attachments/{UNKNOWN_ID}",
                              {"Authorization": f"Bearer {secret}"})

    async def loomi(self, http: aiohttp.ClientSession, url: str) -> None:
        await self.upgrade(http, "loomi", url)
        base = _http_base(url)
        if "loomi" not in self.public and is_loopback(urlsplit(url).hostname or ""):
            self.add("loomi", "internal", True, f"{base}/internal/*: not checked, this URL is the bridge's own "
                     "loopback address (no proxy, no public URL)")
            return
        key = read_admin_key(self.cfg.data_dir) or ""
        opened = []
        for headers in ({}, {"Authorization": f"Bearer {key}"}):
            try:
                async with http.get(base + "/internal/devices", headers=headers, ssl=self.no_verify,
                                    allow_redirects=False) as r:
                    if r.status == 200:
                        opened.append("with the admin key" if headers else "without a key")
                    status = r.status
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
                status = f"no answer ({exc})"
        if opened:
            self.add("loomi", "internal", False, f"{base}/internal/devices answered 200 from outside ({opened[0]})",
                     "the loopback-only endpoints are reachable through the public URL: upgrade agent-bridge, and "
                     f"block /internal/ at the proxy ({DOCS})")
        else:
            self.add("loomi", "internal", True, f"{base}/internal/* refused from outside ({status})")

    async def lvmh(self, http: aiohttp.ClientSession, url: str) -> None:
        token = self.cfg.lvmh_token
        await self.upgrade(http, "lvmh", _ws_url(url, "/agent/ws"), headers={"Authorization": f"Bearer {token}"})
        await self.attachment(http, "lvmh", url + f"/api/attachments/{UNKNOWN_ID}", {"Authorization": f"Bearer {token}"})
        try:
            async with http.get(url + "/", ssl=self.no_verify) as r:
                page = await r.text() if r.status == 200 else ""
            script_ok = False
            if 'src="/static/app.js"' in page:
                async with http.get(url + "/static/app.js", ssl=self.no_verify) as r:
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

    async def attachment(self, http: aiohttp.ClientSession, frontend: str, url: str, headers: dict) -> None:
        try:
            async with http.get(url, headers=headers, ssl=self.no_verify, allow_redirects=False) as r:
                status, ctype = r.status, r.headers.get("Content-Type", "")
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            self.add(frontend, "attachments", False, f"{url}: no answer ({exc})", "check the proxy for this host")
            return
        if status == 404 and "json" in ctype:
            self.add(frontend, "attachments", True, f"{url.rsplit('/', 1)[0]}/<id> reaches the bridge")
        else:
            self.add(frontend, "attachments", False, f"{url}: HTTP {status} ({ctype or 'no type'}), not the bridge's",
                     f"attachment downloads are served at the root of the front end's host: proxy every path ({DOCS})")


def gather_urls(cfg: Config) -> tuple[dict[str, str], str, bool, tuple]:
    """(front end -> URL, the Loomi QR's fp, whether a running server told them, the public ones)."""
    info = read_endpoints(cfg.run_dir)
    if info:
        urls = {k: v for k, v in info["urls"].items() if isinstance(v, str)}
        return urls, str(info.get("loomi_fp") or ""), True, tuple(info.get("public") or ())
    urls = {n: cfg.public_urls.get(n) or bound_url(n, cfg.host, cfg.ports[n], cfg.tls) for n in cfg.adapters}
    return urls, cfg.public_fp.get("loomi", ""), False, tuple(cfg.public_urls)


def cmd_doctor(args: argparse.Namespace) -> int:
    try:
        cfg = build_config({"data_dir": getattr(args, "data_dir", None), "config": getattr(args, "config", None)},
                           dict(os.environ), with_secrets=True)
    except ConfigError as exc:
        print(f"agent-bridge: {exc.message}", file=sys.stderr)
        return 2
    urls, qr_fp, running, public = gather_urls(cfg)
    checks = asyncio.run(Doctor(cfg, urls, qr_fp, args.ca, public).run())
    if not running:
        checks.insert(0, Check("-", "server", False, "no run/endpoints.json in the data directory",
                               "start `agent-bridge serve` (with this --data-dir) and run doctor again"))
    if args.json:
        print(json.dumps([attrs.asdict(c) for c in checks]), flush=True)
    else:
        for c in checks:
            print(c.line())
        failed = sum(not c.ok for c in checks)
        print(f"{len(checks) - failed} ok, {failed} failed" + ("" if not failed else f" (see {DOCS})"))
    return 1 if any(not c.ok for c in checks) else 0
