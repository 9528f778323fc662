"""The Pheby protocol without I/O: every rule of a connection, and what every connection is sent.

``PhebyProtocol`` is one connection, in the manner of python-websockets'
``protocol.py`` and h11: the server feeds it what arrives with the time
(``receive``, ``receive_binary``, ``tick``) and gets back the actions to
take (a shared command to execute, ``Close``, ``AUTH_FAILED``), and the
frames to write (``frames_to_send``, encoded). It holds:

- the handshake: the first frame must be ``hello`` with the right protocol
  version and secret (checked by the ``secret_ok`` it is given: the server
  binds ``bridge_core.kit.security.same_secret`` to the configured secret), within
  the auth deadline (``tick``); a failed hello says ``AUTH_FAILED`` (the
  input of the per-address lockout, ``security.HelloLockout``), and a hello
  arriving while the address is locked out (``locked``) is not judged;
- the frame rules: too large (2 MiB) closes with 1009, the token bucket
  answers ``rate_limited``, bad frames get their error and the connection
  goes on;
- one request at a time (``execute``, ``reply``/``fail``, ``done``): its
  reply goes out before the broadcasts it causes (the server reserves the
  reply's place in the outbox when ``execute`` starts and fills it with what
  ``reply`` gives), and a broadcast the reply already says is not sent to
  the requester (``reply_covers``);
- ``send``: the broadcast frames of an event for this connection, in the spec's turn order whatever
  this node was not delivered (``Turns``: a run that ends with its message still open on this
  connection gets that message's ``message.complete`` first).

States are ``State``; a transition the table does not allow raises
``IllegalTransition``. ``Broadcast`` is the part every connection shares,
decided once per event: the rendered frames (``render.py``) and the paced
drafts (``pacing.DraftPacer``). The server (``server.py``) only moves bytes,
runs the timers and calls ``Bridge.execute``.
"""

from __future__ import annotations

import enum
from typing import Any, Callable, Hashable, Optional, Sequence

import attrs

from bridge_core.model import commands as cmd
from bridge_core.model import events as ev
from bridge_core.model.errors import (
    AuthTimeout,
    BadRequest,
    BridgeError,
    InvalidJson,
    RateLimited,
    TooLarge,
    Unauthorized,
    VersionMismatch,
)
from bridge_core.model.ids import draft_message_id
from bridge_core.model.ratelimit import TokenBucket
from bridge_core.model.wire import dumps, loads_object

from . import render
from .codec import HELLO_DEADLINE, MAX_FRAME, PROTOCOL_VERSION, Hello, Ping, decode_request, request_id_of
from .errors import IllegalTransition, to_pheby_error
from .pacing import WAITING, DraftPacer, Pace, draft_key

CLOSE_NORMAL = 1000
CLOSE_POLICY = 1008
CLOSE_TOO_BIG = 1009
CLOSE_TRY_AGAIN = 1013

NOTHING: tuple = ()


class State(enum.Enum):
    AWAIT_HELLO = "await_hello"  # the first frame must be a valid hello, before the deadline
    OPEN = "open"  # authenticated: requests are read
    EXECUTING = "executing"  # one request runs; its reply is pending
    CLOSED = "closed"  # nothing more is read or sent


_NEXT: dict[State, frozenset] = {
    State.AWAIT_HELLO: frozenset({State.OPEN, State.CLOSED}),
    State.OPEN: frozenset({State.EXECUTING, State.CLOSED}),
    State.EXECUTING: frozenset({State.OPEN, State.CLOSED}),
    State.CLOSED: frozenset(),
}


@attrs.frozen
class Close:
    """Close the WebSocket with ``code`` and ``reason``, once the frames to send are written."""

    code: int
    reason: bytes


@attrs.frozen
class AuthFailed:
    """A failed hello: count it for the address (the lockout) and slow the answer (a wrong secret)."""


AUTH_FAILED = AuthFailed()


def too_large_frame(now: float) -> bytes:
    """The error a frame over ``MAX_FRAME`` gets (before the 1009 close), however it was refused."""
    err = TooLarge(f"Frame larger than {MAX_FRAME // (1024 * 1024)} MiB")
    return dumps(render.error_frame(err, None, now))


def reply_covers(command: Any, event: Any) -> bool:
    """Does ``command``'s reply already tell its requester about ``event`` (so no broadcast to it)?

    Only ``conversation.delete``: the spec shows its reply alone, so the
    requester gets one ``conversation.deleted`` (with its request_id) and every
    other client one without.
    """
    return (
        type(event) is ev.ConversationDeleted
        and type(command) is cmd.DeleteConversation
        and command.conversation_id == event.conversation_id
    )


