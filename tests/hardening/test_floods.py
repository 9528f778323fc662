"""Floods: many concurrent runs, many idle sockets, a burst of frames, a connect/disconnect storm.

Sizes scale with ``HARDENING_SCALE`` (default 1: the issue's numbers where the
two-core budget allows; see the summary for what ran). Flood clients are
``flood.FloodWS`` protocols, so thousands of sockets cost the test little and
broadcasts are counted without decoding every frame.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import orjson
import pytest

from tests.lvmh.helpers import BROWSER_SYNC, BROWSER_SYNC_ANSWER
from tests.waiting import until

from .clients import PhebyClient, create_conversations, lvmh_plugin
from .flood import SOURCES, open_many, open_ws
from .proc import LVMH_TOKEN, PHEBY_SECRET, admin_headers_for
from .summary import SUMMARY, scaled
from .wsraw import encode_frame

pytestmark = pytest.mark.hardening

AUTH = {"Authorization": f"Bearer {LVMH_TOKEN}"}


def _ms() -> int:
    return int(time.time() * 1000)


async def pair_many(port: int, n: int) -> list[tuple[str, str]]:
    """``n`` Loomi devices, 100 pairing tokens at a time (the server keeps at most 100 pending)."""
    devices: list[tuple[str, str]] = []
    async with aiohttp.ClientSession() as http:
        for start in range(0, n, 100):
            k = min(100, n - start)
            tokens = []
            for _ in range(k):
                async with http.post(f"http://127.0.0.1:{port}/internal/pair/new", json={},
                                     headers=admin_headers_for(port)) as r:
                    assert r.status == 200
                    tokens.append((await r.json())["payload"]["token"])

            async def hello(i: int, token: str) -> tuple[str, str]:
                got: dict = {}

                def on_text(ws, data: bytes) -> None:
                    f = orjson.loads(data)
                    if f["type"] == "hello.ok":
                        got["ok"] = f["payload"]

                ws = await open_ws(port, source=SOURCES[i % len(SOURCES)], on_text=on_text)
                ws.send(orjson.dumps({"v": 1, "type": "hello", "payload": {
                    "protocol_version": 1, "token": token, "device_info": {"model": f"flood{i}"}}}))
                assert await ws.wait(lambda w: "ok" in got, 30)
                ws.abort()
                return got["ok"]["device_id"], got["ok"]["credential"]

            devices += await asyncio.gather(*(hello(start + j, t) for j, t in enumerate(tokens)))
    return devices


async def pheby_flood_client(port: int, i: int, patterns: list[bytes], source: str = ""):
    ws = await open_ws(port, source=source or SOURCES[i % len(SOURCES)], scan=[b'"type":"ready"', *patterns])
    ws.send(orjson.dumps({"type": "hello", "secret": PHEBY_SECRET, "protocol_version": 1}))
    assert await ws.wait(lambda w: w.counts[0] >= 1, 60), "no ready"
    return ws


async def loomi_flood_client(port: int, i: int, device: tuple, patterns: list[bytes], source: str = ""):
    ws = await open_ws(port, source=source or SOURCES[i % len(SOURCES)], scan=[b'"type":"hello.ok"', *patterns])
    ws.send(orjson.dumps({"v": 1, "type": "hello", "payload": {
        "protocol_version": 1, "device_id": device[0], "credential": device[1]}}))
    assert await ws.wait(lambda w: w.counts[0] >= 1, 60), "no hello.ok"
    return ws


def plugin_run_frames(sid: str, text: str) -> list[bytes]:
    def ev(seq: int, t: str, **kw) -> bytes:
        d = {"v": 1, "sessionId": sid, "seq": seq, "ts": _ms(), "type": t}
        d.update(kw)
        return orjson.dumps(d)

    def msg(role: str, mid: str, body: str) -> dict:
        return {"role": role, "id": mid, "text": body, "thinking": None, "toolCalls": [], "toolCallId": None}

    return [
        ev(1, "agent_start"), ev(2, "message_start", message={"role": "user", "id": "u1"}),
        ev(3, "message_end", message=msg("user", "u1", text)),
        ev(4, "message_start", message={"role": "assistant", "id": "a1"}),
        ev(5, "message_update", delta="Echo:"), ev(6, "message_update", delta=" " + text),
        ev(7, "message_end", message=msg("assistant", "a1", "Echo: " + text)),
        ev(8, "agent_end", usage={"inputTokens": 1, "outputTokens": 2}), ev(9, "agent_settled", aborted=False),
    ]


def plugin_hello(sid: str) -> bytes:
    return orjson.dumps({"v": 1, "type": "hello", "sessionId": sid, "seq": 0, "ts": _ms(), "session": {
        "id": sid, "name": sid, "cwd": "/work", "model": "m", "provider": "p", "agent": False, "repo": None,
        "startedAt": _ms()}})


# --- 1,000 concurrent connections per front end, each completing an echo run -------------------------------

BROADCAST_N = scaled(1000)  # Pheby and Loomi send every event to every connection: n runs cost n * n frames
LINEAR_N = scaled(1000)


async def test_pheby_concurrent_connections_each_complete_a_run(bridge_factory):
    """Every connection open at once; each sends one echo run into its own conversation and waits for its
    own reply and run.finished among everyone's broadcasts (Pheby broadcasts every event to every client)."""
    n = BROADCAST_N
    srv = bridge_factory("concurrent-pheby", adapters="pheby", log_level="WARNING")
    port = srv.ports["pheby"]
    cids = await create_conversations(port, n, "p")
    socks = await open_many(n, lambda i: pheby_flood_client(port, i, [
        b'"type":"run.finished","conversation_id":"%s","run_id":"' % cids[i].encode(),
        b'"text":"Echo: pheby flood %d."' % i]))
    SUMMARY.held("Pheby concurrent", n)
    t0, cpu0 = time.monotonic(), srv.watch.cpu()
    for i, ws in enumerate(socks):
        ws.send(orjson.dumps({"type": "chat.send", "conversation_id": cids[i], "text": f"pheby flood {i}.",
                              "request_id": f"f{i}"}))
    done = await asyncio.gather(*(ws.wait(lambda w: w.counts[1] >= 1 and w.counts[2] >= 1, 240) for ws in socks))
    SUMMARY.note(f"Pheby: {sum(done)}/{n} concurrent connections completed an echo run in {time.monotonic() - t0:.1f} s "
                 f"(server CPU {srv.watch.cpu() - cpu0:.1f} s, {socks[0].bytes / 1e6:.1f} MB of broadcasts per client)")
    dropped = sum(1 for ws in socks if ws.closed.done())
    for ws in socks:
        ws.abort()
    SUMMARY.events(n)
    # on a failure, say whether the server was still up and what it last logged (WARNING and above)
    assert all(done) and dropped == 0, (sum(done), dropped, "server alive" if srv.alive else "server died",
                                        srv.stderr()[-1500:])  # fmt: skip


