"""The load client: C clients connect, authenticate, one triggers ``/bench N``, all count frames."""

from __future__ import annotations

import asyncio
import datetime
import statistics
import time
from typing import Optional

import aiohttp
import orjson

from .proc import ProcWatch, admin_headers_for


def _pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    k = min(len(values) - 1, max(0, int(round(p / 100.0 * (len(values) - 1)))))
    return values[k]


class ClientStats:
    def __init__(self) -> None:
        self.frames = 0
        self.events = 0
        self.bytes = 0
        self.first = 0.0
        self.last = 0.0
        self.latencies: list[float] = []
        self.final_text: Optional[str] = None
        self.final_at = 0.0
        self.last_delta_ts = 0.0
        self.done = asyncio.Event()


async def pair_loomi_devices(http: aiohttp.ClientSession, port: int, count: int) -> list[tuple[str, str]]:
    """Pair ``count`` Loomi devices through the loopback endpoint; returns (device_id, credential) pairs."""
    devices = []
    for i in range(count):
        async with http.post(f"http://127.0.0.1:{port}/internal/pair/new", json={},
                             headers=admin_headers_for(port)) as r:
            token = (await r.json())["payload"]["token"]
        ws = await http.ws_connect(f"http://127.0.0.1:{port}/ws")
        await ws.send_str(orjson.dumps({"v": 1, "type": "hello", "payload": {
            "protocol_version": 1, "token": token, "device_info": {"model": f"bench{i}", "os": "bench", "app_version": "1"}}}).decode())
        while True:
            msg = await ws.receive(timeout=10)
            frame = orjson.loads(msg.data)
            if frame["type"] == "hello.ok":
                devices.append((frame["payload"]["device_id"], frame["payload"]["credential"]))
                break
            if frame["type"] == "error":
                raise RuntimeError(f"pairing failed: {frame}")
        await ws.close()
    return devices


async def connect_loomi(http, port, device, last_seq=None):
    ws = await http.ws_connect(f"http://127.0.0.1:{port}/ws", max_msg_size=0)
    payload = {"protocol_version": 1, "device_info": {"model": "bench", "os": "bench", "app_version": "1"}}
    if device is not None:
        payload.update(device_id=device[0], credential=device[1])
    if last_seq is not None:
        payload["last_seq"] = last_seq
    await ws.send_str(orjson.dumps({"v": 1, "type": "hello", "payload": payload}).decode())
    while True:
        msg = await ws.receive(timeout=10)
        frame = orjson.loads(msg.data)
        if frame["type"] == "hello.ok":
            return ws, frame
        if frame["type"] == "error":
            raise RuntimeError(f"hello failed: {frame}")


async def connect_pheby(http, port, secret):
    ws = await http.ws_connect(f"http://127.0.0.1:{port}/ws", max_msg_size=0)
    await ws.send_str(orjson.dumps({"type": "hello", "secret": secret, "protocol_version": 1}).decode())
    msg = await ws.receive(timeout=10)
    assert orjson.loads(msg.data)["type"] == "ready", msg.data
    return ws


def _delta_seen(st: ClientStats, now: float, ts: float) -> None:
    if not st.events:
        st.first = now
    st.events += 1
    st.last = now
    st.latencies.append(now - ts)


async def _frames(ws, st: ClientStats):
    """Each text frame decoded, with its receipt time; frames and bytes counted on the way."""
    async for msg in ws:
        if msg.type != aiohttp.WSMsgType.TEXT:
            return
        now = time.time()
        st.frames += 1
        st.bytes += len(msg.data)
        yield now, orjson.loads(msg.data)


async def _count_loomi(ws, st: ClientStats, run_started: asyncio.Event) -> None:
    async for now, frame in _frames(ws, st):
        t = frame.get("type")
        if t == "run.delta":
            _delta_seen(st, now, frame["ts"])
        elif t == "run.completed":
            st.final_text = frame["payload"].get("text")
            st.final_at = now
            st.done.set()
            return
        elif t == "ping":
            await ws.send_str(orjson.dumps({"v": 1, "type": "pong", "payload": {}}).decode())


def _parse_iso(value: str) -> float:
    return datetime.datetime.fromisoformat(value).timestamp()