class PhebyProtocol:
    """One Pheby connection's state and rules (module docstring); ``now`` is wall-clock seconds."""

    __slots__ = ("state", "deadline", "bucket", "rate_limited", "executing", "turns", "_secret_ok", "_broadcast",
                 "_out")

    def __init__(self, secret_ok: Callable[[str], bool], now: float, *, broadcast: Optional["Broadcast"] = None,
                 rate: float = 100.0, burst: float = 200.0, hello_timeout: float = HELLO_DEADLINE):
        self.state = State.AWAIT_HELLO
        self.deadline: Optional[float] = now + hello_timeout  # the hello's, while one is awaited
        self.bucket = TokenBucket(rate, burst, now)
        self.rate_limited = 0  # frames refused by the bucket (the server adds them to its stats)
        self.executing: Any = None  # the command whose reply is pending
        self.turns = Turns()  # the runs whose message is open on this connection
        self._secret_ok = secret_ok
        self._broadcast = broadcast if broadcast is not None else Broadcast(DraftPacer(0.0))
        self._out: list[bytes] = []

    def _to(self, state: State) -> None:
        if state not in _NEXT[self.state]:
            raise IllegalTransition(f"Pheby connection: {self.state.value} -> {state.value}")
        self.state = state

    def frames_to_send(self) -> list[bytes]:
        """The frames to write now, in order (encoded); each is given once."""
        out, self._out = self._out, []
        return out

    # --- what arrives -----------------------------------------------------------------------

    def receive(self, data: str, now: float, *, locked: bool = False) -> Sequence[Any]:
        """A text frame: the actions it asks for (a shared command, ``Close``, ``AUTH_FAILED``), in order.

        ``locked``: the client's address is locked out (too many failed hellos); a hello then is not judged.
        """
        state = self.state
        if state is State.CLOSED:
            return NOTHING
        if state is State.EXECUTING:
            raise IllegalTransition("Pheby connection: a frame read while a request executes")
        if state is State.AWAIT_HELLO and locked:
            return self._close(RateLimited("Too many failed attempts; try again later"), None, now, CLOSE_POLICY)
        if len(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data) > MAX_FRAME:
            self._to(State.CLOSED)
            self._out.append(too_large_frame(now))
            return (Close(CLOSE_TOO_BIG, b"too_large"),)
        rid: Optional[str] = None
        try:
            frame = loads_object(data)
            rid = request_id_of(frame)
            if state is State.AWAIT_HELLO:
                return self._hello(frame, rid, now)
            if not self.bucket.take(now):
                self.rate_limited += 1
                raise RateLimited("Too many messages; slow down")
            decoded = decode_request(frame)
        except BridgeError as err:
            if state is State.AWAIT_HELLO:
                return self._auth_failure(Unauthorized("First frame must be hello"), rid, now)
            return self._error(err, rid, now)
        t = type(decoded)
        if t is Ping:
            self._out.append(dumps(render.pong_frame(now, decoded.request_id)))
            return NOTHING
        if t is Hello:
            return self._error(BadRequest("Already authenticated"), decoded.request_id, now)
        return (decoded,)

    def receive_binary(self, now: float, *, locked: bool = False) -> Sequence[Any]:
        """A binary frame: never a hello; once authenticated, ``invalid_json`` (no token spent)."""
        state = self.state
        if state is State.AWAIT_HELLO:
            if locked:
                return self._close(RateLimited("Too many failed attempts; try again later"), None, now, CLOSE_POLICY)
            return self._auth_failure(Unauthorized("First frame must be hello"), None, now)
        if state is State.CLOSED:
            return NOTHING
        return self._error(InvalidJson("Binary frames are not supported"), None, now)

    def tick(self, now: float) -> Sequence[Any]:
        """The time is ``now``: past the hello's deadline, ``auth_timeout`` and a close."""
        if self.state is State.AWAIT_HELLO and self.deadline is not None and now >= self.deadline:
            return self._close(AuthTimeout("No hello within 10 seconds"), None, now, CLOSE_POLICY)
        return NOTHING

    def _hello(self, frame: dict, rid: Optional[str], now: float) -> Sequence[Any]:
        if frame.get("type") != "hello":
            return self._auth_failure(Unauthorized("First frame must be hello"), rid, now)
        version = frame.get("protocol_version")
        if version != PROTOCOL_VERSION or isinstance(version, bool):
            return self._close(VersionMismatch(f"Server speaks protocol_version {PROTOCOL_VERSION}"), rid, now,
                               CLOSE_POLICY)
        secret = frame.get("secret")
        if not isinstance(secret, str) or not self._secret_ok(secret):
            return self._auth_failure(Unauthorized("Invalid secret"), rid, now)
        self._to(State.OPEN)
        self.deadline = None
        self._out.append(dumps(render.ready_frame(now, rid)))
        return NOTHING

    def _error(self, err: BridgeError, rid: Optional[str], now: float) -> Sequence[Any]:
        self._out.append(dumps(render.error_frame(err, rid, now)))
        return NOTHING

    def _close(self, err: BridgeError, rid: Optional[str], now: float, code: int) -> Sequence[Any]:
        self._to(State.CLOSED)
        self._out.append(dumps(render.error_frame(err, rid, now)))
        return (Close(code, err.code.encode()),)

    def _auth_failure(self, err: BridgeError, rid: Optional[str], now: float) -> Sequence[Any]:
        return (AUTH_FAILED, *self._close(err, rid, now, CLOSE_POLICY))

    # --- one request at a time --------------------------------------------------------------

    def execute(self, command: Any) -> None:
        """``command`` starts (the server reserves its reply's place in the outbox now)."""
        self._to(State.EXECUTING)
        self.executing = command

    def reply(self, result: Any, now: float) -> Optional[bytes]:
        """The executing command's reply, given the bridge's result (None: the broadcast answers)."""
        command = self.executing
        if type(command) is cmd.OpenConversation and result.run is not None:
            self.turns.shown(result.run)
        return render.reply(command, result, now)

    def fail(self, exc: BaseException, now: float) -> bytes:
        """The executing command's error reply (any exception: a Pheby code, no internal detail)."""
        command = self.executing
        err = to_pheby_error(exc, command)
        return dumps(render.error_frame(err, getattr(command, "request_id", None), now))

    def done(self) -> None:
        """The executing command's reply is in place: the next request may be read."""
        self.executing = None
        if self.state is State.EXECUTING:
            self._to(State.OPEN)

    # --- what every connection is sent ------------------------------------------------------

    def send(self, event: Any) -> Sequence[bytes]:
        """The broadcast frames of ``event`` for this connection (the same bytes as every other's)."""
        state = self.state
        if state is State.AWAIT_HELLO or state is State.CLOSED:
            return NOTHING
        executing = self.executing
        if executing is not None and reply_covers(executing, event):
            return NOTHING  # the requester's reply says it already (conversation.deleted): one frame
        return self.turns.send(event, self._broadcast)


