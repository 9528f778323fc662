"""Who may talk to the bridge: the security rules every front end shares.

- ``client_address``: which address counts for limits and logs: the socket peer,
  or behind a ``--trusted-proxy`` the nearest untrusted forwarded hop
  (``resolve_client``, pure); this is the one place of that rule.
- ``parse_bearer`` / ``bearer_token``: the one ``Authorization: Bearer`` parser;
  ``same_secret``: the one constant-time comparison of credentials.
- ``loopback_refusal`` / ``require_loopback_admin``: the loopback-only
  endpoints (loopback peer, loopback ``Host``, no ``Origin``, no forwarding
  header, the admin key as a bearer).
- the admin key: ``write_admin_key`` / ``read_admin_key`` /
  ``remove_admin_key`` (``<data-dir>/run/admin.key``, 0600, new at every start).
- ``AuthLimiter``: wrong credentials from one address are answered at most
  ``rate`` per second (a valid credential is never slowed or refused), and at
  most ``cap`` connections per address may be unauthenticated at once
  (``guard`` wraps a listener's protocol factory for that).
- ``HelloLockout``: Pheby's spec lockout (5 failed hellos in 60 s), and only that.
- ``weak_secret_reason``, ``raise_nofile_limit``.

The rules and the threat model are in docs/security.md.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
import os
import resource
import secrets
import time
from typing import Any, Callable, Iterable, Mapping, Optional

from aiohttp import web

_log = logging.getLogger("agent_bridge.security")

FORWARDING_HEADERS = ("X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-IP", "Forwarded", "Via")
LOOPBACK_HOST_NAMES = ("127.0.0.1", "localhost", "[::1]")
ADMIN_KEY_FILE = "admin.key"
MIN_SECRET_LENGTH = 16
DEFAULT_WRONG_RATE = 20.0  # wrong credentials answered per second per address
DEFAULT_UNAUTH_PER_ADDRESS = 128  # connections per address not (yet) authenticated
MAX_TRACKED_ADDRESSES = 65536


# --- addresses ----------------------------------------------------------------------------------


def is_loopback(host: str) -> bool:
    """A loopback name or address (a bind address, a peer): ``localhost``, 127.0.0.0/8, ``::1``."""
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def normalize_address(addr: str) -> str:
    """An IPv4-mapped IPv6 address (``::ffff:127.0.0.1``) as its IPv4 form."""
    if addr[:7].lower() == "::ffff:" and "." in addr:
        return addr[7:]
    return addr


def transport_address(transport: Any) -> str:
    """The socket's peer address (never a header), or ``unknown``."""
    peer = transport.get_extra_info("peername") if transport is not None else None
    if isinstance(peer, (tuple, list)) and peer:
        return str(peer[0])
    return "unknown"


def peer_host(request: web.Request) -> str:
    """The socket's peer address as the socket reports it: never a header."""
    return transport_address(request.transport)


# --- trusted proxies: who the client is behind a reverse proxy (docs/remote-access.md) ---------------


def _hop_address(value: str) -> Optional[str]:
    """One hop of ``X-Forwarded-For`` or a ``Forwarded`` ``for=`` value as a bare address
    (port and brackets dropped), or None when it is not an IP address (``unknown``, ``_hidden``)."""
    v = value.strip().strip('"').strip()
    if v.startswith("["):
        v = v[1:].partition("]")[0]
    elif v.count(":") == 1:  # IPv4 with a port
        v = v.partition(":")[0]
    try:
        return normalize_address(str(ipaddress.ip_address(v)))
    except ValueError:
        return None


def forwarded_chain(headers: Mapping[str, str]) -> list[str]:
    """The hops a request's forwarded headers name, client first: every ``X-Forwarded-For`` (the
    header nginx and Caddy append to), else the ``for=`` of every ``Forwarded`` element. Pure."""
    getall = getattr(headers, "getall", None)
    xff = getall("X-Forwarded-For", []) if getall else ([headers["X-Forwarded-For"]] if "X-Forwarded-For" in headers else [])
    if xff:
        return [h.strip() for line in xff for h in line.split(",") if h.strip()]
    fwd = getall("Forwarded", []) if getall else ([headers["Forwarded"]] if "Forwarded" in headers else [])
    hops = []
    for line in fwd:
        for element in line.split(","):
            for pair in element.split(";"):
                key, _, val = pair.strip().partition("=")
                if key.strip().lower() == "for" and val:
                    hops.append(val.strip())
    return hops