async def _count_pheby(ws, st: ClientStats) -> None:
    async for now, frame in _frames(ws, st):
        t = frame.get("type")
        if t == "message.delta":
            ts = _parse_iso(frame["ts"])
            st.last_delta_ts = max(st.last_delta_ts, ts)
            _delta_seen(st, now, ts)
        elif t == "message.complete" and frame.get("kind") != "notice":
            st.final_text = frame["text"]
            st.final_at = now
            st.last_delta_ts = max(st.last_delta_ts, _parse_iso(frame["ts"]))
        elif t == "run.finished":
            st.done.set()
            return


async def loomi_run(port: int, devices: list, n: int, watch: Optional[ProcWatch], timeout: float = 300.0,
                    rate: float = 0.0) -> dict:
    """One measured run: every device connected, the first sends /bench n."""
    async with aiohttp.ClientSession() as http:
        socks = [await connect_loomi(http, port, d) for d in devices]
        stats = [ClientStats() for _ in socks]
        started = asyncio.Event()
        readers = [asyncio.create_task(_count_loomi(ws, st, started)) for (ws, _), st in zip(socks, stats)]
        cpu0 = watch.cpu() if watch else 0.0
        t0 = time.time()
        await socks[0][0].send_str(orjson.dumps({"v": 1, "type": "session.send", "payload": {"text": f"/bench {n} {rate:g}" if rate else f"/bench {n}", "request_id": f"b{t0}"}}).decode())
        await asyncio.wait_for(asyncio.gather(*(st.done.wait() for st in stats)), timeout)
        elapsed = time.time() - t0
        cpu = (watch.cpu() - cpu0) if watch else 0.0
        for r in readers:
            r.cancel()
        for ws, _ in socks:
            await ws.close()
    res = _summarise(stats, elapsed, cpu, n, expected="tok " * n)
    # how long the first client waited, from its session.send, for the run's first delta
    res["first_delta_ms"] = (stats[0].first - t0) * 1000 if stats[0].events else float("nan")
    return res


async def pheby_run(port: int, secret: str, clients: int, n: int, watch: Optional[ProcWatch], timeout: float = 300.0) -> dict:
    async with aiohttp.ClientSession() as http:
        socks = [await connect_pheby(http, port, secret) for _ in range(clients)]
        await socks[0].send_str(orjson.dumps({"type": "conversation.create", "name": "bench", "request_id": "c"}).decode())
        cid = None
        while cid is None:
            f = orjson.loads((await socks[0].receive(timeout=10)).data)
            if f["type"] == "conversation.created":
                cid = f["conversation_id"]
        for ws in socks[1:]:  # drain the conversation.updated broadcast
            f = orjson.loads((await ws.receive(timeout=10)).data)
        stats = [ClientStats() for _ in socks]
        readers = [asyncio.create_task(_count_pheby(ws, st)) for ws, st in zip(socks, stats)]
        cpu0 = watch.cpu() if watch else 0.0
        t0 = time.time()
        await socks[0].send_str(orjson.dumps({"type": "chat.send", "conversation_id": cid, "text": f"/bench {n}", "request_id": "b"}).decode())
        await asyncio.wait_for(asyncio.gather(*(st.done.wait() for st in stats)), timeout)
        elapsed = time.time() - t0
        cpu = (watch.cpu() - cpu0) if watch else 0.0
        for r in readers:
            r.cancel()
        for ws in socks:
            await ws.close()
    out = _summarise(stats, elapsed, cpu, n, expected="tok " * n)
    out["last_draft_after_ms"] = max((st.final_at - st.last_delta_ts) * 1000 for st in stats)
    out["bytes_per_client_over_text"] = max(st.bytes for st in stats) / max(1, 4 * n)
    return out


def _summarise(stats: list[ClientStats], elapsed: float, cpu: float, n: int, expected: str) -> dict:
    lat = [x for st in stats for x in st.latencies]
    frames = sum(st.frames for st in stats)
    eps = [st.events / max(1e-9, st.last - st.first) for st in stats if st.events > 1]
    return {
        "events_per_s_per_client": statistics.median(eps) if eps else float("nan"),
        "frames_per_s": frames / elapsed,
        "bytes": sum(st.bytes for st in stats),
        "lat_p50_ms": _pct(lat, 50) * 1000,
        "lat_p99_ms": _pct(lat, 99) * 1000,
        "cpu_us_per_frame": cpu / max(1, frames) * 1e6,
        "elapsed_s": elapsed,
        "exact_final_text": all(st.final_text == expected for st in stats),
    }