async def test_loomi_concurrent_connections_each_complete_a_run(bridge_factory):
    """Every device connected at once; runs are started in waves of 100 (every event goes to every device:
    a thousand runs started in the same instant outrun every outbox, see docs/security.md)."""
    n = BROADCAST_N
    wave = 100
    srv = bridge_factory("concurrent-loomi", adapters="loomi", log_level="WARNING")
    port = srv.ports["loomi"]
    devices = await pair_many(port, n)
    socks = await open_many(n, lambda i: loomi_flood_client(port, i, devices[i], [
        b'"text":"Echo: loomi flood %d."' % i, b'"type":"error"']))
    SUMMARY.held("Loomi concurrent", n)
    t0, cpu0 = time.monotonic(), srv.watch.cpu()
    done = []
    for start in range(0, n, wave):
        for i in range(start, min(n, start + wave)):
            socks[i].send(orjson.dumps({"v": 1, "type": "session.send", "payload": {
                "text": f"loomi flood {i}.", "request_id": f"f{i}"}}))
        done += await asyncio.gather(*(ws.wait(lambda w: w.counts[1] >= 1, 240) for ws in socks[start:start + wave]))
    SUMMARY.note(f"Loomi: {sum(done)}/{n} concurrent devices completed an echo run in {time.monotonic() - t0:.1f} s "
                 f"(server CPU {srv.watch.cpu() - cpu0:.1f} s, {socks[0].bytes / 1e6:.1f} MB per device)")
    dropped = sum(1 for ws in socks if ws.closed.done())
    errors = sum(ws.counts[2] for ws in socks)
    for ws in socks:
        ws.abort()
    SUMMARY.events(n)
    assert all(done) and dropped == 0 and errors == 0, (sum(done), dropped, errors)