def in_networks(addr: str, networks: Iterable[Any]) -> bool:
    try:
        ip = ipaddress.ip_address(normalize_address(addr))
    except ValueError:
        return False
    return any(ip.version == n.version and ip in n for n in networks)


def resolve_client(peer: str, headers: Mapping[str, str], trusted: Iterable[Any]) -> tuple[str, bool]:
    """``(address, ignored)`` for limits and logs (pure; the rule of docs/remote-access.md):

    from a peer in ``trusted`` (``--trusted-proxy``), the nearest untrusted hop of its forwarded
    headers, read from the right (each proxy appends the address it saw); when every hop is
    trusted, the farthest; an unparsable hop ends the walk at the trusted hop that reported it.
    From any other peer the headers are ignored: ``ignored`` is True when it sent some."""
    peer = normalize_address(peer)
    trusted = tuple(trusted)
    if not trusted or not in_networks(peer, trusted):
        return peer, "X-Forwarded-For" in headers or "Forwarded" in headers
    addr = peer
    for hop in reversed(forwarded_chain(headers)):
        parsed = _hop_address(hop)
        if parsed is None:
            break
        addr = parsed
        if not in_networks(parsed, trusted):
            break
    return addr, False


class ProxyRule:
    """One front end's trusted proxies, and which untrusted peers were already logged for sending
    forwarded headers (once each, at most ``max_logged`` of them). Set on the app by ``FrontEnd.start``."""

    def __init__(self, trusted: Iterable[Any] = (), name: str = "frontend", max_logged: int = 256):
        self.trusted = tuple(trusted)
        self.name = name
        self.max_logged = max_logged
        self._logged: set[str] = set()

    def resolve(self, peer: str, headers: Mapping[str, str]) -> str:
        addr, ignored = resolve_client(peer, headers, self.trusted)
        if ignored and addr not in self._logged and len(self._logged) < self.max_logged:
            self._logged.add(addr)
            _log.warning("%s: ignored X-Forwarded-For/Forwarded from %s, which is not a --trusted-proxy "
                         "(logged once per address)", self.name, addr)
        return addr


PROXY_RULE: web.AppKey = web.AppKey("agent_bridge_proxy_rule", ProxyRule)
_CLIENT: web.RequestKey[str] = web.RequestKey("agent_bridge_client_address", str)


def client_address(request: web.Request) -> str:
    """The address a request counts under, for limits and logs: the one place of the trusted-proxy
    rule (``resolve_client``); the socket peer when the app has no trusted proxy."""
    cached = request.get(_CLIENT)
    if cached is not None:
        return cached
    peer = peer_host(request)
    rule = request.app.get(PROXY_RULE) if request.app is not None else None
    addr = rule.resolve(peer, request.headers) if rule is not None else normalize_address(peer)
    request[_CLIENT] = addr
    return addr


# --- credentials --------------------------------------------------------------------------------


def parse_bearer(header: Optional[str], schemes: Iterable[str] = ("bearer",)) -> Optional[str]:
    """The credential of an ``Authorization`` value ``<scheme> <value>`` for one of ``schemes``
    (case-insensitive), else None. Pure: the one parser every front end's check goes through."""
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() not in schemes:
        return None
    return value.strip() or None


def bearer_token(request: web.Request, schemes: Iterable[str] = ("bearer",)) -> Optional[str]:
    """The credential of ``Authorization: Bearer <value>`` (or another of ``schemes``), else None."""
    return parse_bearer(request.headers.get("Authorization"), schemes)


def same_secret(given: str, expected: str) -> bool:
    """Constant-time comparison of two secrets (False when either is empty).

    Every credential check of every front end ends here. ``surrogatepass`` encodes
    any string (a header's undecodable bytes, a lone surrogate) without raising.
    """
    if not given or not expected:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass"))


def weak_secret_reason(name: str, value: Optional[str]) -> Optional[str]:
    """Why an environment secret is refused (naming the variable, never the value), or None."""
    if value and len(value) < MIN_SECRET_LENGTH:
        return f"{name} is too short: it must have at least {MIN_SECRET_LENGTH} characters (unset it to have one generated)"
    return None


# --- the loopback-only endpoints ------------------------------------------------------------------


