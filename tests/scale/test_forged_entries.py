"""A process with Redis access (the password, not the cluster key) against `agent-bridge serve`
nodes on a private PostgreSQL and a password-protected Redis (docs/security.md, threat model;
docs/scale-out.md "Signed entries"): the entries it writes into the nodes' streams are dropped,
counted and logged, and the nodes' own cross-node approvals and cancels work beside them."""

from __future__ import annotations

import time

import orjson
import pytest

from bridge_core.model import events as ev
from bridge_core.scale.busauth import derive_key, entry_mac
from bridge_core.model.serialize import to_dict
from tests.hardening.proc import LVMH_TOKEN, PHEBY_SECRET, BridgeProcess
from tests.scale.test_nodes import _pheby, _watching


@pytest.fixture
def nodes(serve_nodes):
    return lambda *names, **kw: serve_nodes(*names, adapters="pheby", **kw)


@pytest.fixture
async def attacker(redis_server, redis_url):
    import redis.asyncio as aioredis

    r = aioredis.from_url(redis_url)
    yield r
    await r.aclose()


def _req(rid: str, command: str, args: dict) -> dict:
    return {"t": "req", "id": rid, "cmd": command, "args": args, "origin": {"surface": "pheby"}, "hosted": False}


def _signed_wrong(stream: str, payload: bytes, node: str) -> dict:
    """The signed format, under a key of the forger's own."""
    h = orjson.dumps(["ab1", stream, node, "0123456789abcdef", 1, int(time.time() * 1000)])
    return {"h": h, "b": payload, "m": entry_mac(b"forger's own key, 32 bytes long!", h, payload)}


def _quiet(proc: BridgeProcess, *secrets: str) -> None:
    out = proc.all_output()
    for secret in secrets:
        assert secret not in out


async def test_forged_commands_and_events_are_dropped_and_a_real_cross_node_approval_wins(
        nodes, attacker, redis_server):
    n1, n2 = nodes("n1", "n2")
    a1, a2 = await _pheby(n1), await _pheby(n2)
    try:
        cid = await a1.create("Approve")
        idle = await a1.create("Idle")
        await _watching([a2], cid)
        await _watching([a2], idle)
        await a1.chat(cid, "/approve rm -rf build")
        aid = (await a2.wait_until(lambda: list(a2.view(cid).approvals)))[0]
        # the issue's entries: a ResolveApproval "always" and a SendMessage into n1's inbox, as today's
        # nodes read them, and in the signed format under the forger's own key; events naming a ghost node
        always = _req("f1", "ResolveApproval", {"approval_id": aid, "choice": "always"})
        prompt = _req("f2", "SendMessage", {"text": "pwned", "conversation_id": idle})
        for data in (always, prompt):
            await attacker.xadd("agent-bridge:inbox:n1", {"c": orjson.dumps({"from": "ghost", "c": data})})
            await attacker.xadd("agent-bridge:inbox:n1", _signed_wrong("agent-bridge:inbox:n1", orjson.dumps(data),
                                                                       "n2"))  # fmt: skip
        ghost = orjson.dumps([["e", to_dict(ev.ConversationCreated(conversation_id="ghost-conv", name="Ghost"))]])
        await attacker.xadd("agent-bridge:events", {"n": 10**6, "node": "ghost", "b": ghost})
        await attacker.xadd("agent-bridge:events", {"n": 10**6, **_signed_wrong("agent-bridge:events", ghost, "n1")})
        # the real answer, from the node that does not run it: the node running it decides
        await a2.send({"type": "approval.respond", "approval_id": aid, "choice": "once", "request_id": "legit"})
        won = await a2.wait_frame(lambda f: f.get("request_id") == "legit")
        assert won["type"] == "approval.resolved" and won["choice"] == "once" and won["accepted"] is True, won
        for app in (a1, a2):
            await app.wait_until(lambda: app.view(cid).transcript()[-1:] == [("assistant", "Ran: rm -rf build")]
                                 and app.view(cid).run is None)  # fmt: skip
            assert [f for f in app.conn_frames if f["type"] == "approval.resolved"] == [won]
            assert not [f for f in app.conn_frames if f.get("conversation_id") == idle  # no run began in Idle
                        and f["type"].startswith(("run.", "message."))]
            assert not [f for f in app.conn_frames if f.get("conversation_id") == "ghost-conv"]
            assert app.violations == []
        # counted and logged (once a minute per reason), on each node that read them
        assert await n1.wait_log("unsigned so far)") and await n1.wait_log("bad_mac so far)")
        assert await n2.wait_log("unsigned so far)") and await n2.wait_log("bad_mac so far)")
        key = derive_key(PHEBY_SECRET, LVMH_TOKEN)
        for proc in (n1, n2):
            _quiet(proc, redis_server.password, key.hex(), PHEBY_SECRET, LVMH_TOKEN)
    finally:
        await a1.close()
        await a2.close()


