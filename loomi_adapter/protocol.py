"""One Loomi socket's protocol, without I/O (docs/loomi.md; python-websockets' ``protocol.py`` and h11's
state tables are the models).

The server feeds it what it reads and what the clock and the registry say; it answers with the frames
to write and with commands for the I/O side, and holds every rule of a connection:

- ``receive(text, now)`` / ``receive_binary(now)``: the handshake (``hello`` first, exactly once, a
  pairing token or a device credential: ``Authenticate``), then requests: the rate limit (a token
  bucket, pongs exempt), ``ping`` answered at once, a ``pong`` for the heartbeat, every other request
  queued (at most ``MAX_QUEUED_REQUESTS``; ``next_request``), a bad frame answered and never fatal;
- ``open(...)``: the registry's outcome of a good hello: ``hello.ok`` carrying the app's ``last_seq``
  (never a new seq), then the replayed frames, and the takeover of the device's older socket; or
  ``refuse(exc)``;
- requests (``next_request``, then ``done`` / ``failed`` / ``joined`` / ``interrupted``): one execution
  per ``(type, request_id)`` per device (its ``RequestCache``), a repeat answered with the first
  result, a repeat of a request still running answered when it ends;
- ``tick(now)``: the hello deadline, then a ``ping`` every ``ping_interval`` (after ``CHECK``: is the
  device still this node's?) and ``max_missed`` pings without a pong within ``pong_timeout`` closing
  the socket (``next_tick`` says when to call it);
- ``fail(exc)``: a fatal error: ``Close`` with its close code, its ``error`` frame numbered and queued.

Frames go into ``out`` (anything with ``put``: the server's outbox), or, by default, into a list that
``frames_to_send()`` empties. Every frame after ``hello.ok`` takes the device's next seq from the
``next_seq`` the registry gave ``open``, and goes into ``out`` in the same step, so a connection's
seqs leave in the order they were taken whatever the I/O side awaits (the fatal error too: issue 41,
a request's answer numbered after it was written before it); before it, seq 0. An event's frames are
not this object's: the node numbers them for every device at once (``replay.Numbering``, the one seq
rule) and puts them into each open connection's ``out``, with no per-connection step on the hot path.

    AWAIT_HELLO --hello--> AUTHENTICATING --open--> OPEN --fail--> CLOSING --closed--> CLOSED
    (fail and closed from any state; any other move raises ProtocolStateError)
"""

from __future__ import annotations

import collections
import enum
from typing import Any, Callable, Optional, Union

import attrs

from bridge_core.model.errors import (AuthTimeout, BadRequest, BridgeError, RateLimited, Unauthorized, Unavailable,
                                VersionMismatch)
from bridge_core.model.ratelimit import TokenBucket

from . import codec
from .errors import HeartbeatTimeout, Replaced, Revoked, close_code, error_payload
from .idempotency import RequestCache
from .replay import Resume

MAX_SECRET = 256
MAX_DEVICE_ID = 64
MAX_INFO = 200
MAX_SEQ = 2**53 - 1  # a seq any app's JSON parser holds exactly
MAX_QUEUED_REQUESTS = 64


class ProtocolStateError(RuntimeError):
    """The I/O side asked for something the connection's state does not allow (a bug there, not the peer's)."""


class State(enum.Enum):
    AWAIT_HELLO = "await_hello"
    AUTHENTICATING = "authenticating"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


_NEXT = {
    State.AWAIT_HELLO: {State.AUTHENTICATING, State.CLOSING, State.CLOSED},
    State.AUTHENTICATING: {State.OPEN, State.CLOSING, State.CLOSED},
    State.OPEN: {State.CLOSING, State.CLOSED},
    State.CLOSING: {State.CLOSED},
    State.CLOSED: set(),
}


@attrs.frozen
class Settings:
    """A front end's protocol settings (the ``[loomi]`` section: docs/loomi.md "Heartbeat")."""

    hello_timeout: float = 9.0
    ping_interval: float = 25.0
    pong_timeout: float = 10.0  # a ping is missed without a pong by then
    max_missed: int = 3
    rate: float = 100.0  # frames per second per socket (pongs exempt)
    burst: float = 200.0
    server_name: str = ""
    server_version: str = "0"


# --- the handshake ---------------------------------------------------------------------