KEEP = 1024  # runs a connection remembers at once (open, or completed at their end); the oldest go first


class Turns:
    """One connection's turns in the spec's order: ``message.start → … → message.complete → run.finished``.

    A run's ``RunFinished`` always follows its message's ``MessageCompleted``
    on the node that ends it (``Bridge.close_run``), but another node may not
    be delivered that completion (issue 41, chaos seed 2022: its fold needed
    the store, which was restarting, and the bus reader dropped the event):
    a run that ends while its message is open on this connection (its
    ``message.start`` sent, or shown running by a ``conversation.open``
    snapshot) gets that message's ``message.complete`` first, with the text
    the run's end carries (else the newest draft this node had:
    ``Broadcast.completion``); the completion arriving after that is not
    sent again. A message completes once on a connection: one this connection
    already had complete (its ``message.complete`` sent here, even while the
    ``conversation.open`` showing it running executed, or a snapshot showing
    it completed) is never opened again, so its run's end adds nothing.
    Loomi and lvmh fill lost deltas the same way
    (loomi_adapter/runtexts.py, lvmh_adapter/book.py).
    """

    __slots__ = ("keep", "_open", "_done")

    def __init__(self, keep: int = KEEP):
        self.keep = keep
        self._open: dict[str, str] = {}  # run id -> its message's id, open on this connection
        self._done: dict[str, None] = {}  # message ids of runs this connection had complete

    def opened(self, run_id: str, message_id: str) -> None:
        if message_id in self._done:
            return  # completed here already (e.g. while the open showing it running executed)
        self._open[run_id] = message_id
        if len(self._open) > self.keep:  # a run whose end never came
            del self._open[next(iter(self._open))]

    def shown(self, run: Any) -> None:
        """A ``conversation.open`` snapshot showed ``run`` (``ActiveRun``): its message open unless completed."""
        if run.completed:
            self._complete(run.message_id)
        else:
            self.opened(run.run_id, run.message_id)

    def _complete(self, message_id: str) -> None:
        self._done[message_id] = None
        if len(self._done) > self.keep:
            del self._done[next(iter(self._done))]

    def send(self, event: Any, broadcast: "Broadcast") -> Sequence[bytes]:
        """The frames of ``event`` for this connection (``Broadcast.render``'s, and the completion it lacks)."""
        frames = broadcast.render(event)
        t = type(event)
        if t is ev.RunStarted:
            self.opened(event.run_id, event.message_id)
        elif t is ev.MessageCompleted:
            mid = event.message_id
            if event.run_id is None:
                return frames
            if mid in self._done:
                return NOTHING  # completed here already (at its run's end): once
            self._complete(mid)
            if self._open.get(event.run_id) == mid:
                del self._open[event.run_id]
        elif t is ev.RunFinished:
            mid = self._open.pop(event.run_id, None)
            if mid is not None:
                self._complete(mid)
                return (broadcast.completion(event, mid), *frames)
        return frames


