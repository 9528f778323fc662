"""Per-connection Pheby state machine, without I/O.

Feed it each inbound text frame with the current time; it answers with a
``Step``: frames to send now, a shared command to execute, and whether to
close (with which WebSocket close code). Handshake: the first frame must be a
valid ``hello`` with the right secret and protocol version.
"""

from __future__ import annotations

from typing import Any, Optional

import attrs

from bridge_core.errors import (
    BadRequest,
    BridgeError,
    RateLimited,
    TooLarge,
    Unauthorized,
    VersionMismatch,
)
from bridge_core.ratelimit import TokenBucket
from bridge_core.security import same_secret
from bridge_core.wire import loads_object

from . import codec

CLOSE_NORMAL = 1000
CLOSE_POLICY = 1008
CLOSE_TOO_BIG = 1009
CLOSE_TRY_AGAIN = 1013


@attrs.define
class Step:
    frames: list = attrs.field(factory=list)
    command: Any = None
    close: Optional[int] = None
    auth_failed: bool = False
    authenticated: bool = False


class PhebySession:
    def __init__(self, secret: str, now: float, *, rate: float = 100.0, burst: float = 200.0):
        self._secret = secret
        self.state = "hello"  # hello -> ready -> closed
        self.bucket = TokenBucket(rate, burst, now)
        self.rate_limited = 0

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    def _fail(self, err: BridgeError, request_id: Optional[str], now: float, close: Optional[int]) -> Step:
        step = Step(frames=[codec.error_frame(err, request_id, now)], close=close)
        if close is not None:
            self.state = "closed"
        return step

    def feed(self, raw: Any, now: float) -> Step:
        if self.state == "closed":
            return Step()
        size = len(raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw)
        if size > codec.MAX_FRAME:
            return self._fail(TooLarge("Frame larger than 2 MiB"), None, now, CLOSE_TOO_BIG)
        rid: Optional[str] = None
        try:
            frame = loads_object(raw)
            rid = codec.request_id_of(frame)
            if self.state == "hello":
                return self._hello(frame, rid, now)
            if not self.bucket.take(now):
                self.rate_limited += 1
                raise RateLimited("Too many messages; slow down")
            decoded = codec.decode_request(frame)
        except BridgeError as err:
            if self.state == "hello":
                return self._auth_failure(Unauthorized("First frame must be hello"), rid, now)
            return self._fail(err, rid, now, None)
        if isinstance(decoded, codec.Ping):
            return Step(frames=[codec.pong_frame(now, decoded.request_id)])
        if isinstance(decoded, codec.Hello):
            return self._fail(BadRequest("Already authenticated"), decoded.request_id, now, None)
        return Step(command=decoded)

    def _hello(self, frame: dict, rid: Optional[str], now: float) -> Step:
        if frame.get("type") != "hello":
            return self._auth_failure(Unauthorized("First frame must be hello"), rid, now)
        version = frame.get("protocol_version")
        if version != codec.PROTOCOL_VERSION or isinstance(version, bool):
            return self._fail(
                VersionMismatch(f"Server speaks protocol_version {codec.PROTOCOL_VERSION}"), rid, now, CLOSE_POLICY
            )
        secret = frame.get("secret")
        if not isinstance(secret, str) or not same_secret(secret, self._secret):
            return self._auth_failure(Unauthorized("Invalid secret"), rid, now)
        self.state = "ready"
        ready = codec.ready_frame(now)
        if rid is not None:
            ready["request_id"] = rid
        return Step(frames=[ready], authenticated=True)

    def _auth_failure(self, err: BridgeError, rid: Optional[str], now: float) -> Step:
        step = self._fail(err, rid, now, CLOSE_POLICY)
        step.auth_failed = True
        return step