async def test_lvmh_concurrent_connections_each_complete_a_run(bridge_factory):
    """n plugin sockets each streaming a whole pi turn (acknowledged by welcome.lastSeq on a second hello),
    and n browsers each watching a bridge conversation whose echo run a REST prompt starts."""
    n = LINEAR_N
    srv = bridge_factory("concurrent-lvmh", adapters="pheby,lvmh", log_level="WARNING")
    ports = srv.ports
    t0, cpu0 = time.monotonic(), srv.watch.cpu()

    async def plugin(i: int):
        sid = f"flood-plugin-{i:05d}"
        ws = await open_ws(ports["lvmh"], "/agent/ws", source=SOURCES[i % len(SOURCES)], headers=AUTH,
                           scan=[b'"type":"welcome"', b'"lastSeq":9'])
        ws.send(plugin_hello(sid))
        assert await ws.wait(lambda w: w.counts[0] >= 1, 60)
        return ws, sid

    plugins = await open_many(n, plugin)
    SUMMARY.held("lvmh plugin concurrent", n)
    for ws, sid in plugins:
        for frame in plugin_run_frames(sid, sid):
            ws.send(frame)
        ws.send(plugin_hello(sid))  # a repeated hello: welcome.lastSeq once everything is persisted
    done = await asyncio.gather(*(ws.wait(lambda w: w.counts[1] >= 1, 240) for ws, _ in plugins))
    figures = [f"plugins {sum(done)}/{n} in {time.monotonic() - t0:.1f} s (server CPU {srv.watch.cpu() - cpu0:.1f} s)"]
    for ws, _ in plugins:
        ws.abort()
    assert all(done)

    cids = await create_conversations(ports["pheby"], n, "w")
    t0, cpu0 = time.monotonic(), srv.watch.cpu()

    async def browser(i: int):
        ws = await open_ws(ports["lvmh"], f"/ws?token={LVMH_TOKEN}", source=SOURCES[i % len(SOURCES)],
                           scan=[b'"type":"session_list"', b'"type":"agent_settled"', b'Echo: web flood %d.' % i,
                                 BROWSER_SYNC_ANSWER])
        assert await ws.wait(lambda w: w.counts[0] >= 1, 120)
        ws.send(orjson.dumps({"type": "subscribe", "sessionId": cids[i]}))
        ws.send(BROWSER_SYNC.encode())
        return ws

    browsers = await open_many(n, browser)
    SUMMARY.held("lvmh browser concurrent", n)
    connect_s = time.monotonic() - t0
    subscribed = await asyncio.gather(*(ws.wait(lambda w: w.counts[3] >= 1, 120) for ws in browsers))
    assert all(subscribed)  # the subscriptions are in
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100)) as http:
        async def prompt(i: int) -> int:
            async with http.post(f"http://127.0.0.1:{ports['lvmh']}/api/sessions/{cids[i]}/prompt",
                                 json={"message": f"web flood {i}."}, headers=AUTH) as r:
                return r.status

        statuses = await asyncio.gather(*(prompt(i) for i in range(n)))
    done = await asyncio.gather(*(ws.wait(lambda w: w.counts[1] >= 1 and w.counts[2] >= 1, 240) for ws in browsers))
    figures.append(f"browsers+REST prompts {sum(done)}/{n} in {time.monotonic() - t0:.1f} s (connecting {n} browsers "
                   f"took {connect_s:.1f} s: each gets the whole session list; server CPU {srv.watch.cpu() - cpu0:.1f} s)")
    for ws in browsers:
        ws.abort()
    SUMMARY.note("lvmh: " + "; ".join(figures))
    SUMMARY.events(2 * n)
    assert statuses == [200] * n and all(done)


# --- 10,000 idle connections -------------------------------------------------------------------------------


