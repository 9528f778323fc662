"""A Redis that loses its keys under live nodes (docs/scale-out.md "The cluster-wide number"): two
`agent-bridge serve` processes on one private PostgreSQL and one private redis-server without
persistence, which is flushed (FLUSHALL) or restarted mid-life. The cluster-wide number goes on
above everything it gave before, so a Loomi phone (the spec-model app) misses no event after it,
and an lvmh bridge session's seqs (derived from the number) never collide with stored ones."""

from __future__ import annotations

import pytest

from tests.conformance.loomi_client import LoomiApp, close_all
from tests.conformance.lvmh_client import Browser, Rest
from tests.hardening.proc import LVMH_TOKEN
from tests.scale.test_numbering_nodes import _http, _qr, _ws, nodes  # noqa: F401  (the fixture)
from tests.waiting import until


async def _prompt(rest: Rest, sid: str, text: str) -> str:
    status, body = await rest.prompt(sid, text)
    assert status in (200, 202) and body["ok"] is True, (status, body)
    return body["runId"]


@pytest.mark.parametrize("loss", ["flushall", "restart"])
async def test_a_redis_that_loses_its_keys_skips_no_event_and_reuses_no_seq(nodes, redis_server, loss):  # noqa: F811
    n1, n2 = nodes("n1", "n2")
    phone = LoomiApp("Pixel 9")
    rest1, rest2 = Rest(_http(n1), LVMH_TOKEN), Rest(_http(n2), LVMH_TOKEN)
    browser = Browser(_http(n2), LVMH_TOKEN)
    try:
        await phone.pair(dict(await _qr(n1), url=_ws(n2)))
        status, created = await rest1.call("POST", "/api/conversations", {"name": "Through a loss"})
        assert status in (200, 201), (status, created)
        sid = created["id"]
        await browser.connect()
        await until(lambda: browser.listed(sid), what="the session listed on n2")
        await browser.subscribe(sid)
        runs = {}
        for k, rest in enumerate((rest1, rest2)):  # before the loss: a run on each node
            runs[await _prompt(rest, sid, f"before {k}")] = f"before {k}"
            await phone.until(lambda: all(phone.completed(r) for r in runs))
        before = await rest1.settled(sid, runs=2)
        ok = await phone.connect(_ws(n2))  # the device's cursor is now the last event numbered for it
        assert ok["payload"]["truncated"] is False, ok

        if loss == "flushall":
            redis_server.flush()
        else:
            redis_server.restart()

        for k, rest in enumerate((rest1, rest2)):  # after it: every node publishes again
            runs[await _prompt(rest, sid, f"after {k}")] = f"after {k}"
            await phone.until(lambda: all(phone.completed(r) for r in runs), timeout=30)
        await phone.disconnect()  # away during a run, back on the other node: replayed from there
        runs[await _prompt(rest1, sid, "while away")] = "while away"
        await rest1.settled(sid, runs=5, timeout=30)
        ok = await phone.connect(_ws(n1))
        assert ok["payload"]["truncated"] is False, ok
        await phone.until(lambda: all(phone.completed(r) for r in runs), timeout=30)
        # the phone on n2 got every run after the loss, in order, nothing dropped or skipped
        seqs = phone.seqs()
        assert phone.dropped == [] and seqs == sorted(set(seqs)), seqs
        for run_id, text in runs.items():
            assert len(phone.find("run.started", run_id=run_id)) == 1
            assert len(phone.completed(run_id)) == 1 and phone.run_text(run_id) == "Echo: " + text
        # lvmh: the runs after the loss are stored with seqs above every stored one, none lost to a collision
        stored = await rest1.settled(sid, runs=5, timeout=30)
        assert stored[:len(before)] == before
        stored_seqs = [e["seq"] for e in stored]
        assert stored_seqs == sorted(set(stored_seqs))
        per_run = len(before) // 2
        assert len(stored) == 5 * per_run, [e["type"] for e in stored]
        assert await rest2.events(sid) == stored
        await until(lambda: browser.view(sid).persisted() == stored, what="the browser on n2 has every run")
        assert browser.twice == []
        assert browser.view(sid).texts() == ["Echo: " + t for t in runs.values()]
    finally:
        await close_all()
        await browser.close()
        await rest1.close()
        await rest2.close()
