"""Targeted scenarios: the faults the random plans meet by chance, made to happen. Each one sets
up the same clients as a plan (scenario.Run), does its few steps, then heals, settles, catches up
and reads every node exactly as a plan does, so the same checker judges it.

- ``crash_mid_stream``: a run streaming 2,000 deltas a second, its node killed with -9 once a
  connected phone got ``deltas`` of them (within the run's first second), restarted at once on
  its data dir (the embedded default) or under its own name (a node of several); a second phone
  was away and replays the run afterwards, the Pheby client reconnects.
- ``kill9_while_closing``: the same run, its node killed with -9, then killed again as it comes
  back, once its start marked the interrupted run failed and before it closed it (its front ends
  were still starting), then restarted for good (chaos seed 1003: a node killed three times in 9 s).
- ``read_your_writes``: a node stopped (SIGSTOP) while a stream goes on and a conversation is
  created on another node; a phone connected to the stopped node sends into it, and the node
  answers once continued.
- ``stall_then_send``: the same, a run starting and ending in an existing conversation while the
  node is stopped, the phone sending into that conversation.
- ``store_restart``: PostgreSQL restarted between runs a connected phone watched; the phone then
  reconnects to its node.
- ``redis_loss_mid_stream``: Redis losing its keys while a node is behind in the stream, a phone
  connected to that node watching a run to its end.
- ``claimed_while_stopped``: the node a phone is connected to stopped (SIGSTOP) mid-stream; the
  phone says hello to another node (claiming the device under a new epoch) and follows the run
  there; the stopped node, continued, must have its writes for the device refused and close its
  socket; the phone comes back to it at the end (claimed again there).
"""

from __future__ import annotations

import asyncio

from tests.waiting import until

from .history import History
from .scenario import Plan, Run
from .world import CLUSTER, World

CRASH_RATE = 2000  # deltas a second: the stream
PAUSE = 1.0  # s: how long the node stays stopped in ``read_your_writes``


def _plan(seed: int, topology: str, phones: int = 2) -> Plan:
    nodes = ("n1", "n2", "n3") if topology == CLUSTER else ("solo",)
    return Plan(seed, topology, 0.0, nodes, tuple(f"phone-{k + 1}" for k in range(phones)), ())


def deltas_of(app, run_id: str) -> int:
    """How many ``run.delta`` of ``run_id`` the phone ``app`` got so far."""
    return sum(1 for f in app.events if f["type"] == "run.delta" and f["run_id"] == run_id)


async def crash_mid_stream(world: World, seed: int, deltas: int = 200, sweep: bool = False) -> History:
    """``sweep``: the killed node stays down until another node closed its run (a node of several)."""
    run = Run(_plan(seed, world.topology), world)
    h = run.h
    try:
        await run.setup()
        live, away = run.phones["phone-1"], run.phones["phone-2"]
        await away.close()  # away for the whole run: it replays it afterwards
        node = run.chat.node  # the run executes where its command arrived
        run_id = await run.chat.chat(run.conversations[0], f"/bench {CRASH_RATE * 3} {CRASH_RATE}")
        assert run_id is not None, "the stream was refused"

        def streamed() -> int:
            return deltas_of(live.app, run_id)

        await live.app.until(lambda: streamed() >= deltas, 15)
        fault = h.fault("kill9", node)
        world.kill9(node)
        if sweep:  # the survivors notice the dead node (10 to 11 s) and close its run
            await live.app.until(lambda: live.app.completed(run_id), 30)
        await world.restart(node)
        h.healed(fault)
        await run.finish()
    finally:
        await run.close()
    return h


MARKED = "interrupted by a restart were marked failed"  # the start's log line (Bridge._fail_interrupted)


async def kill9_while_closing(world: World, seed: int, deltas: int = 200) -> History:
    run = Run(_plan(seed, world.topology), world)
    h = run.h
    try:
        await run.setup()
        live = run.phones["phone-1"]
        node = run.chat.node
        run_id = await run.chat.chat(run.conversations[0], f"/bench {CRASH_RATE * 3} {CRASH_RATE}")
        assert run_id is not None, "the stream was refused"
        await live.app.until(lambda: sum(1 for f in live.app.events if f["type"] == "run.delta"
                                         and f["run_id"] == run_id) >= deltas, 15)
        fault = h.fault("kill9", node)
        world.kill9(node)
        proc = world.procs[node]
        life = proc.starts + 1
        starting = asyncio.ensure_future(world.restart(node))  # blocks a thread until it listens
        # its start marked the run failed, its front ends are still starting: killed again there
        await until(lambda: starting.done() or (proc.starts == life and MARKED in proc.stderr()), 30,
                    "the start marking the interrupted run failed", interval=0.001)
        again = h.fault("kill9", node)
        if proc.alive:
            world.kill9(node)
        try:
            await starting
        except RuntimeError:  # "bridge exited": the kill before it listened
            pass
        await world.restart(node)
        h.healed(again)
        h.healed(fault)
        await run.finish()
    finally:
        await run.close()
    return h