async def test_ten_thousand_idle_connections(bridge_factory):
    total = scaled(10_000)
    from .proc import raise_fd_limit

    limit = raise_fd_limit()
    if total + 500 > limit:
        total = limit - 500
    n_loomi = min(2000, total // 5)
    n_pheby = (total - n_loomi) // 2
    n_browser = total - n_loomi - n_pheby
    srv = bridge_factory("idle", log_level="WARNING")
    ports = srv.ports
    devices = await pair_many(ports["loomi"], n_loomi)
    await srv.quiesce()  # the pairing sockets are gone on the server's side too
    rss0, fds0 = srv.rss(), srv.fds()
    t0 = time.monotonic()

    async def browser(i: int):
        ws = await open_ws(ports["lvmh"], f"/ws?token={LVMH_TOKEN}", source=SOURCES[i % len(SOURCES)],
                           scan=[b'"type":"session_list"'])
        assert await ws.wait(lambda w: w.counts[0] >= 1, 60)
        return ws

    socks = await open_many(n_pheby, lambda i: pheby_flood_client(ports["pheby"], i, []))
    socks += await open_many(n_loomi, lambda i: loomi_flood_client(ports["loomi"], i, devices[i], []))
    socks += await open_many(n_browser, browser)
    elapsed = time.monotonic() - t0
    await until(lambda: srv.tcp_connections() >= srv.idle_sockets + len(socks), 60, "every idle socket accepted")
    rss1, fds1 = srv.rss(), srv.fds()
    SUMMARY.held("idle (Pheby+Loomi+lvmh browser)", len(socks))
    SUMMARY.resource(f"{len(socks)} idle connections", rss0, rss1, fds0, fds1)
    SUMMARY.note(f"idle: {n_pheby} Pheby + {n_loomi} Loomi + {n_browser} lvmh browser sockets opened in {elapsed:.1f} s, "
                 f"{(rss1 - rss0) / len(socks) / 1024:.1f} KB each")
    assert fds1 >= fds0 + len(socks)
    # the server still serves everyone else while holding them
    pheby = await PhebyClient.connect(ports["pheby"])
    cid = await pheby.create("while idle")
    run = await pheby.run(cid, "still serving")
    assert run[-1]["status"] == "completed"
    await pheby.close()
    closed = sum(1 for ws in socks if ws.closed.done())
    for ws in socks:
        ws.abort()
    assert closed == 0
    # and lets go of every descriptor
    assert await srv.fds_back(fds0) <= fds0


# --- a burst of 10,000 frames from one client ----------------------------------------------------------------


async def test_burst_of_frames_is_rate_limited_without_starving_others(bridge_factory):
    burst = scaled(10_000)
    srv = bridge_factory("burst")
    ports = srv.ports
    device = (await pair_many(ports["loomi"], 1))[0]
    other = await PhebyClient.connect(ports["pheby"])
    cid = await other.create("bystander")
    baseline_t = time.monotonic()
    await other.run(cid, "before the burst")
    baseline = time.monotonic() - baseline_t
    results = {}
    bursting = set()  # the front ends whose burst is written

    async def flood_pheby():
        answers = {"pong": 0, "rate_limited": 0, "other": 0}

        def on_text(ws, data: bytes) -> None:
            f = orjson.loads(data)
            if f["type"] == "pong":
                answers["pong"] += 1
            elif f["type"] == "error" and f["error"]["code"] == "rate_limited":
                answers["rate_limited"] += 1
            else:
                answers["other"] += 1

        got_ready = asyncio.Event()
        ws = await open_ws(ports["pheby"], scan=[])
        ws.on_text = lambda w, d: got_ready.set()
        ws.send(orjson.dumps({"type": "hello", "secret": PHEBY_SECRET, "protocol_version": 1}))
        await asyncio.wait_for(got_ready.wait(), 10)
        ws.on_text = on_text
        ws.transport.write(b"".join(encode_frame(b'{"type":"ping"}') for _ in range(burst)))
        bursting.add("pheby")
        await ws.wait(lambda w: answers["pong"] + answers["rate_limited"] >= burst, 120)
        ws.abort()
        results["pheby"] = answers

    async def flood_loomi():
        answers = {"pong": 0, "rate_limited": 0, "other": 0}
        opened = asyncio.Event()

        def on_text(ws, data: bytes) -> None:
            f = orjson.loads(data)
            t = f["type"]
            if t == "hello.ok":
                opened.set()
            elif t == "pong":
                answers["pong"] += 1
            elif t == "error" and f["payload"]["code"] == "rate_limited":
                answers["rate_limited"] += 1
            elif t != "ping":
                answers["other"] += 1

        ws = await open_ws(ports["loomi"], on_text=on_text)
        ws.send(orjson.dumps({"v": 1, "type": "hello", "payload": {
            "protocol_version": 1, "device_id": device[0], "credential": device[1]}}))
        await asyncio.wait_for(opened.wait(), 10)
        ws.transport.write(b"".join(encode_frame(b'{"v":1,"type":"ping","payload":{}}') for _ in range(burst)))
        bursting.add("loomi")
        await ws.wait(lambda w: answers["pong"] + answers["rate_limited"] >= burst, 120)
        ws.abort()
        results["loomi"] = answers

    async def flood_lvmh():
        """Browser frames get no answer (subscriptions); plugin frames are the agent's events: neither is
        rate-limited (see docs/security.md), both must not starve anyone."""
        ws = await open_ws(ports["lvmh"], f"/ws?token={LVMH_TOKEN}", scan=[b'"type":"error"'])
        ws.transport.write(b"".join(encode_frame(orjson.dumps({"type": "subscribe", "sessionId": f"s{i % 50}"}))
                                    for i in range(burst)))
        bursting.add("lvmh")
        plugin = lvmh_plugin(ports["lvmh"], "burst-plugin")
        await plugin.connect()
        frames = [orjson.dumps({"v": 1, "sessionId": "burst-plugin", "seq": s, "ts": _ms(),
                                "type": "tool_execution_update", "toolCallId": "c", "toolName": "t",
                                "partial": f"p{s}"}).decode() for s in range(1, burst + 1)]
        for f in frames:
            await plugin.ws.send_str(f)
        await plugin.close()
        plugin = lvmh_plugin(ports["lvmh"], "burst-plugin")
        results["lvmh_plugin_lastSeq"] = (await plugin.connect())["lastSeq"]
        await plugin.close()
        results["lvmh_browser_errors"] = ws.counts[0]
        ws.abort()

    flood = asyncio.gather(flood_pheby(), flood_loomi(), flood_lvmh())
    await until(lambda: len(bursting) == 3 or flood.done(), 60, "the three bursts sent")
    # a bystander's runs during the floods complete
    during = []
    for i in range(5):
        t = time.monotonic()
        frames = await other.run(cid, f"during the burst {i}", 60)
        assert frames[-1]["status"] == "completed"
        during.append(time.monotonic() - t)
    await flood
    await other.close()
    p, lo = results["pheby"], results["loomi"]
    SUMMARY.note(f"burst of {burst} frames: Pheby {p['pong']} pongs + {p['rate_limited']} rate_limited; "
                 f"Loomi {lo['pong']} pongs + {lo['rate_limited']} rate_limited; lvmh plugin {burst} events all stored "
                 f"(lastSeq {results['lvmh_plugin_lastSeq']}); bystander run {baseline * 1000:.0f} ms before, "
                 f"{max(during) * 1000:.0f} ms at worst during")
    assert p["pong"] + p["rate_limited"] == burst and p["rate_limited"] >= burst - 2000, p  # "other": broadcasts
    assert lo["pong"] + lo["rate_limited"] == burst and lo["rate_limited"] >= burst - 2000, lo
    assert results["lvmh_plugin_lastSeq"] == burst
    assert results["lvmh_browser_errors"] == 0
    SUMMARY.fault(f"burst of {burst} frames per front end")


# --- connect/disconnect storm ----------------------------------------------------------------------------------


async def _rss_back(srv, base: int, slack: int, timeout: float = 10.0) -> None:
    """Until the server, its clients gone, has given back what it used for them (RSS under ``base + slack``);
    the caller asserts it: a server that keeps the memory fails there after ``timeout``."""
    try:
        await until(lambda: srv.rss() - base < slack, timeout, "the memory given back", interval=0.2)
    except AssertionError:
        pass


async def test_connect_disconnect_storm_returns_to_baseline(bridge_factory):
    rate = scaled(1000)  # connections per second
    seconds = 10
    srv = bridge_factory("storm", log_level="WARNING")
    ports = srv.ports
    devices = await pair_many(ports["loomi"], 100)
    counter = {"ok": 0, "failed": 0}
    why: dict[str, int] = {}  # which kind of client failed, and how: a failure names itself

    # The storm is many clients, not one address flooding: spread over 200 loopback addresses, each sees
    # 5 connections/s, far from the per-address cap on unauthenticated sockets (128, tested on its own in
    # tests/security) even when a loaded two-core machine leaves the server seconds behind the storm.
    sources = [f"127.0.{i // 250}.{2 + i % 250}" for i in range(200)]

    async def one(i: int) -> None:
        kind = i % 5
        src = sources[i % len(sources)]
        try:
            if kind == 0:
                ws = await pheby_flood_client(ports["pheby"], i, [], source=src)
            elif kind == 1:
                ws = await loomi_flood_client(ports["loomi"], i, devices[i % len(devices)], [], source=src)
            elif kind == 2:
                ws = await open_ws(ports["lvmh"], f"/ws?token={LVMH_TOKEN}", source=src, scan=[b'"session_list"'])
                assert await ws.wait(lambda w: w.counts[0] >= 1, 30)
            elif kind == 3:
                ws = await open_ws(ports["lvmh"], "/agent/ws", source=src, headers=AUTH, scan=[b'"welcome"'])
                ws.send(plugin_hello(f"storm-{i % 200}"))
                # 40 session ids: a newer socket of the same session can say hello before this one's welcome
                # went out, and then takes the session over (closed 4002, docs/security.md): served, too
                welcomed = await ws.wait(lambda w: w.counts[0] >= 1, 30)
                assert welcomed or ws.close_code == 4002, ws.close_code
            else:
                r, w = await asyncio.open_connection("127.0.0.1", ports["loomi"], local_addr=(src, 0))
                w.write(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                body = await asyncio.wait_for(r.read(), 30)
                assert b'{"ok":true,"v":1}' in body
                w.close()
                counter["ok"] += 1
                return
            if i % 2:
                ws.abort()  # vanish
            else:
                ws.transport.write(encode_frame(b"\x03\xe8", 8))  # a close frame, then gone
                ws.transport.close()
            counter["ok"] += 1
        except Exception as e:
            counter["failed"] += 1
            key = f"{('pheby', 'loomi', 'lvmh-browser', 'lvmh-plugin', 'health')[kind]}: {e!r}"[:200]
            why[key] = why.get(key, 0) + 1

    async def storm(total: int, per_second: int) -> float:
        tasks = []
        t0 = time.monotonic()
        tick = 0.05
        per_tick = max(1, int(per_second * tick))
        for start in range(0, total, per_tick):
            tasks += [asyncio.ensure_future(one(i)) for i in range(start, min(total, start + per_tick))]
            next_t = t0 + (start // per_tick + 1) * tick
            await asyncio.sleep(max(0.0, next_t - time.monotonic()))  # the subject: pacing the storm's rate
        await asyncio.gather(*tasks)
        return time.monotonic() - t0

    # warm-up, the storm itself: first-use allocations are not a leak, nor is the heap a storm's peak leaves (a loaded
    # machine leaves the server seconds behind it, thousands of sockets at once: 85 MB to 183 MB, not given back
    # within 10 s after a 1 s warm-up, where unloaded the peak was 81 MB). The storms after it must not add to it
    await storm(rate * seconds, rate)
    await srv.quiesce()
    rss0, fds0 = srv.rss(), srv.fds()
    counter.update(ok=0, failed=0)
    why.clear()
    elapsed = await storm(rate * seconds, rate)
    peak = srv.rss()
    await srv.quiesce()
    await srv.fds_back(fds0)
    await _rss_back(srv, rss0, 32 * 1024 * 1024)
    rss1, fds1 = srv.rss(), srv.fds()
    SUMMARY.resource(f"storm {rate * seconds} connections in {elapsed:.1f} s (peak RSS {peak / 1e6:.0f} MB)",
                     rss0, rss1, fds0, fds1)
    SUMMARY.fault(f"connect/disconnect storm ({counter['ok']} ok, {counter['failed']} failed)")
    assert counter["failed"] == 0, (counter, why)
    assert fds1 <= fds0, (fds0, fds1)
    assert rss1 - rss0 < 32 * 1024 * 1024, (rss0, rss1)
    # one more storm of the same size must not grow it again: nothing accumulates per connection
    counter.update(ok=0, failed=0)
    why.clear()
    await storm(rate * 3, rate)
    await srv.quiesce()
    await _rss_back(srv, rss1, 8 * 1024 * 1024)
    rss2 = srv.rss()
    assert rss2 - rss1 < 8 * 1024 * 1024, (rss1, rss2)
    assert counter["failed"] == 0, (counter, why)