@attrs.frozen
class PairHello:
    """A new device presenting a one-time pairing token."""

    token: str = attrs.field(repr=False)
    info: codec.DeviceInfo


@attrs.frozen
class ResumeHello:
    """A paired device presenting its credential."""

    device_id: str
    credential: str = attrs.field(repr=False)
    last_seq: Optional[int]
    info: codec.DeviceInfo


Handshake = Union[PairHello, ResumeHello]


def _clip_info(info: Optional[codec.DeviceInfo]) -> codec.DeviceInfo:
    if info is None:
        return codec.DeviceInfo()
    return codec.DeviceInfo(
        **{k: (v[:MAX_INFO] if isinstance(v, str) else v) for k, v in attrs.asdict(info).items()}
    )


def classify_hello(h: codec.Hello) -> Handshake:
    if h.protocol_version is not None and h.protocol_version != codec.PROTOCOL_VERSION:
        raise VersionMismatch(f"Unsupported protocol version; this server speaks {codec.PROTOCOL_VERSION}")
    info = _clip_info(h.device_info)
    if h.token is not None:
        if h.device_id is not None or h.credential is not None:
            raise Unauthorized("A pairing hello carries a token and no device credential")
        if not h.token or len(h.token) > MAX_SECRET:
            raise Unauthorized("Invalid or expired pairing token")
        return PairHello(token=h.token, info=info)
    if h.device_id is None or h.credential is None:
        raise Unauthorized("hello needs a pairing token, or a device_id and credential")
    if not h.device_id or len(h.device_id) > MAX_DEVICE_ID or not h.credential or len(h.credential) > MAX_SECRET:
        raise Unauthorized("Unknown device or wrong credential")
    if h.last_seq is not None and not 0 <= h.last_seq <= MAX_SEQ:
        raise BadRequest(f"last_seq must be an integer in [0, {MAX_SEQ}]", fatal=True)
    return ResumeHello(device_id=h.device_id, credential=h.credential, last_seq=h.last_seq, info=info)


def parse_hello(data: Union[str, bytes]) -> Handshake:
    """The first frame: a hello, or a fatal error (nothing but a good hello opens a socket)."""
    try:
        frame = codec.parse_frame(data)
        if frame.type != "hello":
            raise Unauthorized("The first frame must be a hello")
        return classify_hello(codec.decode_request(frame))
    except BridgeError as exc:
        exc.fatal = True
        raise


# --- the heartbeat's books --------------------------------------------------------------


class Heartbeat:
    """A server ping is missed when no pong came within ``pong_timeout`` of it; ``max_missed`` misses
    in a row end the socket. Any pong answers every ping outstanding."""

    __slots__ = ("max_missed", "pong_timeout", "missed", "_deadlines")

    def __init__(self, max_missed: int = 3, pong_timeout: float = 10.0):
        self.max_missed = max_missed
        self.pong_timeout = pong_timeout
        self.missed = 0  # pings missed in a row
        self._deadlines: collections.deque[float] = collections.deque()  # of the pings not yet answered

    def ping_sent(self, now: float) -> None:
        """A server ping left at ``now``: a pong is due within ``pong_timeout``."""
        self._deadlines.append(now + self.pong_timeout)

    def pong(self) -> None:
        self.missed = 0
        self._deadlines.clear()

    def expire(self, now: float) -> Optional[float]:
        """Count the pings whose pong deadline passed by ``now`` as missed; raises HeartbeatTimeout at
        ``max_missed`` in a row. Returns the next deadline to check, or None."""
        dl = self._deadlines
        while dl and dl[0] <= now:
            dl.popleft()
            self.missed += 1
        if self.missed >= self.max_missed:
            raise HeartbeatTimeout(f"No pong to {self.missed} pings in a row")
        return dl[0] if dl else None

    @property
    def deadline(self) -> Optional[float]:
        """The first pong deadline still open."""
        return self._deadlines[0] if self._deadlines else None


# --- commands for the I/O side ------------------------------------------------------------


@attrs.frozen
class Authenticate:
    """Look the hello's pairing token or credential up; answer with ``open`` or ``refuse``."""

    hello: Handshake


