"""A Loomi app written from the Loomi Protocol v1 text alone (stdlib + aiohttp, nothing of the project).

What it does is what a careful Android app built from the spec does:

- §3: it pairs by scanning the QR payload (``{"v":1,"url","token","name","fp"}``): it connects to
  ``url`` and sends ``hello {token}`` first; it keeps the ``device_id`` + ``credential`` of
  ``hello.ok`` and presents them (with ``last_seq``) on every later connection.
- §2: it processes frames in ``seq`` order and drops a frame whose ``seq`` is below what it has
  processed; it reconnects with ``last_seq`` = the highest seq processed; when ``hello.ok`` says
  ``truncated: true`` it fetches ``task.list`` again.
- Replayed frames (``"replayed": true``) that it had already shown never notify the user twice.
- §1/§5 heartbeat: it answers each server ``ping`` with ``pong`` (unless told to play dead).
- §6: it ignores unknown types and fields.

The app's state survives its socket (as an app's storage would): ``processed``, the events it
processed in order, the notifications it raised, the text of each run.
"""

from __future__ import annotations

import asyncio
import json
import time
import weakref
from typing import Any, Callable, Optional

import aiohttp

DEVICE_INFO = {"model": "Pixel 9", "os": "Android 16", "app_version": "1.0.0"}
# what an app raises a user-visible notification for
NOTIFYING = ("notification", "approval.required")


_OPEN: "weakref.WeakSet[LoomiApp]" = weakref.WeakSet()


async def close_all() -> None:
    """Drop every app's connection (a test's teardown, pass or fail: no socket outlives its loop)."""
    for app in list(_OPEN):
        await app.disconnect()


class Closed(Exception):
    """The socket ended (``code`` is the server's close code)."""

    def __init__(self, code: Optional[int]):
        super().__init__(f"socket closed with {code}")
        self.code = code