async def test_a_copy_of_a_cross_node_cancel_does_not_stop_the_next_run(nodes, attacker):
    n1, n2 = nodes("n1", "n2")
    a1, a2 = await _pheby(n1), await _pheby(n2)
    try:
        cid = await a1.create("Cancel")
        await _watching([a2], cid)

        def drafting(app, since: int):
            return app.wait_frame(lambda f: f["type"] == "message.delta" and f.get("conversation_id") == cid,
                                  since=since)  # fmt: skip

        async def cancelled_from_n2() -> None:
            since = len(a2.conn_frames)
            run_id = (await a1.chat(cid, "/slow 30"))["run_id"]
            await drafting(a2, since)
            reply = await a2.request("run.cancel", conversation_id=cid)  # whichever run is running
            assert reply["type"] != "error", reply
            for app in (a1, a2):
                fin = await app.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == run_id)
                assert fin["status"] == "cancelled"

        await cancelled_from_n2()
        entries = await attacker.xrange("agent-bridge:inbox:n1")
        [cancel] = [fields for _, fields in entries if b"CancelRun" in (fields.get(b"b") or fields.get(b"c") or b"")]
        since = len(a1.conn_frames)
        second = (await a1.chat(cid, "/slow 1"))["run_id"]
        await drafting(a1, since)
        await attacker.xadd("agent-bridge:inbox:n1", cancel)  # n2's cancel, once more
        for app in (a1, a2):
            fin = await app.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == second)
            assert fin["status"] == "completed", fin
        assert await n1.wait_log("replayed so far)")
        await cancelled_from_n2()  # a real cancel still works
        assert a1.violations == [] and a2.violations == []
    finally:
        await a1.close()
        await a2.close()


async def test_nodes_under_another_cluster_key_are_not_heard(nodes, redis_server):
    ours = {"AGENT_BRIDGE_CLUSTER_KEY": "a cluster key of our own, 32+ chars"}
    n1, n2 = nodes("n1", "n2", env=ours)
    (n3,) = nodes("n3", env={"AGENT_BRIDGE_CLUSTER_KEY": "another cluster key entirely, 32+"})
    a1, a2, a3 = await _pheby(n1), await _pheby(n2), await _pheby(n3)
    try:
        cid = await a1.create("Ours")
        await _watching([a2], cid)  # n1 and n2 share the key set: they hear each other
        theirs = await a3.create("Theirs")
        for proc in (n1, n2):  # n3's event, signed under its own key, dropped where it is read
            assert await proc.wait_log("bad_mac so far)") and "do the nodes share" in proc.stderr()
        assert await n3.wait_log("bad_mac so far)")  # and n1's, on n3
        for app, cids in ((a1, {theirs}), (a2, {theirs}), (a3, {cid})):
            assert not [f for f in app.conn_frames if f.get("conversation_id") in cids]
        for proc in (n1, n2, n3):
            _quiet(proc, ours["AGENT_BRIDGE_CLUSTER_KEY"], "another cluster key entirely", redis_server.password)
    finally:
        for app in (a1, a2, a3):
            await app.close()


@pytest.mark.parametrize("auth", ["none", "wrong"])
async def test_a_bus_without_the_redis_password_is_refused_in_one_line(engines, redis_server, tmp_path, auth):
    url = redis_server.url_without_password if auth == "none" else \
        redis_server.url.replace(redis_server.password, "not-the-password-4f1e")  # fmt: skip
    proc = BridgeProcess(str(tmp_path / "n1"), adapters="pheby",
                         extra_args=["--store", engines[0], "--bus", url, "--node-id", "n1"])  # fmt: skip
    assert proc.run_to_exit() != 0
    lines = [line for line in proc.stderr().splitlines() if line.startswith("agent-bridge:")]
    shown = url.replace("not-the-password-4f1e", "***")
    assert lines == [f"agent-bridge: cannot reach the bus {shown}: " + (
        "Authentication required." if auth == "none" else "invalid username-password pair or user is disabled.")]
    _quiet(proc, "not-the-password-4f1e", redis_server.password)
