"""What every front end shares: its aiohttp site, its connections, frame sending.

A front end (``pheby_adapter``, ``loomi_adapter``, ``lvmh_adapter``) subclasses
``FrontEnd``, builds its ``web.Application`` and subscribes to the hub. The
CLI (or the Hermes plugin) starts it on a host and port and stops it.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import logging
import os
import ssl
import warnings
from typing import TYPE_CHECKING, Any, Optional

from aiohttp import WSMsgType, web

from . import aiohttp_compat
from ..model.errors import BridgeError, ConfigError
from .security import LISTEN_QUEUE, PROXY_RULE, REFUSED_JSON, AuthLimiter, ProxyRule, accept_batch_for, peer_host  # noqa: F401 (peer_host: re-exported)
from ..bridge.tasks import TaskSet

if TYPE_CHECKING:
    from ..bridge.bridge import Bridge
    from .config import Config

log = logging.getLogger("agent_bridge.frontend")


class PortInUse(OSError):
    pass


# --- TLS: the served certificate, its checks and its reload (docs/remote-access.md) ------------------


class TLSError(ConfigError):
    """A certificate or key the bridge cannot serve: one line saying what to do."""

    code = "config_error"
    default_message = "Bad TLS certificate or key"
    fatal = True


def _no_password(*_: Any) -> bytes:
    # handed to load_cert_chain: an encrypted key fails at once instead of prompting on the terminal
    raise TLSError("the TLS key is encrypted: give an unencrypted key (openssl pkey -in KEY -out KEY.plain)")


def read_chain(cert_path: str) -> list:
    """The certificates of a PEM file (cryptography objects), first the served one; TLSError otherwise."""
    from cryptography import x509

    try:
        with open(cert_path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise TLSError(f"TLS certificate {cert_path} unreadable: {exc.strerror or exc}")
    if b"-----BEGIN CERTIFICATE-----" not in data:
        hint = " (are --tls-cert and --tls-key swapped?)" if b"PRIVATE KEY-----" in data else ""
        raise TLSError(f"TLS certificate {cert_path} holds no PEM certificate{hint}")
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise TLSError(f"TLS certificate {cert_path} is not a valid PEM certificate: {exc}")


def cert_fingerprint(cert_path: Optional[str]) -> str:
    """SHA-256 of the served (first) certificate of a PEM file, lowercase hex; "" without one."""
    if not cert_path:
        return ""
    from cryptography.hazmat.primitives import serialization

    return hashlib.sha256(read_chain(cert_path)[0].public_bytes(serialization.Encoding.DER)).hexdigest()


def check_key_pair(cert_path: str, key_path: str) -> None:
    """TLSError (one line) for a swapped pair, an encrypted key, a key of another certificate."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    chain = read_chain(cert_path)
    try:
        with open(key_path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise TLSError(f"TLS key {key_path} unreadable: {exc.strerror or exc}")
    if b"PRIVATE KEY-----" not in data:
        hint = " (are --tls-cert and --tls-key swapped?)" if b"-----BEGIN CERTIFICATE-----" in data else ""
        raise TLSError(f"TLS key {key_path} holds no PEM private key{hint}")
    if b"ENCRYPTED" in data.split(b"-----END", 1)[0]:
        raise TLSError(f"TLS key {key_path} is encrypted: give an unencrypted key "
                       "(openssl pkey -in KEY -out KEY.plain), the bridge never prompts for a pass phrase")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise TLSError(f"TLS key {key_path} is encrypted: give an unencrypted key "
                       "(openssl pkey -in KEY -out KEY.plain), the bridge never prompts for a pass phrase")
    except (ValueError, UnsupportedAlgorithm) as exc:  # a corrupt key, or a kind OpenSSL cannot use
        raise TLSError(f"TLS key {key_path} is not a usable private key: {(str(exc).splitlines() or ['?'])[0][:120]}")
    fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if key.public_key().public_bytes(*fmt) != chain[0].public_key().public_bytes(*fmt):
        raise TLSError(f"TLS key {key_path} does not belong to the certificate {cert_path}")


def make_ssl_context(cert: Optional[str], key: Optional[str]) -> Optional[ssl.SSLContext]:
    """The server context for ``cert``/``key``, checked first (``check_key_pair``): TLSError, never a prompt."""
    if not (cert and key):
        return None
    check_key_pair(cert, key)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        ctx.load_cert_chain(cert, key, password=_no_password)
    except ssl.SSLError as exc:
        raise TLSError(f"cannot serve TLS with {cert} and {key}: {exc.reason or exc}")
    return ctx


def cert_names(cert_path: str) -> list[str]:
    """The DNS names and IP addresses the served certificate is valid for (its SAN; the CN without one)."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    cert = read_chain(cert_path)[0]
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        return [*san.get_values_for_type(x509.DNSName), *(str(a) for a in san.get_values_for_type(x509.IPAddress))]
    except x509.ExtensionNotFound:
        return [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]


def name_matches(names: list[str], host: str) -> bool:
    """Whether ``host`` is one of ``names`` (a ``*.`` wildcard covers one label), case-insensitive."""
    host = host.strip("[]").lower().rstrip(".")
    for n in names:
        n = n.lower().rstrip(".")
        if n == host:
            return True
        if n.startswith("*.") and "." in host and host.split(".", 1)[1] == n[2:]:
            return True
    return False


def cert_expiry(cert_path: str) -> float:
    """When the served certificate expires (epoch seconds)."""
    return read_chain(cert_path)[0].not_valid_after_utc.timestamp()


def chains_to_public_ca(cert_path: str) -> bool:
    """Whether the served chain verifies against this system's public CA store (then a phone needs
    no pin and the Loomi QR's ``fp`` stays empty); False for a self-signed or private-CA certificate."""
    try:
        from cryptography import x509
        from cryptography.x509.verification import DNSName, IPAddress, PolicyBuilder, Store

        chain = read_chain(cert_path)
        paths = ssl.get_default_verify_paths()
        roots: list = []
        if paths.cafile and os.path.exists(paths.cafile):
            with open(paths.cafile, "rb") as f, warnings.catch_warnings():
                warnings.simplefilter("ignore")  # an old root's serial number is not our concern
                roots = x509.load_pem_x509_certificates(f.read())
        if not roots:
            return False
        names = cert_names(cert_path)
        if not names:
            return False
        try:
            subject: Any = IPAddress(ipaddress.ip_address(names[0]))
        except ValueError:
            subject = DNSName(names[0].replace("*.", "x.", 1))
        verifier = PolicyBuilder().store(Store(roots)).build_server_verifier(subject)
        verifier.verify(chain[0], chain[1:])
        return True
    except Exception:
        return False


class TLSReloader:
    """The served context, reloaded in place when its files change (polled) or on ``reload()`` (SIGHUP).

    New connections get the new certificate (the listeners keep the same ``SSLContext``); a pair that
    does not load is refused with one log line and the old certificate stays. Listeners of the new
    fingerprint (``on_change``) are told, so the Loomi QR and ``loomi.json`` follow it.
    """

    def __init__(self, cert: str, key: str, interval: float = 2.0):
        self.cert, self.key, self.interval = cert, key, interval
        self.context = make_ssl_context(cert, key)
        self.fingerprint = cert_fingerprint(cert)
        self._stamp = self._files_stamp()
        self._listeners: list = []
        self.tasks = TaskSet("tls-reload")

    def _files_stamp(self) -> tuple:
        out = []
        for p in (self.cert, self.key):
            try:
                st = os.stat(p)
                out.append((st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                out.append(None)
        return tuple(out)

    def on_change(self, listener: Any) -> None:
        self._listeners.append(listener)

    def reload(self, why: str = "SIGHUP") -> bool:
        """Load the files again (after checking them); True when the certificate changed."""
        self._stamp = self._files_stamp()
        try:
            check_key_pair(self.cert, self.key)
            assert self.context is not None
            self.context.load_cert_chain(self.cert, self.key, password=_no_password)
            new_fp = cert_fingerprint(self.cert)
        except (TLSError, ssl.SSLError, OSError) as exc:
            msg = exc.message if isinstance(exc, BridgeError) else str(exc)
            log.error("TLS reload (%s) refused, still serving the certificate sha256 %s: %s", why,
                      self.fingerprint, msg)
            return False
        if new_fp == self.fingerprint:
            log.info("TLS reload (%s): same certificate, sha256 %s", why, new_fp)
            return False
        log.warning("TLS certificate reloaded (%s): new sha256 %s (was %s); phones pinning the old one "
                    "must pair again unless a proxy presents the pinned certificate", why, new_fp, self.fingerprint)
        self.fingerprint = new_fp
        for listener in self._listeners:
            try:
                listener(new_fp)
            except Exception:
                log.exception("a TLS reload listener failed")
        return True

    def poll(self) -> bool:
        """One look at the files; a changed stamp reloads them."""
        if self._files_stamp() != self._stamp:
            return self.reload("files changed")
        return False

    def start(self) -> None:
        if self.interval <= 0:
            return

        async def watch() -> None:
            while True:
                await asyncio.sleep(self.interval)
                self.poll()

        self.tasks.spawn(watch(), name="tls-watch")

    async def stop(self) -> None:
        await self.tasks.close()


# the 429 an over-cap connection gets, in each front end's error shape
REFUSAL_BODIES = {
    "lvmh": b'{"error":"Too many unauthenticated connections from this address","code":"rate_limited"}',
}

STORE_KEY: web.AppKey = web.AppKey("agent_bridge_store")


class FrontEndCounts:
    """What a front end counted since it started, read by the metrics endpoint at scrape time
    (bridge_core/kit/metrics.py): plain int adds where the frames are written and replayed."""

    __slots__ = ("frames_sent", "replay_events")

    def __init__(self) -> None:
        self.frames_sent = 0  # frames its outboxes wrote (outbox.Outbox._sent)
        self.replay_events = 0  # events resent to a client catching up (Loomi replay, lvmh ?after=)


COUNTS_KEY: web.AppKey = web.AppKey("agent_bridge_counts", FrontEndCounts)


async def listen(app: web.Application, name: str, limiter: AuthLimiter, host: str, port: int,
                 ssl_context: Optional[ssl.SSLContext] = None,
                 keepalive_timeout: float = 10.0) -> tuple[web.AppRunner, asyncio.AbstractServer, int]:
    """Serve ``app`` on ``host:port`` behind ``limiter`` (at most its cap of unauthenticated connections
    per address); (its runner, its listener, the bound port). PortInUse (one line) when it cannot."""
    app[PROXY_RULE] = ProxyRule(limiter.trusted, name)  # security.client_address reads it
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=2.0,
                           keepalive_timeout=keepalive_timeout)  # fmt: skip
    await runner.setup()
    limiter.fit_to_descriptors()  # the descriptor limit as raised at start
    # the listener is ours (not a TCPSite): its protocol factory is guarded (security.AuthLimiter)
    loop = asyncio.get_running_loop()
    try:
        listener = await loop.create_server(limiter.guard(runner.server), host, port, ssl=ssl_context,
                                            backlog=accept_batch_for())  # fmt: skip
        # asyncio's backlog is also the kernel's queue: lengthen that one alone (security.accept_batch_for)
        for sock in listener.sockets or []:
            with sock.dup() as raw:
                raw.listen(LISTEN_QUEUE)
    except OSError as exc:
        await runner.cleanup()
        raise PortInUse(exc.errno, f"{name}: cannot listen on {host}:{port}: {exc.strerror}") from exc
    sockets = listener.sockets or []
    return runner, listener, sockets[0].getsockname()[1] if sockets else port


async def close_listener(runner: Optional[web.AppRunner], listener: Optional[asyncio.AbstractServer]) -> None:
    """Stop what ``listen`` started: no new connection, then the app's cleanup."""
    if listener is not None:
        listener.close()
    if runner is not None:
        await runner.cleanup()
    if listener is not None:
        try:
            await asyncio.wait_for(listener.wait_closed(), 2.0)
        except (asyncio.TimeoutError, Exception):
            pass


class ws_text_sender:
    """An Outbox sender (``outbox.Sender``): pre-encoded JSON bytes as WebSocket text frames.

    ``sync`` writes a batch of frames synchronously with one transport write
    while the peer keeps up (``aiohttp_compat.FrameWriter``: the Outbox
    writes from its flush, without a hop through the writer task); ``many``
    writes a batch and waits out aiohttp's flow control when the peer falls
    behind (``aiohttp_compat.write_text_frames``). These are the only uses of
    aiohttp internals. It falls back to ``send_frame`` per frame whenever the
    aiohttp writer is not in the plain state it expects.

    Durable before delivered: ``request`` is the handler's request, whose app
    carries the front end's store under ``STORE_KEY``; the Outbox lets frames
    leave only once the store has committed every write queued before them
    (``Store.synced``), so a client never holds an event a crash could take back.
    """

    __slots__ = ("ws", "_store", "sync", "counts")

    def __init__(self, ws: web.WebSocketResponse, request: Optional[web.BaseRequest] = None):
        self.ws = ws
        self._store: Any = request.app.get(STORE_KEY) if request is not None else None
        self.sync = aiohttp_compat.FrameWriter(ws)
        self.counts = request.app.get(COUNTS_KEY) if request is not None else None  # the Outbox adds what it wrote

    def durable_store(self) -> Any:
        """The store whose writes this connection's frames wait for (the Outbox waits for it)."""
        return self._store

    async def __call__(self, data: bytes) -> None:
        await self.ws.send_frame(data, WSMsgType.TEXT)

    async def many(self, frames: list) -> None:
        if not aiohttp_compat.batch_ready(self.ws):
            for data in frames:
                await self.ws.send_frame(data, WSMsgType.TEXT)
            return
        await aiohttp_compat.write_text_frames(self.ws, frames)


class FrontEnd:
    name = "frontend"
    # a connection that sends no complete HTTP request (or idles between keep-alive
    # requests) this long is closed: an idle or slowloris socket never holds a descriptor
    # for aiohttp's default hour. Upgraded WebSockets are not affected.
    keepalive_timeout = 10.0

    def __init__(self, bridge: "Bridge", config: "Config"):
        self.bridge = bridge
        self.config = config
        self.tasks = TaskSet(self.name)
        self.runner: Optional[web.AppRunner] = None
        self.port: Optional[int] = None
        self.sockets: set[web.WebSocketResponse] = set()
        self._unsubscribe = None
        self._listener: Optional[asyncio.AbstractServer] = None
        # wrong credentials slowed per address; unauthenticated connections capped per address
        self.limiter = AuthLimiter(rate=config.wrong_auth_rate, cap=config.unauth_per_address,
                                   refusal_body=REFUSAL_BODIES.get(self.name, REFUSED_JSON))
        self.limiter.trusted = tuple(getattr(config, "trusted_proxies", ()))
        self.counts = FrontEndCounts()

    def connections(self) -> int:
        """Its open authenticated sockets (the metrics endpoint asks at scrape time); a front end whose
        sockets authenticate after the upgrade counts those that did."""
        return len(self.sockets)

    async def prepare(self) -> None:
        """Before the bridge starts: migrations, extra agent sources. The store is open."""

    def tls_changed(self, fingerprint: str) -> None:
        """The served certificate was reloaded (``TLSReloader``); its new SHA-256."""

    def build_app(self) -> web.Application:  # pragma: no cover - abstract
        raise NotImplementedError

    def on_event(self, seq: int, event: Any) -> None:
        """Hub subscriber: render and queue; must not await."""

    async def start(self, host: str, port: int, ssl_context: Optional[ssl.SSLContext] = None) -> int:
        app = self.build_app()
        app[STORE_KEY] = self.bridge.store  # frames wait for the writes queued before them (ws_text_sender)
        app[COUNTS_KEY] = self.counts
        # an address holds at most `unauth_per_address` connections that have not authenticated
        self.runner, self._listener, self.port = await listen(app, self.name, self.limiter, host, port, ssl_context,
                                                              self.keepalive_timeout)  # fmt: skip
        self._unsubscribe = self.bridge.hub.subscribe(self.on_event)
        return self.port

    async def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for ws in list(self.sockets):
            try:
                await asyncio.wait_for(ws.close(code=1001, message=b"server shutdown"), 1.0)
            except Exception:
                pass
        await self.tasks.close()
        listener, self._listener = self._listener, None
        runner, self.runner = self.runner, None
        await close_listener(runner, listener)
