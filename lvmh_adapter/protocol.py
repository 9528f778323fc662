"""One lvmh socket's protocol, without I/O (docs/lvmh.md; python-websockets' ``protocol.py`` and h11's
state tables are the models): a plugin's ``/agent/ws`` and a browser's ``/ws``.

The server feeds it what it reads and what the clock says; it answers with what to do, and holds
every rule of a connection:

- ``PluginProtocol.receive(data, now)``: one raw frame -> ``Hello`` (the first, or a repeated one on
  a bound connection: ``rebind``), ``Event`` (a frame of the bound session) or ``Reject`` (answered
  with an error frame, at most ``MAX_ERROR_FRAMES`` per connection; ``fatal`` closes it: a hello of
  another protocol version, the hello deadline, the second event past the storage quota);
- ``deadline`` / ``tick(now)``: the hello deadline (``hello_timeout`` after the socket opened);
- ``claim(held, conn)``: who gets a session a hello names (the same credential takes it over, another
  one's live connection keeps it: docs/security.md);
- ``BrowserProtocol.receive(data)``: a browser's one subscription at a time.

    AWAIT_HELLO --hello--> BINDING --welcomed--> READY (--rebind: welcomed--> READY)
    (close from any state; any other move raises ProtocolStateError)

The server checks the session a hello names and waits for its in-flight writes while the
connection is ``BINDING``, reading nothing meanwhile.
"""

from __future__ import annotations

import enum
from typing import Any, Optional, Union

import attrs

from . import codec
from .codec import FrameError, PluginFrame

MAX_ERROR_FRAMES = 100  # per connection; later bad frames are dropped silently
QUOTA_STRIKES = 2  # events past the session's storage quota a connection may send; the last one closes it
HELLO_TIMEOUT = 10.0  # s a plugin has to say hello after its socket opened


class ProtocolStateError(RuntimeError):
    """The I/O side asked for something the connection's state does not allow (a bug there, not the peer's)."""


class PluginState(enum.Enum):
    AWAIT_HELLO = "await_hello"
    BINDING = "binding"
    READY = "ready"
    CLOSED = "closed"


_NEXT = {
    PluginState.AWAIT_HELLO: {PluginState.BINDING, PluginState.CLOSED},
    PluginState.BINDING: {PluginState.READY, PluginState.CLOSED},
    PluginState.READY: {PluginState.READY, PluginState.CLOSED},  # a rebind's welcome
    PluginState.CLOSED: {PluginState.CLOSED},
}


@attrs.frozen
class Hello:
    frame: PluginFrame
    rebind: bool = False  # a repeated hello on a bound connection (same session)


@attrs.frozen
class Event:
    frame: PluginFrame


@attrs.frozen
class Reject:
    message: str
    code: str
    ref_seq: Optional[int] = None
    answer: bool = True  # send an error frame (False once MAX_ERROR_FRAMES were sent)
    fatal: bool = False  # close the connection (errors.FATAL_CLOSE: how)


PluginAction = Union[Hello, Event, Reject]


class Claim(enum.Enum):
    """What a hello's connection gets: the session (``OURS``), the session once the older
    socket of the same credential is closed (``REPLACE``), or nothing (``TAKEN``)."""

    OURS = "ours"
    REPLACE = "replace"
    TAKEN = "taken"


def claim(held: Any, conn: Any) -> Claim:
    """``conn`` (with ``principal.credential``) says hello for a session ``held`` by a connection
    (with ``principal.credential`` and ``ws.closed``) or None. A connection of the same credential (a
    reconnect, or a new socket while the old is half-open) replaces the old one; a live connection
    under another credential keeps the session (docs/security.md)."""
    if held is None or held is conn:
        return Claim.OURS
    if held.principal.credential != conn.principal.credential and not held.ws.closed:
        return Claim.TAKEN
    return Claim.REPLACE