def host_is_loopback(host: Optional[str]) -> bool:
    """A ``Host`` header naming 127.0.0.1, localhost or [::1], with any port (or none)."""
    if not host:
        return False
    host = host.strip().lower()
    if host.startswith("["):
        name, sep, rest = host.partition("]")
        name += sep
    else:
        name, sep, rest = host.partition(":")
        rest = sep + rest
    if rest and not (rest.startswith(":") and rest[1:].isdigit()):
        return False
    return name in LOOPBACK_HOST_NAMES


def loopback_refusal(peer: str, headers: Mapping[str, str], admin_key: str) -> Optional[tuple[str, bool]]:
    """Why a request to a loopback-only endpoint is refused, or None when it may be served.

    The answer is ``(reason, wrong_key)``; ``wrong_key`` is True when the only
    fault is a wrong admin key (a guess: the limiter slows it). Pure: no I/O.
    """
    if not is_loopback(normalize_address(peer)):
        return "loopback only", False
    for h in FORWARDING_HEADERS:
        if h in headers:
            return f"loopback only: refused a request forwarded by a proxy ({h})", False
    if not host_is_loopback(headers.get("Host")):
        return "loopback only: the Host must be 127.0.0.1, localhost or [::1]", False
    if "Origin" in headers:
        return "loopback only: requests from web pages (with an Origin) are refused", False
    given = parse_bearer(headers.get("Authorization"))
    if given is None:
        return "the admin key is required: Authorization: Bearer <data-dir>/run/admin.key", False
    if not same_secret(given, admin_key):
        return "wrong admin key", True
    return None


async def require_loopback_admin(request: web.Request, admin_key: str, limiter: "AuthLimiter",
                                 log: Any = None) -> Optional[web.Response]:
    """Every loopback-only endpoint starts here: None to serve, else the 403 to answer (nothing changed)."""
    refusal = loopback_refusal(peer_host(request), request.headers, admin_key)
    if refusal is None:
        limiter.passed(request)
        return None
    reason, wrong_key = refusal
    if wrong_key:
        await limiter.wrong(client_address(request))
    if log is not None:
        log.warning("refused %s %s from %s: %s", request.method, request.path, client_address(request), reason)
    return web.json_response({"error": {"code": "forbidden", "message": reason}}, status=403,
                             headers={"Cache-Control": "no-store"})


# --- the admin key --------------------------------------------------------------------------------


def admin_key_path(data_dir: str) -> str:
    return os.path.join(data_dir, "run", ADMIN_KEY_FILE)


def write_admin_key(data_dir: str) -> str:
    """A new admin key (256 bits) in ``<data-dir>/run/admin.key``, owner-only; returns it."""
    run = os.path.join(data_dir, "run")
    os.makedirs(run, mode=0o700, exist_ok=True)
    os.chmod(run, 0o700)
    key = secrets.token_urlsafe(32)
    path = admin_key_path(data_dir)
    tmp = path + ".tmp"
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(key + "\n")
    os.replace(tmp, path)
    return key


def read_admin_key(data_dir: str) -> Optional[str]:
    """The running server's admin key, or None when there is none. PermissionError propagates."""
    try:
        with open(admin_key_path(data_dir), "r", encoding="ascii") as f:
            return f.read().strip() or None
    except FileNotFoundError:
        return None


def admin_headers(data_dir: str) -> dict:
    """The header a local client (the CLI, a test, a benchmark) sends to a loopback-only endpoint."""
    return {"Authorization": f"Bearer {read_admin_key(data_dir) or ''}"}


def remove_admin_key(data_dir: str, key: str) -> None:
    """On shutdown: remove the key file if it still holds this run's key."""
    try:
        if same_secret(read_admin_key(data_dir) or "", key):
            os.unlink(admin_key_path(data_dir))
    except (OSError, ValueError):
        pass


# --- limits -----------------------------------------------------------------------------------------


