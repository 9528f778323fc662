"""A hostile worker cannot fill the disk (docs/security.md, "What a worker may store"), over real
sockets against ``agent-bridge serve`` (a subprocess), with the fake Docker Engine for the spawn.

The attack of the issue: a spawned worker's credential streamed junk event frames as fast as it
could, and every one became a row. Now each plugin session stores at most ``[lvmh]
worker_quota_mb``: the event past it is refused with an ``error`` frame (``quota_exceeded``),
the next one closes the socket (4013); what was stored stays readable, the count survives a
restart (SQLite and PostgreSQL), and a worker's frames are capped at 1 MiB (aiohttp closes
1009 above it). Beside each attack, the legitimate path: the user's own plugin and another
worker keep storing, a worker under its quota stores fine.
"""

from __future__ import annotations

import json

import pytest

from tests.engines import pg_missing
from tests.hardening.clients import lvmh_api, lvmh_plugin
from tests.hardening.proc import BridgeProcess, count_rows
from tests.security.test_worker_scopes import DockerThread, closed, port_of, spawn_worker, worker_plugin

MIB = 1024 * 1024
QUOTA_MB = 4
PAD = 400 * 1024  # one junk event: ten fill the quota
WORKER_FRAME = MIB  # the largest frame a worker may send (a user's plugin: 4 MiB)


def junk(sid: str, seq: int, pad: int = PAD) -> str:
    """A well-formed event the daemon stores as it came (its ``ts`` valid: never re-encoded)."""
    return json.dumps({"v": 1, "sessionId": sid, "seq": seq, "ts": 1_700_000_000_000, "type": "junk",
                       "x": "j" * pad})


