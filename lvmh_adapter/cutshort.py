"""Runs a restart or a lost plugin left open (docs/conformance.md, lvmh, "Runs cut short").

A bridge conversation's run is closed by the ``RunFinished`` the core reports for it (the
renderer, restored here, completes its open message and resolves what the core no longer
knows); a run the core does not report is closed here at once. A plugin session's run is
closed only if its plugin does not come back within ``plugin_return`` (a plugin that
returns resends and settles its own run).

Several nodes (docs/scale-out.md "A pi run left open when its node dies"): the node a
plugin says hello to answers for its session's open run (a cluster hold, bridge_core/scale/holds.py,
kind ``HOLD``), from then until the run is closed or the plugin says hello elsewhere. It
closes the run as above, in one transaction with letting go of the hold, so a plugin that
came back to another node meanwhile keeps its run. A node that dies hands its holds to one
survivor (``inherit``), which waits ``plugin_return`` in its turn.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Optional

from bridge_core.model import events as ev
from bridge_core.model.ids import new_id

from . import codec

if TYPE_CHECKING:
    from .registry import SessionRecord
    from .host import Host

log = logging.getLogger("agent_bridge.lvmh")

GONE = "the pi session did not reconnect"
HOLD = "lvmh-plugin"  # several nodes: the node answering for a pi session's open run (holds.py)


def restore_open_runs(fe: "Host") -> None:
    """Rebuild, from stored events, the runs the previous process left open."""
    reported = {run_id for _, run_id in getattr(fe.bridge, "interrupted_runs", ())}
    mine = fe.cluster.holds.mine(HOLD) if fe.cluster is not None else set()  # (a restart under its own name)
    for sid, rec in list(fe.book.records.items()):
        run = fe.book.log.open_run(sid)
        if not run.open:
            continue
        if rec.source == "plugin":
            rec.run = run
            if fe.cluster is None or sid in mine:  # several nodes: only those this node answered for
                watch_abandoned(fe, rec)
            continue
        if run.run_id is None:
            run.run_id = f"interrupted-{new_id()}"
        fe.book.renderer.restore(sid, run)
        if fe.cluster is not None:
            continue  # with several nodes, the core's RunFinished (from whichever node) closes it
        if run.run_id not in reported:
            # the core closed it before the old process stopped (a clean stop cancels runs) but
            # this log missed the close: its open message ends with the text the core kept
            finished = ev.RunFinished(conversation_id=sid, run_id=run.run_id, status="failed", error=ev.RUN_INTERRUPTED,
                                      text=kept_text(fe, sid, fe.book.renderer.open_message(sid)))
            for etype, payload in fe.book.renderer.render(finished):
                fe.book.emit(sid, etype, payload, finished.ts)
        log.info("lvmh: session %s had a run open when the bridge stopped; closing it", sid)


def kept_text(fe: "Host", cid: str, message_id: Optional[str]) -> str:
    """The text the core stored for ``message_id`` of conversation ``cid`` ("" when none)."""
    conv = fe.bridge.conversations.get(cid)
    if conv is None or message_id is None:
        return ""
    return next((m.text for m in reversed(conv.messages) if m.message_id == message_id), "")


def watch_abandoned(fe: "Host", rec: "SessionRecord") -> None:
    """A plugin session whose run is open lost its plugin: close the run if it does not return in time."""
    if rec.abandon is None and rec.run.open:
        loop = asyncio.get_running_loop()
        rec.abandon = loop.call_later(fe.plugin_return, abandoned, fe, rec.id)
    elif fe.cluster is not None and not rec.run.open:
        fe.cluster.holds.release(HOLD, rec.id)  # nothing left open to answer for


def returned(rec: "SessionRecord") -> None:
    """The plugin is back (here, or on another node): its run is its own again."""
    if rec.abandon is not None:
        rec.abandon.cancel()
        rec.abandon = None


def inherit(fe: "Host", sid: str, dead: str) -> None:
    """Several nodes: the node that answered for ``sid`` died and this one inherited it: its open
    run, as stored, is closed here unless its plugin returns within ``plugin_return``."""
    rec = fe.book.plugin_record(sid)
    if rec is None:
        fe.cluster.holds.release(HOLD, sid)
        return
    if rec.conn is not None:
        return
    fe.book.refresh_plugin(rec)
    if rec.run.open:
        log.info("lvmh: node %s, which held pi session %s, is gone; its open run closes here unless the plugin "
                 "returns", dead, sid)  # fmt: skip
    watch_abandoned(fe, rec)


def abandoned(fe: "Host", sid: str) -> None:
    rec = fe.book.records.get(sid)
    if rec is None:
        return
    rec.abandon = None
    if rec.conn is not None:
        return
    if fe.cluster is not None:
        fe.tasks.spawn(_abandoned_shared(fe, rec), name="lvmh-abandoned")
        return
    if not rec.run.open:
        return
    # The plugin numbers its session's events; these take numbers above every one it used
    # (its unstored deltas included), so no browser has seen them, and once stored
    # welcome.lastSeq covers them: a plugin that returns later resends only what follows
    # (docs/conformance.md, lvmh, "Runs cut short").
    log.info("lvmh: plugin session %s did not come back; closing its open run", sid)
    now = codec.now_ms()
    settled = rec.run.settle(GONE)
    for seq, (etype, payload) in zip(rec.daemon_seqs(len(settled)), settled):
        payload["synthetic"] = True
        fe.book.store_event(rec, seq, etype, payload, now)


async def _abandoned_shared(fe: "Host", rec: "SessionRecord") -> None:
    """Several nodes: the run as the store has it (another node may have held the plugin since),
    closed as above in one transaction with letting go of the hold: not at all if a hello on
    another node took it meanwhile (that node answers for the run now)."""
    fe.book.refresh_plugin(rec)
    holds = fe.cluster.holds
    if not rec.run.open:
        holds.release(HOLD, rec.id)
        return
    now = codec.now_ms()
    start = max(rec.high, rec.top)  # numbered as above (registry.daemon_seqs), taken only once written
    events = []
    for seq, (etype, payload) in enumerate(rec.run.settle(GONE), start + 1):
        payload["synthetic"] = True
        events.append((seq, etype, payload, codec.event_raw(rec.id, seq, now, etype, payload)))
    rows = [(seq, now, etype, raw) for seq, etype, _, raw in events]
    if not await fe.book.log.append_if(rec.id, rows, holds.letting_go(HOLD, rec.id)):
        return  # its plugin said hello to another node
    log.info("lvmh: plugin session %s did not come back; closing its open run", rec.id)
    top = events[-1][0]
    rec.high, rec.top = max(rec.high, top), max(rec.top, top)
    for seq, etype, payload, raw in events:
        fe.book.show_event(rec, seq, etype, payload, now, raw)
