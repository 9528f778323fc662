"""The front ends' own numbering across `agent-bridge serve` processes on one private PostgreSQL and
one private Redis (docs/loomi.md and docs/scale-out.md, "Several nodes"): a Loomi phone (the
spec-model app) alternating between three nodes across reconnects, one of them killed, misses
nothing and gets nothing twice; an lvmh browser on another node sees a bridge session's events
with the seqs every node gives them."""

from __future__ import annotations

import pytest

from tests.conformance.loomi_client import LoomiApp, close_all
from tests.conformance.lvmh_client import Browser, Rest
from tests.hardening.proc import LVMH_TOKEN, BridgeProcess
from tests.waiting import until
from tests.scale.phones import loomi_run as _run, loomi_ws as _ws, pair_qr as _qr


@pytest.fixture
def nodes(serve_nodes):
    return lambda *names: serve_nodes(*names, adapters="loomi,lvmh")



def _http(proc: BridgeProcess) -> str:
    return f"http://127.0.0.1:{proc.ports['lvmh']}"




async def test_a_phone_alternating_between_three_nodes_one_killed_misses_nothing(nodes):
    n1, n2, n3 = nodes("n1", "n2", "n3")
    phone, other = LoomiApp("Pixel 9"), LoomiApp("Other phone")
    try:
        await phone.pair(dict(await _qr(n1), url=_ws(n2)))  # a token of n1, redeemed on n2
        await other.pair(dict(await _qr(n3), url=_ws(n3)))
        runs: dict[str, str] = {}
        plan = [n1, n2, n3, n1, n2, n3]
        for k, here in enumerate(plan):
            if k == 4:
                n1.kill9()  # the phone was on n1 last; n2 takes it over from what n1 stored
            ok = await phone.connect(_ws(here))
            assert ok["payload"]["truncated"] is False and ok["seq"] == phone.processed, ok
            text = f"turn {k}"
            runs[await _run(phone, text)] = text
            await phone.send("ping")
            await phone.until(lambda k=k: len(phone.pongs) > k)
            await phone.disconnect()
            away = f"away {k}"  # the other phone, on a node still alive, while this one is away
            runs[await _run(other, away)] = away
        ok = await phone.connect(_ws(n3))
        await phone.until(lambda: all(phone.completed(r) for r in runs), timeout=30)
        seqs = phone.seqs()
        assert phone.dropped == [] and seqs == sorted(set(seqs)), seqs
        for run_id, text in runs.items():
            assert len(phone.completed(run_id)) == 1 and len(phone.find("run.started", run_id=run_id)) == 1
            assert phone.run_text(run_id) == "Echo: " + text
    finally:
        await close_all()


async def test_a_browser_on_another_node_sees_the_same_lvmh_seqs(nodes):
    n1, n2 = nodes("n1", "n2")
    rest1, rest2 = Rest(_http(n1), LVMH_TOKEN), Rest(_http(n2), LVMH_TOKEN)
    browser = Browser(_http(n2), LVMH_TOKEN)
    try:
        status, created = await rest1.call("POST", "/api/conversations", {"name": "Seen from n2"})
        assert status in (200, 201), (status, created)
        sid = created["id"]
        await browser.connect()
        await until(lambda: browser.listed(sid), what="the session listed on n2")
        await browser.subscribe(sid)
        for k, rest in enumerate((rest1, rest2), start=1):  # a run on n1, then one on n2
            status, _ = await rest.prompt(sid, f"run {k}")
            assert status in (200, 202), status
            await until(lambda k=k: sum(t == "agent_settled" for t in browser.view(sid).types()) >= k,
                        what="the run settled in the browser on n2")
        stored = await rest1.settled(sid, runs=2)
        assert await rest2.events(sid) == stored
        assert browser.view(sid).persisted() == stored and browser.twice == []
        assert browser.view(sid).texts() == ["Echo: run 1", "Echo: run 2"]
        seqs = [e["seq"] for e in browser.view(sid).events]
        assert seqs == sorted(set(seqs))
    finally:
        await browser.close()
        await rest1.close()
        await rest2.close()