class WrongSlots:
    """When the answer to a wrong credential from an address may go out (pure: the caller waits).

    Each address gets one answer slot every ``1/rate`` seconds: the first wrong
    attempt is answered at once, the next ones at the following free slots, so
    at most ``1 + rate * T`` are answered in any ``T`` seconds. Memory is
    bounded: addresses whose slot has passed are forgotten, and beyond
    ``max_addresses`` the least recently seen are.
    """

    def __init__(self, rate: float = DEFAULT_WRONG_RATE, max_addresses: int = MAX_TRACKED_ADDRESSES):
        self.interval = 1.0 / rate
        self.max_addresses = max_addresses
        self._next: dict[str, float] = {}

    def delay(self, addr: str, now: float) -> float:
        nxt = self._next.pop(addr, 0.0)
        slot = max(now, nxt)
        self._next[addr] = slot + self.interval  # re-inserted: the dict is oldest-seen first
        if len(self._next) > self.max_addresses:
            self._prune(now)
        return slot - now

    def _prune(self, now: float) -> None:
        """Forget addresses whose slot has passed, then the least recently seen, down to half the bound."""
        for addr in [a for a, t in self._next.items() if t <= now]:
            del self._next[addr]
        excess = len(self._next) - self.max_addresses // 2
        if excess > 0:
            for addr in list(self._next)[:excess]:
                del self._next[addr]

    def __len__(self) -> int:
        return len(self._next)


class UnauthPool:
    """Counts the connections that have not authenticated, per address and in all (pure).

    ``cap`` bounds one address; ``total_cap`` bounds every address together (a
    share of the descriptor limit: ``unauth_total_for``), so that many
    addresses cannot exhaust descriptors either.
    """

    def __init__(self, cap: int = DEFAULT_UNAUTH_PER_ADDRESS, total_cap: Optional[int] = None):
        self.cap = cap
        self.total_cap = total_cap
        self._count: dict[str, int] = {}
        self.total = 0
        self.refused = 0

    def enter(self, addr: str, per_address: bool = True) -> bool:
        """Admit one more unauthenticated connection from ``addr``; ``per_address=False`` (a trusted
        proxy, whose connections are many clients') counts it only against the total."""
        n = self._count.get(addr, 0)
        if (per_address and n >= self.cap) or (self.total_cap is not None and self.total >= self.total_cap):
            self.refused += 1
            return False
        self._count[addr] = n + 1
        self.total += 1
        return True

    def leave(self, addr: str) -> None:
        n = self._count.get(addr, 0) - 1
        if n < 0:
            return
        self.total -= 1
        if n > 0:
            self._count[addr] = n
        else:
            self._count.pop(addr, None)

    def count(self, addr: str) -> int:
        return self._count.get(addr, 0)


REFUSED_JSON = b'{"error":{"code":"rate_limited","message":"Too many unauthenticated connections from this address"}}'


