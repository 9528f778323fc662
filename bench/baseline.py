"""The baseline: a minimal aiohttp WebSocket broadcaster, no bridge.

It speaks just enough Pheby and Loomi for the load client: a hello that is
always accepted, and ``/bench N`` (Pheby ``chat.send``, Loomi ``session.send``)
answered by the frames the bridge would send, each encoded once and written
with ``send_frame`` to every client (Loomi: the per-device seq spliced in front
of a body encoded once). Run: ``python -m bench.baseline --portfile F``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

import orjson
from aiohttp import WSMsgType, web

TEXT = WSMsgType.TEXT


class Baseline:
    def __init__(self) -> None:
        self.pheby: set[web.WebSocketResponse] = set()
        self.loomi: dict[web.WebSocketResponse, list[int]] = {}  # ws -> [next seq]

    async def handle_pheby(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=4 * 1024 * 1024)
        await ws.prepare(request)
        try:
            async for msg in ws:
                if msg.type != TEXT:
                    break
                frame = orjson.loads(msg.data)
                t = frame.get("type")
                if t == "hello":
                    await ws.send_frame(orjson.dumps({"type": "ready", "protocol_version": 1, "server": "pheby", "ts": _iso()}), TEXT)
                    self.pheby.add(ws)
                elif t == "chat.send":
                    n, rate = _bench_n(frame.get("text", ""))
                    asyncio.get_running_loop().create_task(self.run_pheby(frame.get("conversation_id", "c"), n, rate))
                elif t == "conversation.create":
                    await ws.send_frame(orjson.dumps({"type": "conversation.created", "conversation_id": "c" * 32, "name": "b", "request_id": frame.get("request_id")}), TEXT)
        finally:
            self.pheby.discard(ws)
        return ws

    async def _broadcast_pheby(self, data: bytes) -> None:
        for ws in list(self.pheby):
            try:
                await ws.send_frame(data, TEXT)
            except Exception:
                self.pheby.discard(ws)

    async def run_pheby(self, cid: str, n: int, rate: float = 0.0) -> None:
        run_id = os.urandom(16).hex()
        mid = f"draft-{run_id}"
        await self._broadcast_pheby(orjson.dumps({"type": "run.accepted", "conversation_id": cid, "run_id": run_id}))
        await self._broadcast_pheby(orjson.dumps({"type": "message.start", "conversation_id": cid, "run_id": run_id, "message_id": mid}))
        text = ""
        start = asyncio.get_running_loop().time()
        for i in range(n):
            text += "tok "
            await self._broadcast_pheby(orjson.dumps({"type": "message.delta", "conversation_id": cid, "message_id": mid, "text": text, "ts": _iso()}))
            await _pace(i, start, rate)
        await self._broadcast_pheby(orjson.dumps({"type": "message.complete", "conversation_id": cid, "message_id": mid, "text": text, "ts": _iso()}))
        await self._broadcast_pheby(orjson.dumps({"type": "run.finished", "conversation_id": cid, "run_id": run_id, "status": "completed"}))

    async def handle_loomi(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=4 * 1024 * 1024)
        await ws.prepare(request)
        try:
            async for msg in ws:
                if msg.type != TEXT:
                    break
                frame = orjson.loads(msg.data)
                t = frame.get("type")
                payload = frame.get("payload") or {}
                if t == "hello":
                    self.loomi[ws] = [1]
                    await self._send_loomi(ws, b'"type":"hello.ok","task_id":null,"run_id":null,"payload":' + orjson.dumps(
                        {"device_id": "d", "credential": "c", "protocol_version": 1, "server_time": time.time(), "truncated": False}))
                elif t == "session.send":
                    n, rate = _bench_n(payload.get("text", ""))
                    await self._send_loomi(ws, b'"type":"ack","task_id":null,"run_id":null,"payload":' + orjson.dumps(
                        {"request_id": payload.get("request_id"), "ok": True, "result": {"task_id": "t", "run_id": "r"}}))
                    asyncio.get_running_loop().create_task(self.run_loomi(n, rate))
        finally:
            self.loomi.pop(ws, None)
        return ws

    async def _send_loomi(self, ws: web.WebSocketResponse, body: bytes) -> None:
        box = self.loomi.get(ws)
        if box is None:
            return
        seq = box[0]
        box[0] += 1
        head = b'{"v":1,"seq":%d,"event_id":"e_%d","ts":%s,' % (seq, seq, repr(time.time()).encode())
        await ws.send_frame(head + body + b"}", TEXT)

    async def _broadcast_loomi(self, body: bytes) -> None:
        # body encoded once; the per-device seq and ts spliced in front
        ts = repr(time.time()).encode()
        for ws, box in list(self.loomi.items()):
            seq = box[0]
            box[0] += 1
            try:
                await ws.send_frame(b'{"v":1,"seq":%d,"event_id":"e_%d","ts":%s,' % (seq, seq, ts) + body + b"}", TEXT)
            except Exception:
                self.loomi.pop(ws, None)

    async def run_loomi(self, n: int, rate: float = 0.0) -> None:
        run_id = os.urandom(16).hex()
        task_id = "t" * 32
        ids = b'"task_id":"%s","run_id":"%s",' % (task_id.encode(), run_id.encode())
        await self._broadcast_loomi(b'"type":"run.started",' + ids + b'"payload":' + orjson.dumps(
            {"run_id": run_id, "task_id": task_id, "model": "demo-small", "provider": "demo"}))
        start = asyncio.get_running_loop().time()
        for i in range(n):
            await self._broadcast_loomi(b'"type":"run.delta",' + ids + b'"payload":' + orjson.dumps(
                {"run_id": run_id, "text": "tok ", "kind": "text", "iteration": 0}))
            await _pace(i, start, rate)
        await self._broadcast_loomi(b'"type":"run.completed",' + ids + b'"payload":' + orjson.dumps(
            {"run_id": run_id, "status": "completed", "text": "tok " * n, "error": None, "finished": True}))


def _bench_n(text: str) -> tuple[int, float]:
    parts = text.split()
    n, rate = 10, 0.0
    if len(parts) >= 2 and parts[0] == "/bench":
        try:
            n = int(parts[1])
            rate = float(parts[2]) if len(parts) > 2 else 0.0
        except ValueError:
            pass
    return n, rate


async def _pace(i: int, start: float, rate: float) -> None:
    """The demo agent's pacing: sleep to keep ``rate`` per second, else yield every 32."""
    if rate > 0:
        loop = asyncio.get_running_loop()
        wait = start + (i + 1) / rate - loop.time()
        if wait > 0.0005:
            await asyncio.sleep(wait)
            return
    if i % 32 == 31:
        await asyncio.sleep(0)


def _iso() -> str:
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


async def main(portfile: str) -> None:
    b = Baseline()
    pheby_app = web.Application()
    pheby_app.router.add_get("/ws", b.handle_pheby)
    loomi_app = web.Application()
    loomi_app.router.add_get("/ws", b.handle_loomi)
    ports = {}
    runners = []
    for name, app in (("pheby", pheby_app), ("loomi", loomi_app)):
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
        await site.start()
        ports[name] = site._server.sockets[0].getsockname()[1]
        runners.append(runner)
    with open(portfile + ".tmp", "w") as f:
        json.dump(ports, f)
    os.replace(portfile + ".tmp", portfile)
    await asyncio.Event().wait()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--portfile", required=True)
    args = p.parse_args()
    try:
        asyncio.run(main(args.portfile))
    except KeyboardInterrupt:
        pass