@attrs.frozen
class Close:
    """``target``'s fatal error was decided: its ``error`` frame leaves, then the socket closes with ``code``.

    ``queued``: the frame was numbered and put into ``out`` already (after ``hello.ok``): the I/O side
    flushes it. Else ``frame`` (seq 0, before ``hello.ok``: nothing is ordered with it) is the I/O side's
    to write at once; None: no frame (a second fatal error, or one without a farewell)."""

    target: "LoomiProtocol" = attrs.field(repr=False, eq=False)
    code: int
    reason: str
    payload: dict
    frame: Optional[bytes] = attrs.field(default=None, repr=False, eq=False)
    queued: bool = False


class _Signal(enum.Enum):
    REQUEST = "request"  # a request was queued: ``next_request``
    CHECK = "check"  # a ping is due: is the device still this node's? answer with ``checked``


REQUEST = _Signal.REQUEST
CHECK = _Signal.CHECK
Command = Union[Authenticate, Close, _Signal]


class Pending:
    """A request running on one socket that a repeat (maybe on another socket of the device) waits for."""

    __slots__ = ("outcome", "_then")

    def __init__(self) -> None:
        self.outcome: Optional[tuple[bool, Any]] = None
        self._then: list[Callable[[bool, Any], None]] = []

    def then(self, fn: Callable[[bool, Any], None]) -> None:
        """Call ``fn(ok, value)`` with the outcome (at once if known)."""
        if self.outcome is not None:
            fn(*self.outcome)
        else:
            self._then.append(fn)

    def settle(self, ok: bool, value: Any) -> None:
        self.outcome = (ok, value)
        then, self._then = self._then, []
        for fn in then:
            fn(ok, value)


@attrs.define
class Job:
    """A request to serve. ``command``: the core command to execute (None: answered already, or
    ``joined`` is the same request running, whose outcome is the answer)."""

    req: Any
    command: Any = None
    key: Optional[tuple[str, str]] = None
    pending: Optional[Pending] = None
    joined: Optional[Pending] = None

    @property
    def request_id(self) -> Optional[str]:
        return getattr(self.req, "request_id", None)


class _Frames(list):
    put = list.append