def _refusal(body: bytes) -> bytes:
    return (b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nCache-Control: no-store\r\n"
            b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


class _Guarded:
    """An asyncio protocol in front of aiohttp's: keeps the connection in its address's
    unauthenticated pool until a handler calls ``AuthLimiter.passed``, or refuses it at
    once (429, closed) when the pool is full."""

    __slots__ = ("_inner", "_limiter", "addr", "pooled", "admitted")

    def __init__(self, inner: Any, limiter: "AuthLimiter"):
        self._inner = inner
        self._limiter = limiter
        self.addr = ""
        self.pooled = False
        self.admitted = False

    def connection_made(self, transport: Any) -> None:
        self.addr = normalize_address(transport_address(transport))
        proxy = bool(self._limiter.trusted) and in_networks(self.addr, self._limiter.trusted)
        if not self._limiter.pool.enter(self.addr, per_address=not proxy):
            try:
                transport.write(self._limiter.refusal)
            finally:
                transport.close()
            return
        self.pooled = self.admitted = True
        self._inner.connection_made(transport)

    def leave_pool(self) -> None:
        if self.pooled:
            self.pooled = False
            self._limiter.pool.leave(self.addr)

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        self.leave_pool()
        if self.admitted:
            self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.admitted:
            self._inner.data_received(data)

    def eof_received(self) -> Any:
        if self.admitted:
            return self._inner.eof_received()
        return None

    def pause_writing(self) -> None:
        if self.admitted:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self.admitted:
            self._inner.resume_writing()


class AuthLimiter:
    """One front end's limits on authentication (one instance per front end, shared by all its credentials).

    - ``await wrong(addr)`` before answering a wrong credential: the answer waits
      for the address's next slot (``WrongSlots``); a valid credential never calls it.
    - ``passed(request)`` once a request or socket presented a valid credential:
      its connection leaves the unauthenticated pool.
    - ``guard(factory)`` wraps a listener's protocol factory so that each
      address holds at most ``cap`` unauthenticated connections; one more is
      answered 429 and closed before anything is read.
    """

    def __init__(self, rate: float = DEFAULT_WRONG_RATE, cap: int = DEFAULT_UNAUTH_PER_ADDRESS,
                 refusal_body: bytes = REFUSED_JSON, clock: Callable[[], float] = time.monotonic):
        self.slots = WrongSlots(rate)
        self.pool = UnauthPool(cap)
        self.refusal = _refusal(refusal_body)
        self.clock = clock
        self.wrong_total = 0
        # --trusted-proxy networks: a proxy's connections are many clients', so the per-address cap
        # of unauthenticated connections does not apply to it (the total cap still does)
        self.trusted: tuple = ()

    async def wrong(self, addr: str) -> None:
        self.wrong_total += 1
        wait = self.slots.delay(addr, self.clock())
        if wait > 0:
            await asyncio.sleep(wait)

    def passed(self, request: Any) -> None:
        transport = getattr(request, "transport", request)
        proto = transport.get_protocol() if transport is not None else None
        if isinstance(proto, _Guarded):
            proto.leave_pool()

    def fit_to_descriptors(self) -> None:
        """Bound the pool by the descriptor limit (call once it is raised): in all a quarter of it,
        and one address at most a quarter of that, so one address never fills the whole share."""
        total = unauth_total_for()
        self.pool.total_cap = total
        self.pool.cap = min(self.pool.cap, max(1, total // 4))

    def guard(self, factory: Callable[[], Any]) -> Callable[[], Any]:
        def make() -> _Guarded:
            return _Guarded(factory(), self)

        return make


class HelloLockout:
    """Pheby's spec lockout: ``limit`` failed hellos from one address within ``window`` seconds
    refuse that address's further connections until the window has passed. Nothing else uses it."""

    def __init__(self, limit: int = 5, window: float = 60.0, max_addresses: int = MAX_TRACKED_ADDRESSES):
        self.limit = limit
        self.window = window
        self.max_addresses = max_addresses
        self._fails: dict[str, list[float]] = {}

    def _recent(self, addr: str, now: float) -> list[float]:
        times = [t for t in self._fails.get(addr, ()) if now - t < self.window]
        if times:
            self._fails[addr] = times
        else:
            self._fails.pop(addr, None)
        return times

    def locked(self, addr: str) -> bool:
        return len(self._recent(addr, time.monotonic())) >= self.limit

    def fail(self, addr: str) -> None:
        now = time.monotonic()
        self._recent(addr, now)
        self._fails.setdefault(addr, []).append(now)
        if len(self._fails) > self.max_addresses:  # bound memory under an address flood
            for k in list(self._fails)[: self.max_addresses // 2]:
                self._fails.pop(k, None)


# --- process limits ---------------------------------------------------------------------------------


def _descriptor_limit() -> int:
    """This process's soft RLIMIT_NOFILE (an unlimited one counted as 2**20)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 20 if soft == resource.RLIM_INFINITY else soft


def unauth_total_for(frontends: int = 3) -> int:
    """How many unauthenticated connections one front end may hold in all: a quarter of the
    descriptor limit each (so three front ends leave room for the authenticated and the files)."""
    return max(16, _descriptor_limit() // (frontends + 1))


LISTEN_QUEUE = 4096  # connections the kernel holds for a listener before it drops new ones


def accept_batch_for(frontends: int = 3) -> int:
    """How many connections one listener accepts per event-loop turn.

    asyncio accepts up to its ``backlog`` argument in one turn, and a connection
    refused at once (``_Guarded``) still holds its descriptor for a few turns until
    the transport closes. So a flood that waited in the kernel's queue (the bridge
    was busy) must not be taken in one go: a turn's batch is a small share of the
    descriptor limit (with three front ends and three turns in flight, under a
    seventh of it), never over ``LISTEN_QUEUE``. The kernel's own queue stays
    ``LISTEN_QUEUE`` long (``FrontEnd.start``), so nothing waiting is dropped.
    """
    return max(4, min(LISTEN_QUEUE, _descriptor_limit() // (frontends * 3 * 7)))


def raise_nofile_limit(want: Optional[int] = None) -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (or towards ``want``); the new soft limit.

    Children inherit it. Called at start by ``serve`` (and the Hermes host), so a
    low default soft limit does not run the listeners out of descriptors.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        target = max(soft, want or (1 << 20))
    else:
        target = hard if want is None else min(max(soft, want), hard)
    if target != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
