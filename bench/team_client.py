"""One client of the team load, in a process of its own (``bench.team`` starts K of them).

``python -m bench.team_client '<json config>'``: connects (Pheby: hello with
the secret; Loomi: a paired device), starts its share of the runs' set-up
(Pheby: creates its conversations), prints ``ready``, waits for ``go`` on
stdin, sends ``/bench n rate`` for each of its runs, and reads every frame
until it has seen every run of the team finish (each client sees every
run). It prints one JSON line: the delivery latency of every delta
(receipt time minus the frame's server timestamp, in microseconds), the
largest of them while the runs start and after, the final texts checked
against the expected one, frames and bytes.

A process per client, so that the clients' own parsing does not sit in
one interpreter and show up as the server's latency.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import sys
import time

import aiohttp
import orjson

TEXT = aiohttp.WSMsgType.TEXT


def _iso(value: str) -> float:
    return datetime.datetime.fromisoformat(value).timestamp()


async def _line(reader: asyncio.StreamReader) -> str:
    return (await reader.readline()).decode().strip()


async def run(cfg: dict) -> dict:
    proto, port, runs, mine = cfg["proto"], cfg["port"], cfg["runs"], cfg["mine"]
    n, rate = cfg["n"], cfg["rate"]
    expected = "tok " * n
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    lat: list[int] = []
    finals: dict[str, str] = {}
    out = {"frames": 0, "bytes": 0}
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(f"http://127.0.0.1:{port}/ws", max_msg_size=0)
        convs: list[str] = []
        if proto == "pheby":
            await ws.send_str(orjson.dumps({"type": "hello", "secret": cfg["secret"], "protocol_version": 1}).decode())
            while orjson.loads((await ws.receive(timeout=30)).data)["type"] != "ready":
                pass
            for i in range(mine):
                await ws.send_str(orjson.dumps({"type": "conversation.create", "name": f"team{i}",
                                                "request_id": f"c{i}"}).decode())
            while len(convs) < mine:
                f = orjson.loads((await ws.receive(timeout=30)).data)
                if f["type"] == "conversation.created":
                    convs.append(f["conversation_id"])
        else:
            payload = {"protocol_version": 1, "device_info": {"model": "team", "os": "bench", "app_version": "1"}}
            if cfg.get("device"):
                payload.update(device_id=cfg["device"][0], credential=cfg["device"][1])
            await ws.send_str(orjson.dumps({"v": 1, "type": "hello", "payload": payload}).decode())
            while orjson.loads((await ws.receive(timeout=30)).data)["type"] != "hello.ok":
                pass
        print("ready", flush=True)
        if await _line(stdin) != "go":
            return {}
        done = 0
        text = f"/bench {n} {rate:g}"
        t_go = time.time()
        spread = cfg.get("spread", 0.0)
        t0 = loop.time()

        async def send_all() -> None:
            # the team's runs start spread evenly over ``spread`` seconds, the same offsets for every server
            # (bench.team: started in one instant, their paced deltas would fall due in the same turn of the
            # loop for good, an alignment no team has); this task sends while the loop below reads
            for i in range(mine):
                if spread:
                    g = i * cfg.get("clients", 1) + cfg["index"]  # the run's place in the whole team
                    await asyncio.sleep(max(0.0, t0 + spread * g / runs - loop.time()))
                if proto == "pheby":
                    await ws.send_str(orjson.dumps({"type": "chat.send", "conversation_id": convs[i], "text": text,
                                                    "request_id": f"r{i}"}).decode())
                else:
                    await ws.send_str(orjson.dumps({"v": 1, "type": "session.send", "payload": {
                        "text": text, "request_id": f"r{cfg['index']}-{i}"}}).decode())

        sender = asyncio.ensure_future(send_all())
        append = lat.append
        start_until = t_go + cfg.get("start_window", 0.0)
        out["max_start_us"] = out["max_after_us"] = 0

        after: list[int] = []  # the latencies of the deltas received once the runs have started

        def record(us: int, now: float) -> None:
            # the largest apart for the deltas received while the runs start (bench.team: START_WINDOW)
            append(us)
            if now < start_until:
                key = "max_start_us"
            else:
                key = "max_after_us"
                after.append(us)
            if us > out[key]:
                out[key] = us

        async for msg in ws:
            if msg.type != TEXT:
                break
            now = time.time()
            out["frames"] += 1
            out["bytes"] += len(msg.data)
            f = orjson.loads(msg.data)
            t = f.get("type")
            if proto == "pheby":
                if t == "message.delta":
                    record(int((now - _iso(f["ts"])) * 1e6), now)
                elif t == "message.complete" and f.get("kind") != "notice":
                    finals[f["message_id"]] = f["text"]
                elif t == "run.finished":
                    done += 1
            else:
                if t == "run.delta":
                    record(int((now - f["ts"]) * 1e6), now)
                elif t == "run.completed":
                    finals[f.get("run_id") or f["payload"]["run_id"]] = f["payload"].get("text")
                    done += 1
                elif t == "ping":
                    await ws.send_str(orjson.dumps({"v": 1, "type": "pong", "payload": {}}).decode())
            if done >= runs:
                break
        out["elapsed_s"] = time.time() - t_go
        await sender
        await ws.close()
    out["lat_us"] = lat
    out["lat_after_us"] = after
    out["finals"] = len(finals)
    out["exact"] = len(finals) == runs and all(v == expected for v in finals.values())
    out["bad"] = _bad(finals, expected, runs)
    return out


def _bad(finals: dict, expected: str, wanted: int) -> list[str]:
    """What was inexact, one line each (a final text that differs, or how many are missing)."""
    bad = [f"{key}: {len(v or '')} chars, ends {(v or '')[-24:]!r}" for key, v in finals.items() if v != expected]
    if len(finals) != wanted:
        bad.append(f"{len(finals)} final text(s) of {wanted}")
    return bad


def main() -> None:
    cfg = json.loads(sys.argv[1])
    res = asyncio.run(run(cfg))
    sys.stdout.write(json.dumps(res) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