@attrs.frozen
class DraftPush:
    """A due push: ``data`` to queue to every client under ``key``, or not yet: again at ``at``."""

    data: Optional[bytes] = None
    key: Hashable = None
    at: Optional[float] = None


@attrs.frozen
class Ended:
    """A message's drafts ended: cancel its push timer, and drop ``stale`` (an unsent later draft) if set."""

    message_id: str
    stale: Optional[Hashable] = None


class Broadcast:
    """What every open connection is sent, decided once per event, without I/O.

    ``render(event)`` renders once (the connections' ``send`` get the same
    bytes); text deltas are paced (``offer``, ``push_due``, ``end``) on the
    loop's clock, the server running a timer per message whose push is due.
    """

    __slots__ = ("pacer", "_last", "_frames", "_ended", "_filler")

    def __init__(self, pacer: DraftPacer):
        self.pacer = pacer
        self._last: Any = None
        self._frames: Sequence[bytes] = NOTHING
        self._ended: tuple = (None, None, "")  # the last run end's event, its message's id and newest draft here
        self._filler: tuple = (None, None, b"")  # the last completion rendered at a run's end: event, id, bytes

    def render(self, event: Any) -> Sequence[bytes]:
        """The broadcast frames of ``event`` (rendered at its first ask; the same object for the others)."""
        if event is not self._last:
            self._frames = render.render(event)
            self._last = event
        return self._frames

    def completion(self, event: ev.RunFinished, message_id: str) -> bytes:
        """The ``message.complete`` of ``message_id`` sent before ``event``, its run's end, where it is open
        (``Turns``): the text the end carries, else the newest draft this node had of it (``end``); rendered
        once for every connection."""
        last, mid, data = self._filler
        if last is not event or mid != message_id:
            text = event.text
            ended, ended_mid, draft = self._ended
            if not text and ended is event and ended_mid == message_id:
                text = draft
            data = render.completion_at_end(event, message_id, text)
            self._filler = (event, message_id, data)
        return data

    def offer(self, event: ev.TextDelta, now: float) -> Pace:
        """A text delta at ``now``: push its draft now, at ``at``, or nothing (a push is due; not a text draft)."""
        if event.kind != "text":
            return WAITING  # reasoning: no Pheby frame
        return self.pacer.offer(now, event)

    def push_due(self, message_id: str, now: float) -> Optional[DraftPush]:
        """The pacing tick of ``message_id``, whose push fell due: its draft, a later time, or None (it ended)."""
        later = self.pacer.recheck(message_id, now).at  # the newest draft is longer than the one the push was for
        if later is not None:
            return DraftPush(at=later)
        push = self.pacer.push(message_id, now)
        if push is None:
            return None
        return DraftPush(data=push[0], key=push[1])

    def end(self, event: Any) -> Optional[Ended]:
        """``event`` ends a message's drafts (its ``message.complete``, or its run's end): forget them."""
        t = type(event)
        if t is ev.MessageCompleted:
            mid = event.message_id
        elif t is ev.RunFinished:
            mid = draft_message_id(event.run_id)
            newest = self.pacer.drafts.get(mid)  # still streaming here: its completion was not delivered
            self._ended = (event, mid, newest.text if newest is not None else "")
        else:
            return None
        again = self.pacer.pushed_again(mid)
        self.pacer.end(mid)
        return Ended(mid, draft_key(mid) if again else None)
