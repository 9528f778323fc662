"""A compressed soak: mixed traffic on every front end for ``45 s x HARDENING_SCALE``.

Pheby clients run echo, tool, attachment, failing, clarifying and approval turns;
Loomi devices answer approvals, one stays connected and one keeps reconnecting
with ``last_seq``; an lvmh plugin streams pi turns and reconnects; a browser
watches a conversation; sockets churn in the background. Afterwards: no event
lost or delivered twice (the reconnecting device has every event the connected
one saw, transcripts hold every completed reply, the plugin's events are all
stored), and RSS and descriptors are recorded at start and end.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import orjson
import pytest

from bench.load import pair_loomi_devices
from tests.waiting import until

from .clients import LoomiClient, PhebyClient, all_events, lvmh_api, lvmh_plugin, message
from .proc import LVMH_TOKEN, PHEBY_SECRET
from .summary import SUMMARY, scaled
from .wsraw import RawWS

pytestmark = pytest.mark.hardening

SECONDS = scaled(45, minimum=10)
EVENT_TYPES = ("run.started", "run.delta", "run.completed", "run.failed", "run.tool_started", "run.tool_finished",
               "approval.required", "approval.resolved", "clarify.required", "clarify.resolved", "attachment.added",
               "task.created", "task.updated", "session.message", "notification")


def event_key(f: dict) -> bytes:
    """A Loomi event without its per-device numbering (the body is encoded once for every device)."""
    return orjson.dumps({k: v for k, v in f.items() if k not in ("seq", "event_id", "replayed")},
                        option=orjson.OPT_SORT_KEYS)


async def test_soak(bridge_factory):
    srv = bridge_factory("soak", config={"demo": {"approval_timeout": 30}}, log_level="WARNING")
    ports = srv.ports
    stop = asyncio.Event()
    stats = {"runs": 0, "failed_as_expected": 0, "approvals": 0, "clarify": 0, "downloads": 0, "reconnects": 0,
             "plugin_turns": 0, "churned": 0}
    problems: list[str] = []

    async with aiohttp.ClientSession() as http:
        devices = await pair_loomi_devices(http, ports["loomi"], 3)
    await srv.quiesce()  # the pairing sockets are gone before the baseline
    rss0, fds0 = srv.rss(), srv.fds()

    # --- Loomi: one device connected throughout, one answering approvals, one reconnecting ------------------
    steady = await LoomiClient.connect(ports["loomi"], devices[0])
    steady_events: list[dict] = []

    async def steady_reader():
        last = steady.hello_ok["seq"]
        while not stop.is_set():
            try:
                f = await steady.recv(1.0)
            except asyncio.TimeoutError:
                continue
            if f["seq"] <= last:
                problems.append(f"steady device: seq {f['seq']} after {last}")
            last = f["seq"]
            if f["type"] in EVENT_TYPES:
                steady_events.append(f)

    approver = await LoomiClient.connect(ports["loomi"], devices[1])

    async def approve_loop():
        while not stop.is_set():
            try:
                f = await approver.recv(1.0)
            except asyncio.TimeoutError:
                continue
            if f["type"] == "approval.required":
                ack = await approver.request("approval.resolve", {"approval_id": f["payload"]["approval_id"],
                                                                  "choice": "once"})
                if ack["type"] == "ack":
                    stats["approvals"] += 1
                elif ack["payload"]["code"] != "already_resolved":
                    problems.append(f"approval: {ack}")

    hopper_events: list[dict] = []

    async def hopper():
        """Reconnects every 2 s with its last_seq: replay must give back exactly what it missed."""
        last_seq = None
        seen_seqs: set[int] = set()
        while not stop.is_set():
            c = await LoomiClient.connect(ports["loomi"], devices[2], last_seq=last_seq)
            stats["reconnects"] += 1
            if last_seq is not None and c.hello_ok["payload"]["truncated"]:
                problems.append("hopper: truncated although the gap was short")
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                try:
                    f = await c.recv(0.2)
                except asyncio.TimeoutError:
                    continue
                if f["seq"] in seen_seqs:
                    problems.append(f"hopper: seq {f['seq']} delivered twice")
                seen_seqs.add(f["seq"])
                if f["type"] in EVENT_TYPES:
                    hopper_events.append(f)
                if f.get("replayed") or f["type"] in EVENT_TYPES:
                    last_seq = max(last_seq or 0, f["seq"])
                elif last_seq is None:
                    last_seq = f["seq"]
            await c.close()

    # --- Pheby: turns of every kind ----------------------------------------------------------------------------
    completed_texts: dict[str, list[str]] = {}

    async def chatter(k: int):
        c = await PhebyClient.connect(ports["pheby"])
        kinds = ["hello {}", "/tool t{}", "/attach", "/fail", "/approve echo {}", "/clarify ok {}?", "/notify n{}"]
        i = 0
        cid = None
        while not stop.is_set():
            if i % 20 == 0:
                cid = await c.create(f"soak {k}-{i}")
                completed_texts[cid] = []
            text = kinds[i % len(kinds)].format(f"{k}-{i}")
            await c.send({"type": "chat.send", "conversation_id": cid, "text": text, "request_id": f"s{k}-{i}"})
            frames = await c.until(lambda f: f.get("conversation_id") == cid and f["type"] in (
                "run.finished", "clarify.request") or (f["type"] == "error" and f.get("request_id") == f"s{k}-{i}"), 60)
            last = frames[-1]
            if last["type"] == "clarify.request":
                await c.send({"type": "clarify.respond", "clarify_id": last["clarify_id"], "response": "yes"})
                stats["clarify"] += 1
                frames += await c.until(lambda f: f.get("conversation_id") == cid and f["type"] == "run.finished", 60)
                last = frames[-1]
            if last["type"] == "error":
                problems.append(f"pheby: {last}")
            elif text == "/fail":
                stats["failed_as_expected"] += last["status"] == "failed"
            elif last["status"] != "completed":
                problems.append(f"pheby run {text!r}: {last}")
            for f in frames:
                if f["type"] == "message.complete" and f.get("conversation_id") == cid and f.get("kind") != "notice":
                    completed_texts[cid].append(f["text"])
                if f["type"] == "attachment.added" and f.get("conversation_id") == cid:
                    async with aiohttp.ClientSession() as http:
                        async with http.get(f"http://127.0.0.1:{ports['pheby']}{f['attachment']['download_path']}",
                                            headers={"Authorization": f"Bearer {PHEBY_SECRET}"}) as r:
                            if r.status != 200:
                                problems.append(f"download {r.status}")
                            stats["downloads"] += 1
            stats["runs"] += 1
            i += 1
            await asyncio.sleep(0.03)  # a client within Pheby's rate limit (100 frames/s)
        await c.close()

    # --- lvmh: a plugin streaming and reconnecting, a browser watching ---------------------------------------------
    plugin_sid = "soak-plugin"
    plugin_persisted: list[int] = []

    async def turn(p, n: int) -> None:
        keep = plugin_persisted.append
        keep(await p.event("agent_start"))
        keep(await p.event("message_start", message={"role": "user", "id": f"u{n}"}))
        keep(await p.event("message_end", message=message("user", f"u{n}", f"turn {n}")))
        keep(await p.event("message_start", message={"role": "assistant", "id": f"a{n}"}))
        for w in range(20):
            await p.event("message_update", delta=f" w{w}")  # streamed, never stored
        keep(await p.event("message_end", message=message("assistant", f"a{n}", "reply " * 20)))
        keep(await p.event("agent_end", usage={"inputTokens": 1}))
        keep(await p.event("agent_settled", aborted=False))

    async def plugin_loop():
        p = lvmh_plugin(ports["lvmh"], plugin_sid)
        w = await p.connect()
        p.seq = w["lastSeq"]
        turns = 0
        while not stop.is_set():
            await turn(p, turns)
            turns += 1
            stats["plugin_turns"] += 1
            if turns % 10 == 0:
                sent = p.seq
                await p.close()
                p = lvmh_plugin(ports["lvmh"], plugin_sid)
                w = await p.connect()
                if w["lastSeq"] != sent:  # everything sent before the reconnect is persisted
                    problems.append(f"plugin: welcome.lastSeq {w['lastSeq']} != {sent}")
                p.seq = w["lastSeq"]
            await asyncio.sleep(0.05)  # the subject: the plugin's pace (about 20 turns a second at most)
        await p.close()

    async def churn():
        n = 0
        while not stop.is_set():
            socks = []
            for i in range(20):
                port = ports[("pheby", "loomi", "lvmh")[i % 3]]
                n += 1  # a fresh address each time: their garbage hellos lock addresses out
                try:
                    ws = await RawWS.connect(port, "/ws" if i % 3 != 2 else f"/ws?token={LVMH_TOKEN}",
                                             local_addr=f"127.{200 + (n >> 16) % 50}.{(n >> 8) % 256}.{1 + n % 254}")
                    ws.send_text(b'{"garbage": true' if i % 2 else b"\xff\xfe")
                    socks.append(ws)
                except Exception as exc:
                    problems.append(f"churn: {exc!r}")
            await asyncio.sleep(0.2)  # the subject: garbage sockets held open a while, then dropped
            for ws in socks:
                ws.abort()
            stats["churned"] += len(socks)
            await asyncio.sleep(0.3)  # the subject: the churn's pace

    t0 = time.monotonic()
    tasks = [asyncio.ensure_future(x) for x in (
        steady_reader(), approve_loop(), hopper(), chatter(0), chatter(1), plugin_loop(), churn())]
    mid_rss, mid_fds = [], []
    while time.monotonic() - t0 < SECONDS:
        await asyncio.sleep(1.0)  # the subject: the soak's length, sampled once a second
        mid_rss.append(srv.rss())
        mid_fds.append(srv.fds())
        if any(t.done() for t in tasks):
            break
    stop.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors

    # --- checks -----------------------------------------------------------------------------------------------------
    # the reconnecting device received every event the steady one did, while both were paired
    first_hop = min((f["ts"] for f in hopper_events), default=0)
    last_hop = max((f["ts"] for f in hopper_events), default=0)
    want = {event_key(f) for f in steady_events if first_hop <= f["ts"] <= last_hop}
    got = {event_key(f) for f in hopper_events}
    lost_loomi = len(want - got)
    # every completed reply is in its conversation's transcript
    pheby = await PhebyClient.connect(ports["pheby"])
    lost_pheby = checked_pheby = 0
    for cid, texts in completed_texts.items():
        hist = await pheby.open(cid, limit=500)
        kept = [m["text"] for m in hist["messages"] if m["role"] == "assistant"]
        checked_pheby += len(texts)
        lost_pheby += sum(1 for t in texts if t not in kept)
        if hist["run"] is not None:
            problems.append(f"{cid} still running after the soak")
    await pheby.close()
    # every plugin event is stored once (message_update is never stored)
    api = lvmh_api(ports["lvmh"])
    stored: list[int] = []

    async def plugin_events_stored() -> bool:  # its last events, sent just before the stop, land in a batch
        stored[:] = [e["seq"] for e in await all_events(api, plugin_sid)]
        return set(plugin_persisted) <= set(stored)

    try:
        await until(plugin_events_stored, 15, "the plugin's events stored", interval=0.2)
    except AssertionError:
        pass  # counted as lost below
    finally:
        await api.close()
    lost_plugin = len(set(plugin_persisted) - set(stored))
    dup_plugin = len(stored) - len(set(stored))
    for c in (steady, approver):
        await c.close()
    await srv.fds_back(fds0, 15)
    rss1, fds1 = srv.rss(), srv.fds()
    SUMMARY.resource(f"soak {SECONDS} s (all clients gone)", rss0, rss1, fds0, fds1)
    SUMMARY.events(len(want) + checked_pheby + len(plugin_persisted), lost_loomi + lost_pheby + lost_plugin, dup_plugin)
    SUMMARY.note("soak: " + ", ".join(f"{k} {v}" for k, v in stats.items())
                 + f"; RSS peak {max(mid_rss) / 1e6:.0f} MB, descriptors peak {max(mid_fds)}; checked Loomi {len(want)} "
                 f"(lost {lost_loomi}), Pheby replies {checked_pheby} (lost {lost_pheby}), plugin events "
                 f"{len(plugin_persisted)} (lost {lost_plugin}, duplicated {dup_plugin})")
    SUMMARY.fault(f"soak {SECONDS} s")
    assert not problems, problems[:10]
    assert lost_loomi == 0 and lost_pheby == 0 and lost_plugin == 0 and dup_plugin == 0, (
        lost_loomi, lost_pheby, lost_plugin, dup_plugin)
    assert stats["runs"] > 20 and stats["approvals"] > 0 and stats["plugin_turns"] > 5, stats
    assert fds1 <= fds0, (fds0, fds1)
    out = srv.all_output()
    assert "Traceback" not in out, out[out.find("Traceback") - 500: out.find("Traceback") + 2000]