async def read_your_writes(world: World, seed: int) -> History:
    run = Run(_plan(seed, world.topology), world)
    h = run.h
    try:
        await run.setup()
        phone = run.phones["phone-1"]  # paired on the second node
        stalled = phone.node
        assert stalled != run.chat.node
        stream = await run.chat.chat(run.conversations[0], f"/bench {CRASH_RATE * 4} {CRASH_RATE}")
        assert stream is not None
        fault = h.fault("pause", stalled)
        world.pause(stalled)
        await asyncio.sleep(PAUSE)  # the stop's length (the fault's shape): the stream goes on meanwhile
        cid = await run.chat.create("made while another node is stopped")
        assert cid is not None
        sent = asyncio.ensure_future(phone.send("into the conversation just made", cid))
        await asyncio.sleep(0.1)  # the rest of the stop: the phone's frame waits in the node's socket
        world.resume(stalled)
        h.healed(fault)
        await sent
        run.conversations.append(cid)
        await run.finish()
    finally:
        await run.close()
    return h


async def store_restart(world: World, seed: int) -> History:
    """PostgreSQL restarted (stopped at once, as a crash) between runs a connected phone watched;
    then the phone reconnects to the node it was on."""
    run = Run(_plan(seed, world.topology), world)
    h = run.h
    try:
        await run.setup()
        phone = run.phones["phone-1"]
        for k in range(2):
            await _watched_run(run, phone, f"before the restart {k}")
        fault = h.fault("pg_restart", "postgresql")
        await asyncio.to_thread(world.pg.restart)
        h.healed(fault)
        for k in range(2):
            await _watched_run(run, phone, f"after the restart {k}")
        await phone.connect(phone.node)
        await run.finish()
    finally:
        await run.close()
    return h


async def _watched_run(run: Run, phone, text: str) -> None:
    """A run of the Pheby client into its conversation, until the phone has seen it end."""
    run_id = await run.chat.chat(run.conversations[-1], text)
    if run_id is not None:
        await phone.app.until(lambda: phone.app.completed(run_id) or not phone.connected, 15)


async def stall_then_send(world: World, seed: int) -> History:
    """A node stopped while a run in a conversation starts and ends on another node; a phone on the
    stopped node sends into that conversation, and the node answers once continued."""
    run = Run(_plan(seed, world.topology), world)
    h = run.h
    try:
        await run.setup()
        phone = run.phones["phone-1"]  # paired on the second node
        stalled = phone.node
        cid = run.conversations[0]
        stream = await run.chat.chat(run.conversations[1], f"/bench {CRASH_RATE * 4} {CRASH_RATE}")
        assert stream is not None  # what the stopped node will have to catch up with first
        fault = h.fault("pause", stalled)
        world.pause(stalled)
        await asyncio.sleep(PAUSE)  # the stop's length (the fault's shape): the stream goes on meanwhile
        run_id = await run.chat.chat(cid, "a short run while a node is stopped")
        assert run_id is not None
        await run.chat.app.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == run_id, 15)
        sent = asyncio.ensure_future(phone.send("after the run this node has not seen yet", cid))
        await asyncio.sleep(0.1)  # the rest of the stop: the phone's frame waits in the node's socket
        world.resume(stalled)
        h.healed(fault)
        await sent
        await run.finish()
    finally:
        await run.close()
    return h


async def redis_loss_mid_stream(world: World, seed: int, deltas: int = 200) -> History:
    """Redis losing its keys (FLUSHALL) while a run streams 2,000 deltas a second to phones connected
    to the other nodes, one of which is behind in the stream (stopped for ``PAUSE``: what it has not
    read yet goes with the keys); the phones stay connected to the end of the run."""
    run = Run(_plan(seed, world.topology), world)
    h = run.h
    try:
        await run.setup()
        live = run.phones["phone-1"]
        run_id = await run.chat.chat(run.conversations[0], f"/bench {CRASH_RATE * 2} {CRASH_RATE}")
        assert run_id is not None, "the stream was refused"

        def streamed() -> int:
            return deltas_of(live.app, run_id)

        await live.app.until(lambda: streamed() >= deltas, 15)
        behind = live.node
        stop = h.fault("pause", behind)
        world.pause(behind)
        await asyncio.sleep(PAUSE / 2)  # the stop's length: the stream goes on without this node reading it
        fault = h.fault("redis_flush", "redis")
        await asyncio.to_thread(world.redis.flush)
        h.healed(fault)
        world.resume(behind)
        h.healed(stop)
        for phone in run.phones.values():
            await completed_or_closed(world, phone, run_id, 30)
        await run.finish()
    finally:
        await run.close()
    return h


