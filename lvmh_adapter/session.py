"""Per-connection state machines (no I/O): a plugin's ``/agent/ws`` and a browser's ``/ws``.

Plugin connection: ``await_hello`` -> ``binding`` (the server checks the session
and waits for its in-flight writes) -> ``ready`` -> ``closed``. ``feed`` takes
one raw frame and says what to do with it; a bad frame becomes a ``Reject``
(answered with an error frame) and the connection goes on.
"""

from __future__ import annotations

from typing import Optional, Union

import attrs

from . import codec
from .codec import FrameError, PluginFrame

MAX_ERROR_FRAMES = 100  # per connection; later bad frames are dropped silently
QUOTA_STRIKES = 2  # events past the session's storage quota a connection may send; the last one closes it


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
    fatal: bool = False  # close the connection (only for an unusable hello)


PluginAction = Union[Hello, Event, Reject]


class PluginSession:
    def __init__(self) -> None:
        self.state = "await_hello"
        self.session_id: Optional[str] = None
        self.errors = 0
        self.frames = 0
        self.over_quota = 0  # events refused because the session stored its quota

    @property
    def bound(self) -> bool:
        return self.state == "ready"

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

    def feed(self, data: Union[str, bytes]) -> PluginAction:
        self.frames += 1
        try:
            frame = codec.decode_plugin_frame(data)
        except FrameError as exc:
            fatal = self.state == "await_hello" and exc.code == "version_mismatch"
            return self._reject(exc.message, exc.code, fatal=fatal)
        if self.state == "await_hello":
            if frame.type != "hello":
                return self._reject("hello expected first", "hello_expected", frame.seq)
            self.state = "binding"
            self.session_id = frame.session_id
            return Hello(frame)
        if self.state == "binding":  # the server reads nothing while binding; defensive
            return self._reject("welcome pending", "hello_expected", frame.seq)
        if frame.session_id != self.session_id:
            return self._reject(f"this connection belongs to session {self.session_id}", "wrong_session", frame.seq)
        if frame.type == "hello":
            return Hello(frame, rebind=True)
        return Event(frame)

    def bound_ok(self) -> None:
        self.state = "ready"

    def close(self) -> None:
        self.state = "closed"


@attrs.frozen
class Subscribe:
    session_id: str


@attrs.frozen
class Unsubscribe:
    session_id: Optional[str]


BrowserAction = Union[Subscribe, Unsubscribe, Reject]


class BrowserSession:
    """A browser's one subscription at a time."""

    def __init__(self) -> None:
        self.subscription: Optional[str] = None
        self.errors = 0

    def feed(self, data: Union[str, bytes]) -> BrowserAction:
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
