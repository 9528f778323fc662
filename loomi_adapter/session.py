"""The per-connection state machine of a Loomi socket, without I/O.

Feed it the first frame (``receive_hello``), then each parsed frame
(``request``); it returns a typed request, or raises the error to send. It enforces the handshake (``hello``
first, exactly once, either a pairing token or a device id + credential),
and keeps the heartbeat's books (``ping_sent`` / ``expire``, docs/loomi.md
"Heartbeat"): a server ping is missed when no pong came within
``pong_timeout`` of it, and ``max_missed`` misses in a row close the socket.

    HELLO --hello ok--> OPEN --close--> CLOSED
"""

from __future__ import annotations

import collections
import enum
from typing import Any, Optional, Union

import attrs

from bridge_core.model.errors import BadRequest, BridgeError, Unauthorized, VersionMismatch
from bridge_core.model.ratelimit import TokenBucket

from . import codec
from .errors import HeartbeatTimeout

MAX_SECRET = 256
MAX_DEVICE_ID = 64
MAX_INFO = 200
MAX_SEQ = 2**53 - 1  # a seq any app's JSON parser holds exactly


class Phase(enum.Enum):
    HELLO = "hello"
    OPEN = "open"
    CLOSED = "closed"


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


class Session:
    """One socket's protocol state: handshake phase, heartbeat accounting, request rate."""

    def __init__(self, max_missed: int = 3, *, pong_timeout: float = 10.0, rate: float = 100.0,
                 burst: float = 200.0):
        self.phase = Phase.HELLO
        self.device_id: Optional[str] = None
        self.max_missed = max_missed
        self.pong_timeout = pong_timeout
        self.missed = 0  # pings missed in a row
        self._deadlines: collections.deque[float] = collections.deque()  # of the pings not yet answered
        self.rate = rate
        self.burst = burst
        self.bucket = TokenBucket(rate, burst)
        self.rate_limited = 0

    def allow(self, now: float) -> bool:
        """The shared token bucket: ``rate`` frames per second, bursts up to ``burst``; False = answer rate_limited."""
        if self.bucket.take(now):
            return True
        self.rate_limited += 1
        return False

    def receive_hello(self, data: Union[str, bytes]) -> Handshake:
        """The first frame: a hello, or a fatal error."""
        if self.phase is not Phase.HELLO:
            raise BadRequest("Already authenticated")
        try:
            frame = codec.parse_frame(data)
            if frame.type != "hello":
                raise Unauthorized("The first frame must be a hello")
            return classify_hello(codec.decode_request(frame))
        except BridgeError as exc:
            exc.fatal = True  # nothing but a good hello opens a socket
            raise

    def request(self, frame: codec.ClientFrame) -> Any:
        """A request on an open socket (its envelope already parsed)."""
        if self.phase is not Phase.OPEN:
            raise BadRequest("Not open")
        if frame.type == "hello":
            raise BadRequest("Already authenticated")
        req = codec.decode_request(frame)
        if type(req) is codec.Pong:
            self.pong()
        return req

    def opened(self, device_id: str) -> None:
        self.phase = Phase.OPEN
        self.device_id = device_id
        self.missed = 0
        self._deadlines.clear()

    def closed(self) -> None:
        self.phase = Phase.CLOSED

    # --- heartbeat -----------------------------------------------------------------

    def ping_sent(self, now: float) -> None:
        """A server ping left at ``now``: a pong is due within ``pong_timeout``."""
        self._deadlines.append(now + self.pong_timeout)

    def pong(self) -> None:
        """A pong answers every ping outstanding and resets the count of misses."""
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