class PluginProtocol:
    """A plugin connection: its state, the session it is bound to, its error and quota counts."""

    __slots__ = ("_state", "session_id", "errors", "frames", "over_quota", "_deadline")

    def __init__(self, now: float = 0.0, hello_timeout: float = HELLO_TIMEOUT) -> None:
        self._state = PluginState.AWAIT_HELLO
        self.session_id: Optional[str] = None
        self.errors = 0
        self.frames = 0
        self.over_quota = 0  # events refused because the session stored its quota
        self._deadline = now + hello_timeout

    @property
    def state(self) -> PluginState:
        return self._state

    def _to(self, new: PluginState) -> None:
        if new not in _NEXT[self._state]:
            raise ProtocolStateError(f"lvmh plugin connection: {self._state.value} -> {new.value}")
        self._state = new

    @property
    def bound(self) -> bool:
        return self._state is PluginState.READY

    @property
    def deadline(self) -> Optional[float]:
        """When ``tick`` must run next: the hello deadline while no hello came; None after."""
        return self._deadline if self._state is PluginState.AWAIT_HELLO else None

    def tick(self, now: float) -> Optional[Reject]:
        """Past the hello deadline without a hello: a fatal ``auth_timeout`` (the connection closes)."""
        if self._state is not PluginState.AWAIT_HELLO or now < self._deadline:
            return None
        self._to(PluginState.CLOSED)
        return Reject("No hello within the deadline", "auth_timeout", fatal=True)

    def refuse_over_quota(self, frame: PluginFrame, quota_mb: float) -> Reject:
        """An event its session has no room left to store: an error frame; the second one on this
        connection closes it (``fatal``), so a runaway plugin stops where its reconnect backs off."""
        self.over_quota += 1
        return Reject(f"This session has stored its quota of {quota_mb:g} MB of events; "
                      "this event was not stored", "quota_exceeded", frame.seq,
                      fatal=self.over_quota >= QUOTA_STRIKES)

    def _reject(self, message: str, code: str, ref_seq: Optional[int] = None, fatal: bool = False) -> Reject:
        self.errors += 1
        return Reject(message, code, ref_seq, answer=self.errors <= MAX_ERROR_FRAMES or fatal, fatal=fatal)

    def receive(self, data: Union[str, bytes], now: float = 0.0) -> PluginAction:
        self.frames += 1
        try:
            frame = codec.decode_plugin_frame(data)
        except FrameError as exc:
            fatal = self._state is PluginState.AWAIT_HELLO and exc.code == "version_mismatch"
            return self._reject(exc.message, exc.code, fatal=fatal)
        if self._state is PluginState.AWAIT_HELLO:
            if frame.type != "hello":
                return self._reject("hello expected first", "hello_expected", frame.seq)
            self._to(PluginState.BINDING)
            self.session_id = frame.session_id
            return Hello(frame)
        if self._state is not PluginState.READY:  # binding (the server reads nothing meanwhile) or closed
            return self._reject("welcome pending", "hello_expected", frame.seq)
        if frame.session_id != self.session_id:
            return self._reject(f"this connection belongs to session {self.session_id}", "wrong_session", frame.seq)
        if frame.type == "hello":
            return Hello(frame, rebind=True)
        return Event(frame)

    def welcomed(self) -> None:
        """The server sent ``welcome``: the connection is bound to its session."""
        self._to(PluginState.READY)

    def close(self) -> None:
        self._to(PluginState.CLOSED)


@attrs.frozen
class Subscribe:
    session_id: str


@attrs.frozen
class Unsubscribe:
    session_id: Optional[str]


BrowserAction = Union[Subscribe, Unsubscribe, Reject]


class BrowserProtocol:
    """A browser's one subscription at a time: ``subscribe`` replaces it; ``unsubscribe`` of it (or of
    none named) ends it. A bad frame is answered (at most ``MAX_ERROR_FRAMES``) and never fatal."""

    __slots__ = ("subscription", "errors")

    def __init__(self) -> None:
        self.subscription: Optional[str] = None
        self.errors = 0

    def receive(self, data: Union[str, bytes]) -> BrowserAction:
        try:
            frame = codec.decode_browser_frame(data)
        except FrameError as exc:
            self.errors += 1
            return Reject(exc.message, exc.code, answer=self.errors <= MAX_ERROR_FRAMES)
        if frame.type == "subscribe":
            assert frame.session_id is not None
            self.subscription = frame.session_id
            return Subscribe(frame.session_id)
        sid = frame.session_id
        if sid is None or sid == self.subscription:
            self.subscription = None
        return Unsubscribe(sid)