async def completed_or_closed(world: World, phone, run_id: str, timeout: float) -> None:
    """Until ``phone`` got ``run_id``'s completion or its node closed it (issue 41: never silence). Past
    ``timeout``, a failure that says what the phone got, how long ago its last frame came, and what the
    nodes logged about the bus (a gap, a refetch, entries dropped): the case's evidence, its logs kept."""
    loop = asyncio.get_running_loop()
    seen = [len(phone.app.events), loop.time()]

    def done() -> bool:
        if len(phone.app.events) != seen[0]:
            seen[:] = [len(phone.app.events), loop.time()]
        return bool(phone.app.completed(run_id)) or not phone.connected

    try:
        await phone.app.until(done, timeout)
    except TimeoutError as e:
        said = "\n".join(world.lines("agent_bridge.bus", "agent_bridge.cluster", "agent_bridge.loomi"))
        raise TimeoutError(f"{phone.name} on {phone.node}: {deltas_of(phone.app, run_id)} deltas of {run_id}, "
                           f"no completion, still connected, its last frame {loop.time() - seen[1]:.1f} s ago "
                           f"({e}); the nodes' logs under {world.base}:\n{said}") from e


async def refetch_from_a_lagging_origin(world: World, seed: int) -> History:
    """An lvmh browser reconnecting (re-subscribe, refetch ``after`` its last seq) on one node right
    after a run whose origin node is behind in the stream (stopped, then catching up): only the
    origin stores a run's events, and it does so as it reads them back."""
    run = Run(_plan(seed, world.topology), world)
    h = run.h
    try:
        await run.setup()
        origin_phone = run.phones["phone-2"]  # paired on the third node
        origin = origin_phone.node
        await run.watcher.drop()
        stream = await run.chat.chat(run.conversations[1], f"/bench {CRASH_RATE * 6} {CRASH_RATE}")
        assert stream is not None  # what the stopped node will have to catch up with
        fault = h.fault("pause", origin)
        world.pause(origin)
        await asyncio.sleep(2 * PAUSE)  # the stop's length (the fault's shape): the stream goes on meanwhile
        world.resume(origin)
        h.healed(fault)
        res = await origin_phone.send("a run on the node that is behind", run.conversations[0])
        assert res is not None
        await run.chat.app.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == res["run_id"], 15)
        await run.watcher.connect(run.plan.nodes[1])  # not the origin: it has the run, the origin's rows not yet
        await run.chat.chat(run.conversations[0], "the next run, live in the browser")
        await run.finish()
    finally:
        await run.close()
    return h


async def claimed_while_stopped(world: World, seed: int, deltas: int = 100) -> History:
    """A phone's node stopped mid-stream while the phone moves to another node (docs/scale-out.md,
    "Fenced ownership"); the stopped node continued once the phone was served elsewhere."""
    run = Run(_plan(seed, world.topology), world)
    h = run.h
    try:
        await run.setup()
        phone = run.phones["phone-1"]  # paired on the second node
        owner = phone.node
        elsewhere = next(n for n in run.plan.nodes if n not in (owner, run.chat.node))
        run_id = await run.chat.chat(run.conversations[0], f"/bench {CRASH_RATE * 2} {CRASH_RATE}")
        assert run_id is not None, "the stream was refused"

        def streamed() -> int:
            return deltas_of(phone.app, run_id)

        await phone.app.until(lambda: streamed() >= deltas, 15)
        fault = h.fault("pause", owner)
        world.pause(owner)
        # a stop as the nemesis makes them, at most 3 s: stopped inside a batch, the owner holds the
        # device's row lock; the new owner's claim waits for it at most 2 s, then the hello is answered
        # unavailable and the phone says hello again (docs/scale-out.md, fencing: a claim's wait is bounded)
        resumer = asyncio.get_running_loop().call_later(3 * PAUSE, world.resume, owner)
        try:
            for _ in range(5):
                if await phone.connect(elsewhere):  # the new owner: a new epoch
                    break
                assert h.ops[-1].result.get("code") == "unavailable", h.ops[-1]
            assert phone.connected, h.ops[-1]
            await phone.app.until(lambda: streamed() >= 2 * deltas, 15)
        finally:
            resumer.cancel()
            world.resume(owner)
            h.healed(fault)
        await phone.app.until(lambda: phone.app.completed(run_id) or not phone.connected, 30)
        await phone.connect(owner)  # back to the node that was stopped: claimed again there
        await run.finish()
    finally:
        await run.close()
    return h


async def redis_loss_after_the_run(world: World, seed: int) -> History:
    """Redis losing its keys once a short run ended, while the node of a phone is stopped and has not read
    the run yet: nothing written after the loss shows that node a gap, yet its phone must get the run's
    end or be closed (issue 41: never silence)."""
    run = Run(_plan(seed, world.topology), world)
    h = run.h
    try:
        await run.setup()
        phone = run.phones["phone-1"]  # paired on the second node
        behind = phone.node
        stop = h.fault("pause", behind)
        world.pause(behind)
        run_id = await run.chat.chat(run.conversations[0], f"/bench {CRASH_RATE // 5} {CRASH_RATE}")
        assert run_id is not None, "the stream was refused"
        await run.chat.app.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == run_id, 15)
        fault = h.fault("redis_flush", "redis")
        await asyncio.to_thread(world.redis.flush)
        h.healed(fault)
        world.resume(behind)
        h.healed(stop)
        await completed_or_closed(world, phone, run_id, 30)
        await run.finish()
    finally:
        await run.close()
    return h
