"""lvmh browsers of the several-nodes load, in a process of their own (``bench.scale`` starts one per node).

``python -m bench.scale_watch '<json config>'``: opens one browser socket (``GET /ws?token=``)
per session it is given, each subscribed to its session (an lvmh browser watches one
session at a time), prints ``ready``, waits for ``go`` on stdin, then reads until every
session's run has settled (``agent_settled``). It prints one JSON line, the shape
``bench.team_client`` prints: the delivery latency of every ``message_update`` (receipt
time minus the envelope's ``ts``, which lvmh gives in milliseconds; in microseconds), the
final texts checked against the expected one, frames and bytes.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import aiohttp
import orjson

from .team_client import _bad

TEXT = aiohttp.WSMsgType.TEXT


async def _browser(http: aiohttp.ClientSession, cfg: dict, sid: str, ready: asyncio.Event,
                   go: asyncio.Event, out: dict) -> None:  # fmt: skip
    ws = await http.ws_connect(f"http://127.0.0.1:{cfg['port']}/ws?token={cfg['token']}", max_msg_size=0)
    while orjson.loads((await ws.receive(timeout=30)).data).get("type") != "session_list":
        pass
    await ws.send_str(orjson.dumps({"type": "subscribe", "sessionId": sid}).decode())
    ready.set()
    await go.wait()
    append = out["lat_us"].append
    async for msg in ws:
        if msg.type != TEXT:
            break
        now = time.time()
        out["frames"] += 1
        out["bytes"] += len(msg.data)
        f = orjson.loads(msg.data)
        if f.get("type") != "events" or f.get("sessionId") != sid:
            continue
        settled = False
        for e in f["events"]:
            t = e.get("type")
            if t == "message_update":
                append(int((now - e["ts"] / 1000) * 1e6))
            elif t == "message_end" and e["message"].get("role") == "assistant":
                out["finals"][sid] = e["message"].get("text")
            elif t == "agent_settled":
                settled = True
        if settled:
            break
    await ws.close()


async def run(cfg: dict) -> dict:
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    out: dict = {"frames": 0, "bytes": 0, "lat_us": [], "finals": {}}
    go = asyncio.Event()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        readies = [asyncio.Event() for _ in cfg["sessions"]]
        tasks = [asyncio.ensure_future(_browser(http, cfg, sid, r, go, out))
                 for sid, r in zip(cfg["sessions"], readies)]  # fmt: skip
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 60)
        print("ready", flush=True)
        if (await stdin.readline()).decode().strip() != "go":
            return {}
        t_go = time.time()
        go.set()
        await asyncio.gather(*tasks)
        out["elapsed_s"] = time.time() - t_go
    expected = "tok " * cfg["n"]
    finals = out.pop("finals")
    out["finals"] = len(finals)
    out["exact"] = len(finals) == len(cfg["sessions"]) and all(v == expected for v in finals.values())
    out["bad"] = _bad(finals, expected, len(cfg["sessions"]))
    out["bad"] += [f"{sid}: no final text" for sid in cfg["sessions"] if sid not in finals]
    return out


def main() -> None:
    res = asyncio.run(run(json.loads(sys.argv[1])))
    sys.stdout.write(json.dumps(res) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