class LoomiApp:
    def __init__(self, name: str = "Pixel 9"):
        self.info = dict(DEVICE_INFO, model=name)
        self.url: Optional[str] = None
        self.device_id: Optional[str] = None
        self.credential: Optional[str] = None
        self.processed: Optional[int] = None  # highest seq processed (None: nothing yet)
        self.events: list[dict] = []  # every processed frame except hello.ok, pings and pongs, in order
        self.dropped: list[dict] = []  # frames dropped by the §2 rule (seq below processed)
        self.notified: list[dict] = []  # notifications raised to the user
        self._notified_ids: set = set()
        self.hellos: list[dict] = []  # every hello.ok (and hello error) received
        self.task_lists: list[list] = []  # task.list results (fetched again after truncation)
        # answer server pings: True, False, or a function of the ping's number (1, 2, ...)
        self.answer_pings: Any = True
        self.connections: list[list[int]] = []  # the seqs received on each connection, in order
        self.pings = 0  # server pings received
        self.pongs: list[dict] = []  # pongs received (answers to the app's pings)
        self.close_code: Optional[int] = None
        self.http: Optional[aiohttp.ClientSession] = None
        self.ws: Optional[aiohttp.ClientWebSocketResponse] = None
        self._reader: Optional[asyncio.Task] = None
        self._changed = asyncio.Event()
        self._rid = 0
        self.on_frame: Optional[Callable[[dict], None]] = None  # sees every frame received (a test's recorder)

    # --- connecting -------------------------------------------------------------------------------

    async def pair(self, qr: dict) -> dict:
        """Scan the QR payload: connect to its url, hello with the one-time token. Returns hello.ok."""
        assert qr["v"] == 1
        self.url = qr["url"]
        ok = await self.open_with({"protocol_version": 1, "token": qr["token"], "device_info": self.info})
        self.device_id = ok["payload"]["device_id"]
        self.credential = ok["payload"]["credential"]
        return ok

    async def connect(self, url: Optional[str] = None) -> dict:
        """Reconnect as the paired device, with last_seq = the highest seq processed."""
        if url is not None:
            self.url = url
        hello: dict = {"protocol_version": 1, "device_id": self.device_id, "credential": self.credential,
                       "device_info": self.info}
        if self.processed is not None:
            hello["last_seq"] = self.processed
        return await self.open_with(hello)

    async def open_with(self, hello: dict) -> dict:
        """Connect to ``url`` and send this hello (any payload) as the first frame; returns hello.ok."""
        await self.disconnect()
        self.http = aiohttp.ClientSession()
        _OPEN.add(self)
        self.ws = await self.http.ws_connect(self.url, max_msg_size=0, autoping=True)
        self.close_code = None
        self.connections.append([])
        await self.send("hello", hello)
        msg = await self.ws.receive(timeout=10)
        if msg.type is not aiohttp.WSMsgType.TEXT:
            code = self.ws.close_code
            await self.disconnect()
            raise Closed(code)
        first = json.loads(msg.data)
        self.hellos.append(first)
        if first["type"] != "hello.ok":
            await self.drain_close()
            raise HelloRefused(first, self.close_code)
        if first["payload"].get("protocol_version") != 1:  # §6: say so and stop, no guessing
            await self.disconnect()
            raise HelloRefused(first, None)
        self._process(first)
        self._reader = asyncio.ensure_future(self._read())
        if first["payload"]["truncated"]:
            # §2: the gap is beyond the window; fetch the task list again
            res = await self.request("task.list", {"limit": 50}, answer="task.list.result")
            self.task_lists.append(res["payload"]["tasks"])
        return first

    async def drain_close(self, timeout: float = 10.0) -> list[dict]:
        """Read until the server closes the socket; the frames before the close."""
        frames = []
        assert self.ws is not None
        while True:
            msg = await self.ws.receive(timeout=timeout)
            if msg.type is aiohttp.WSMsgType.TEXT:
                frames.append(json.loads(msg.data))
                continue
            self.close_code = self.ws.close_code
            await self.disconnect()
            return frames

    async def disconnect(self) -> None:
        """Drop the connection (the app is closed, the phone lost its network)."""
        if self._reader is not None:
            self._reader.cancel()
            try:
                await self._reader
            except (asyncio.CancelledError, Exception):
                pass
            self._reader = None
        if self.ws is not None:
            await self.ws.close()
            self.ws = None
        if self.http is not None:
            await self.http.close()
            self.http = None

    @property
    def connected(self) -> bool:
        return self.ws is not None and not self.ws.closed and self.close_code is None

    # --- frames --------------------------------------------------------------------------------------

    async def send(self, type_: str, payload: Optional[dict] = None) -> None:
        assert self.ws is not None
        await self.ws.send_str(json.dumps({"v": 1, "type": type_, "payload": payload or {}}))

    async def send_raw(self, data: str) -> None:
        assert self.ws is not None
        await self.ws.send_str(data)

    async def _read(self) -> None:
        ws = self.ws
        assert ws is not None
        while True:
            msg = await ws.receive()
            if msg.type is aiohttp.WSMsgType.TEXT:
                try:
                    frame = json.loads(msg.data)
                except ValueError:
                    continue
                self._process(frame)
                answer = self.answer_pings
                if callable(answer):
                    answer = answer(self.pings)
                if frame.get("type") == "ping" and answer:
                    try:
                        await self.send("pong")
                    except Exception:
                        pass
            elif msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING,
                              aiohttp.WSMsgType.ERROR):
                self.close_code = ws.close_code if ws.close_code is not None else -1
                self._changed.set()
                return

    def _process(self, frame: dict) -> None:
        """§2: in seq order; a frame whose seq is below what was processed is dropped."""
        if self.on_frame is not None:
            self.on_frame(frame)
        seq = frame.get("seq")
        if self.connections and isinstance(seq, int):
            self.connections[-1].append(seq)
        if isinstance(seq, int) and self.processed is not None and seq < self.processed:
            self.dropped.append(frame)
        else:
            if isinstance(seq, int) and (self.processed is None or seq > self.processed):
                self.processed = seq
            t = frame.get("type")
            if t == "ping":
                self.pings += 1
            elif t == "pong":
                self.pongs.append(frame)
            elif t != "hello.ok":
                self.events.append(frame)
                if t in NOTIFYING:
                    self._notify(frame)
        self._changed.set()

    def _notify(self, frame: dict) -> None:
        """Raise a notification, once per event: a replayed frame already shown is not shown again."""
        key = frame.get("event_id")
        if frame.get("replayed") and key in self._notified_ids:
            return
        self._notified_ids.add(key)
        self.notified.append(frame)

    async def until(self, pred: Callable[[], Any], timeout: float = 15.0) -> Any:
        """Wait until ``pred()`` is truthy (re-checked on every frame); its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = pred()
            if value:
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"condition not reached in {timeout} s; last frames: {[f.get('type') for f in self.events[-8:]]}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), min(left, 0.5))
            except asyncio.TimeoutError:
                pass

    def find(self, type_: str, **payload: Any) -> list[dict]:
        return [f for f in self.events if f["type"] == type_
                and all(f["payload"].get(k) == v for k, v in payload.items())]

    async def wait_for(self, type_: str, timeout: float = 15.0, **payload: Any) -> dict:
        return (await self.until(lambda: self.find(type_, **payload), timeout))[0]

    def next_request_id(self) -> str:
        self._rid += 1
        return f"{self.device_id or 'new'}-{self._rid}-{time.monotonic_ns()}"

    async def request(self, type_: str, payload: dict, answer: str = "ack", timeout: float = 15.0) -> dict:
        """A request with a request_id; its answer (``answer`` or ``error``) for that request_id."""
        payload = dict(payload)
        rid = payload.setdefault("request_id", self.next_request_id())
        start = len(self.events)
        await self.send(type_, payload)

        def answered():
            for f in self.events[start:]:
                if f["type"] in (answer, "error") and f["payload"].get("request_id") == rid:
                    return f
            return None

        return await self.until(answered, timeout)

    # --- what the user sees ----------------------------------------------------------------------

    def run_text(self, run_id: str) -> str:
        """The run's text as streamed (run.delta increments, in order)."""
        return "".join(f["payload"]["text"] for f in self.events
                       if f["type"] == "run.delta" and f["payload"]["run_id"] == run_id
                       and f["payload"].get("kind", "text") == "text")

    def completed(self, run_id: str) -> list[dict]:
        return self.find("run.completed", run_id=run_id)

    def seqs(self) -> list[int]:
        return [f["seq"] for f in self.events]


class HelloRefused(Exception):
    def __init__(self, frame: dict, code: Optional[int]):
        super().__init__(f"hello refused: {frame.get('payload')} (close {code})")
        self.frame = frame
        self.code = code