class LoomiProtocol:
    """One socket's state: handshake, device, seqs of replies, requests, heartbeat and rate."""

    def __init__(self, settings: Settings = Settings(), *, now: float = 0.0, out: Any = None):
        self.settings = settings
        self.state = State.AWAIT_HELLO
        self.hello_deadline = now + settings.hello_timeout
        self.out = out if out is not None else _Frames()
        self.device_id: Optional[str] = None
        self.requests: Optional[RequestCache] = None  # the device's (idempotency.py), at open
        self._next_seq: Optional[Callable[[], int]] = None
        self.heartbeat = Heartbeat(settings.max_missed, settings.pong_timeout)
        self.next_ping = float("inf")
        self.bucket = TokenBucket(settings.rate, settings.burst)
        self.rate_limited = 0
        self.waiting: collections.deque[Any] = collections.deque()  # requests queued, not yet started

    # --- state -------------------------------------------------------------------------------

    def _to(self, state: State) -> None:
        if state not in _NEXT[self.state]:
            raise ProtocolStateError(f"{self.state.value} -> {state.value}")
        self.state = state

    @property
    def closing(self) -> bool:
        return self.state is State.CLOSING or self.state is State.CLOSED

    def closed(self) -> None:
        """The socket is gone."""
        if self.state is not State.CLOSED:
            self._to(State.CLOSED)

    def frames_to_send(self) -> list[bytes]:
        """The frames written since the last call (with the default ``out``; the server's outbox writes them)."""
        out = self.out
        if not isinstance(out, _Frames):
            return []
        frames = list(out)
        out.clear()
        return frames

    # --- frames out --------------------------------------------------------------------------

    def _seq(self) -> int:
        return self._next_seq() if self._next_seq is not None else 0

    def reply(self, type_: str, payload: dict) -> None:
        """A reply frame (not replayed): the device's next seq, or 0 before authentication, taken and
        queued in one step (after a fatal error too: behind it, written if the socket is still open)."""
        self.out.put(codec.frame(self._seq(), type_, payload))

    def error(self, exc: BaseException, request_id: Optional[str] = None) -> None:
        """An ``error`` frame (a non-BridgeError becomes a detail-free internal_error)."""
        self.reply("error", error_payload(exc, request_id))

    def fail(self, exc: BridgeError, *, farewell: bool = True) -> Close:
        """A fatal error: the socket closes. Its ``error`` frame is numbered and queued here, in one step,
        behind every frame numbered before it and before any numbered after it (a request's answer due
        while the close is written). Before ``hello.ok`` (seq 0) the frame is the I/O side's to write
        (``Close.frame``). Only the first fatal error has a frame; ``farewell=False``: none (the device's
        seqs are another node's now)."""
        first = not self.closing
        if first:
            self._to(State.CLOSING)
        payload = error_payload(exc)
        payload["fatal"] = True
        code = payload["code"]
        if not (first and farewell):
            return Close(self, close_code(code), code, payload)
        if self._next_seq is None:
            return Close(self, close_code(code), code, payload, codec.frame(0, "error", payload))
        frame = codec.frame(self._next_seq(), "error", payload)
        self.out.put(frame)
        return Close(self, close_code(code), code, payload, frame, queued=True)

    # --- frames in ---------------------------------------------------------------------------

    def receive(self, data: Union[str, bytes], now: float) -> list[Command]:
        """A text frame from the peer."""
        state = self.state
        if state is State.OPEN:
            return self._request(data, now)
        if state is State.AWAIT_HELLO:
            try:
                hello = parse_hello(data)
            except BridgeError as exc:
                return [self.fail(exc)]
            self._to(State.AUTHENTICATING)
            return [Authenticate(hello)]
        if state is State.AUTHENTICATING:
            raise ProtocolStateError("a frame while the hello is being authenticated")
        return []  # closing: nothing more is answered

    def receive_binary(self, now: float) -> list[Command]:
        """A binary frame from the peer (reserved by the spec)."""
        if self.state is State.AWAIT_HELLO:
            return [self.fail(Unauthorized("The first frame must be a hello"))]
        if self.state is State.OPEN:
            self.error(BadRequest("Binary frames are reserved"))
        return []

    def allow(self, now: float) -> bool:
        """The token bucket: ``rate`` frames per second, bursts up to ``burst``; False = answer rate_limited."""
        if self.bucket.take(now):
            return True
        self.rate_limited += 1
        return False

    def _request(self, data: Union[str, bytes], now: float) -> list[Command]:
        try:
            frame = codec.parse_frame(data)
        except BridgeError as exc:
            if exc.fatal:  # one bad frame on an open socket is answered, never a reason to close it
                exc = BridgeError(exc.message, code=exc.code, fatal=False)
            self.error(exc if self.allow(now) else RateLimited("Too many frames; slow down"))
            return []
        rid = frame.request_id
        if frame.type != "pong" and not self.allow(now):
            self.error(RateLimited("Too many frames; slow down"), rid)
            return []
        try:
            if frame.type == "hello":
                raise BadRequest("Already authenticated")
            req = codec.decode_request(frame)
        except BridgeError as exc:
            self.error(exc, rid)
            return []
        t = type(req)
        if t is codec.Ping:
            self.reply("pong", {})
        elif t is codec.Pong:
            self.heartbeat.pong()
        elif len(self.waiting) >= MAX_QUEUED_REQUESTS:
            self.error(RateLimited("Too many requests in flight"), getattr(req, "request_id", None))
        else:
            self.waiting.append(req)
            return [REQUEST]
        return []

    # --- the handshake's outcome ---------------------------------------------------------------

    def refuse(self, exc: BridgeError) -> Close:
        """The hello was refused (unknown device, wrong credential, used token...): fatal."""
        if self.state is not State.AUTHENTICATING:
            raise ProtocolStateError(f"refuse in {self.state.value}")
        return self.fail(exc)

    def open(self, device_id: str, resume: Resume, *, next_seq: Callable[[], int], requests: RequestCache,
             now: float, credential: Optional[str] = None,
             previous: Optional["LoomiProtocol"] = None) -> list[Command]:
        """The hello was accepted: ``hello.ok`` (its seq the one the app reported, or the device's
        current one: never a new one, docs/loomi.md "Handshake"), then the replayed frames above it.
        The device's older socket (``previous``) is replaced: a device has one socket."""
        self._to(State.OPEN)
        cmds: list[Command] = []
        if previous is not None:
            cmds += previous.replaced()
        self.device_id = device_id
        self._next_seq = next_seq
        self.requests = requests
        self.next_ping = now + self.settings.ping_interval
        s = self.settings
        put = self.out.put
        put(codec.frame(resume.seq, "hello.ok", codec.hello_ok(
            device_id=device_id, credential=credential, server_name=s.server_name,
            server_version=s.server_version, truncated=resume.truncated,
        )))
        for f in resume.frames:
            put(f)
        return cmds

    def replaced(self) -> list[Command]:
        """The same device completed a hello on another socket: this one goes (``replaced``, 4000)."""
        if self.closing:
            return []
        return [self.fail(Replaced())]

    # --- requests ------------------------------------------------------------------------------

    def next_request(self) -> Optional[Job]:
        """The next queued request to serve, in order (None: none waiting)."""
        if not self.waiting:
            return None
        req = self.waiting.popleft()
        t = type(req)
        rid = getattr(req, "request_id", None)
        try:
            command = codec.to_command(req)
        except BridgeError as exc:
            self.error(exc, rid)
            return Job(req)
        if t is codec.TaskList or rid is None:
            return Job(req, command)
        key = (codec.TYPE_OF[t], rid)
        assert self.requests is not None
        entry = self.requests.lookup(key)
        if entry is not None:
            if entry.done:  # a repeat of a request that succeeded: the same result, nothing runs again
                self._ack(rid, entry.value)
                return Job(req, key=key)
            return Job(req, key=key, joined=entry.value)  # it is running: its outcome answers this one too
        pending = Pending()
        self.requests.start(key, pending)
        return Job(req, command, key, pending)

    def _ack(self, rid: str, result: Any) -> None:
        self.reply("ack", {"request_id": rid, "ok": True, "result": result})

    def done(self, job: Job, result: Any) -> None:
        """The core executed ``job.command`` and returned ``result``."""
        req = job.req
        rid = job.request_id
        if type(req) is codec.TaskList:
            self.reply("task.list.result", {"request_id": rid, "tasks": [codec.task_dict(c) for c in result]})
            return
        if job.pending is None:
            return  # no request_id: only failures are answered
        value = codec.result_of(req, result)
        assert self.requests is not None and job.key is not None
        self.requests.succeeded(job.key, job.pending, value)
        job.pending.settle(True, value)
        self._ack(rid, value)  # type: ignore[arg-type]

    def failed(self, job: Job, exc: BridgeError) -> None:
        """``job.command`` failed: it did nothing, so a retry may run it (nothing is remembered)."""
        self._forget(job, exc)
        self.error(exc, job.request_id)

    def interrupted(self, job: Job) -> None:
        """``job.command`` was cut short (the socket went): a repeat waiting for it is told, a retry runs."""
        self._forget(job, Unavailable("Request interrupted"))

    def _forget(self, job: Job, exc: BridgeError) -> None:
        if job.pending is not None and job.key is not None and job.pending.outcome is None:
            assert self.requests is not None
            self.requests.failed(job.key, job.pending)
            job.pending.settle(False, exc)

    def joined(self, job: Job, ok: bool, value: Any) -> None:
        """The request ``job`` repeated ended: its outcome answers this one."""
        if ok:
            self._ack(job.request_id, value)  # type: ignore[arg-type]
        else:
            self.error(value, job.request_id)

    # --- time ----------------------------------------------------------------------------------

    def next_tick(self) -> Optional[float]:
        """When ``tick`` has something to do next (None: nothing, the socket is closing)."""
        if self.state is State.AWAIT_HELLO:
            return self.hello_deadline
        if self.state is not State.OPEN:
            return None
        deadline = self.heartbeat.deadline
        return self.next_ping if deadline is None else min(self.next_ping, deadline)

    def tick(self, now: float) -> list[Command]:
        """The clock reached ``now``: the hello deadline, missed pongs, a ping due (``CHECK`` first)."""
        if self.state is State.AWAIT_HELLO:
            return [self.fail(AuthTimeout())] if now >= self.hello_deadline else []
        if self.state is not State.OPEN:
            return []
        try:
            self.heartbeat.expire(now)
        except HeartbeatTimeout as exc:
            return [self.fail(exc)]
        return [CHECK] if now >= self.next_ping else []

    def checked(self, now: float, gone: Optional[str]) -> list[Command]:
        """The answer to ``CHECK``: ``revoked``, ``replaced`` (by a hello on another node) or None; then the ping."""
        if gone is not None:
            return [self.fail(Revoked() if gone == "revoked" else Replaced())]
        self.reply("ping", {})
        self.heartbeat.ping_sent(now)
        self.next_ping = now + self.settings.ping_interval
        return []