def fitting(frames: list[str], quota_mb: float) -> int:
    """How many of ``frames`` (ASCII: a character is a byte) fit in the quota, in order."""
    total = n = 0
    while n < len(frames) and total + len(frames[n]) <= quota_mb * MIB:
        total += len(frames[n])
        n += 1
    return n


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    docker = DockerThread()
    bridge = BridgeProcess(str(tmp_path_factory.mktemp("quota-bridge")), adapters="lvmh",
                           config={"lvmh": {"worker_quota_mb": QUOTA_MB}},
                           env={"LVMH_DOCKER_URL": "", "LVMH_CONTAINER_DOCKER_SOCK": docker.sock,
                                "DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    bridge.start()
    try:
        yield bridge, docker
    finally:
        code = bridge.stop()
        docker.stop()
        assert code == 0, bridge.stderr()[-2000:]


@pytest.fixture(scope="module")
def postgres():
    from tests.engines import Postgres

    reason = pg_missing()
    if reason:
        pytest.skip(reason)
    pg = Postgres().start()
    yield pg
    pg.stop()


async def fill(plugin, sid: str, quota_mb: float, first_seq: int = 1) -> tuple[int, list[str]]:
    """Send junk until the quota refuses one: (how many were stored, the frames made). The refusal's
    error frame is read and checked; the socket is still open after it."""
    frames = [junk(sid, seq) for seq in range(first_seq, first_seq + int(quota_mb * MIB // PAD) + 3)]
    fits = fitting(frames, quota_mb)
    assert 0 < fits < len(frames) - 1
    for frame in frames[:fits + 1]:
        await plugin.send_raw(frame)
    refused = await plugin.recv_type("error", timeout=15)
    assert refused["code"] == "quota_exceeded", refused
    assert refused["refSeq"] == first_seq + fits and refused["sessionId"] == sid, refused
    assert f"{quota_mb:g} MB" in refused["error"]
    return fits, frames


async def test_a_worker_cannot_fill_the_disk_and_nothing_else_is_affected(world):
    bridge, _ = world
    port = port_of(world)
    sid, token = await spawn_worker(world, repo="group/junk")
    worker = worker_plugin(world, sid, token)
    again = worker_plugin(world, sid, token)
    user = lvmh_api(port)
    own = lvmh_plugin(port, "users-own-pi")
    try:
        await worker.connect()
        fits, frames = await fill(worker, sid, QUOTA_MB)
        # refused once: the socket stays open; the repeat closes it
        await worker.send_raw(frames[fits + 1])
        code, after = await closed(worker.ws)
        assert code == 4013 and [f["code"] for f in after] == ["quota_exceeded"], (code, after)

        # what was stored stays, readable by the user; nothing past the quota reached the disk
        evs = await user.wait_events(sid, lambda e: len(e) >= fits, timeout=15)
        assert [e["seq"] for e in evs] == list(range(1, fits + 1))
        stored = count_rows(bridge.db_path(), "SELECT SUM(LENGTH(payload)) FROM events WHERE sessionId=?", (sid,))
        assert stored == sum(len(f) for f in frames[:fits]) <= QUOTA_MB * MIB
        assert count_rows(bridge.db_path(), "SELECT storedBytes FROM sessions WHERE id=?", (sid,)) == stored

        # a reconnect does not reset it: welcomed at what it stored, its next event refused at once
        welcome = await again.connect()
        assert welcome["lastSeq"] == fits
        await again.send_raw(junk(sid, fits + 1))
        refused = await again.recv_type("error")
        assert refused["code"] == "quota_exceeded" and refused["refSeq"] == fits + 1

        # the user's own plugin (another session, the user's token) keeps storing, a 2 MiB event too
        await own.connect()
        await own.run("still mine", "yes")
        big = await own.event("message_end", message={"role": "assistant", "id": "big", "text": "b" * (2 * MIB),
                                                       "thinking": None, "toolCalls": [], "toolCallId": None})
        mine = await user.wait_events("users-own-pi", lambda e: any(x["seq"] == big for x in e), timeout=15)
        assert [e["type"] for e in mine][-2:] == ["agent_settled", "message_end"]
        status, sessions = await user.get("/api/sessions")
        assert status == 200 and {s["id"] for s in sessions} >= {sid, "users-own-pi"}
    finally:
        for c in (worker, again, own):
            await c.close()
        await user.close()


async def test_a_worker_under_its_quota_stores_and_its_frames_are_capped(world):
    """Another worker stores its turns as before; a frame over the worker limit (1 MiB, against the
    user's 4 MiB) closes its socket (1009) with nothing stored, and its reconnect stores on."""
    port = port_of(world)
    sid, token = await spawn_worker(world, repo="group/honest")
    worker = worker_plugin(world, sid, token)
    again = worker_plugin(world, sid, token)
    user = lvmh_api(port)
    try:
        await worker.connect()
        await worker.run("fix the bug", "fixed")
        evs = await user.wait_events(sid, lambda e: any(x["type"] == "agent_settled" for x in e))
        settled = evs[-1]["seq"]
        await worker.send_raw(junk(sid, settled + 1, pad=WORKER_FRAME))
        code, _ = await closed(worker.ws)
        assert code == 1009
        welcome = await again.connect()
        assert welcome["lastSeq"] == settled  # the oversized event was never stored
        again.seq = settled
        await again.run("next task", "done")
        evs = await user.wait_events(sid, lambda e: sum(x["type"] == "agent_settled" for x in e) == 2)
        assert not any(e["type"] == "junk" for e in evs)
    finally:
        for c in (worker, again):
            await c.close()
        await user.close()


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_the_count_survives_a_restart(engine, tmp_path, request):
    """Any plugin on /agent/ws has the quota, and its count is kept with the session: after a
    restart (on PostgreSQL too) the full session is still full, and a new session stores."""
    extra = []
    if engine == "postgresql":
        extra = ["--store", request.getfixturevalue("postgres").new_database()]
    srv = BridgeProcess(str(tmp_path), adapters="lvmh", config={"lvmh": {"worker_quota_mb": 1}}, extra_args=extra)
    srv.start()
    plugins = []
    try:
        first = lvmh_plugin(srv.ports["lvmh"], "long-session")
        plugins.append(first)
        await first.connect()
        fits, _ = await fill(first, "long-session", 1)
        user = lvmh_api(srv.ports["lvmh"])
        try:
            await user.wait_events("long-session", lambda e: len(e) == fits, timeout=15)
        finally:
            await user.close()
        await first.close()
        assert srv.stop() == 0
        srv.start()

        back = lvmh_plugin(srv.ports["lvmh"], "long-session")
        fresh = lvmh_plugin(srv.ports["lvmh"], "fresh-session")
        plugins += [back, fresh]
        assert (await back.connect())["lastSeq"] == fits
        await back.send_raw(junk("long-session", fits + 1))
        refused = await back.recv_type("error")
        assert refused["code"] == "quota_exceeded" and refused["refSeq"] == fits + 1
        await fresh.connect()
        await fresh.run("a new session", "stores")
        user = lvmh_api(srv.ports["lvmh"])
        try:
            evs = await user.wait_events("fresh-session", lambda e: any(x["type"] == "agent_settled" for x in e))
            assert evs[0]["type"] == "agent_start"
            assert len(await user.events("long-session")) == fits
        finally:
            await user.close()
    finally:
        for p in plugins:
            await p.close()
        srv.stop()


def test_a_quota_that_is_not_a_size_is_refused_at_start(tmp_path):
    srv = BridgeProcess(str(tmp_path), adapters="lvmh", config={"lvmh": {"worker_quota_mb": -1}})
    assert srv.run_to_exit() == 2
    assert srv.stderr().strip().splitlines() == [
        "agent-bridge: lvmh.worker_quota_mb must be a number of megabytes, 0 for no limit"]
