"""Runs a restart or a lost plugin left open (docs/conformance.md, lvmh, "Runs cut short").

A bridge conversation's run is closed by the ``RunFinished`` the core reports for it (the
renderer, restored here, completes its open message and resolves what the core no longer
knows); a run the core does not report is closed here at once. A plugin session's run is
closed only if its plugin does not come back within ``plugin_return`` (a plugin that
returns resends and settles its own run).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Optional

from bridge_core import events as ev
from bridge_core.ids import new_id

from . import codec

if TYPE_CHECKING:
    from .registry import SessionRecord
    from .server import LvmhFrontEnd

log = logging.getLogger("agent_bridge.lvmh")

INTERRUPTED = "interrupted by a restart"
GONE = "the pi session did not reconnect"


def restore_open_runs(fe: "LvmhFrontEnd") -> None:
    """Rebuild, from stored events, the runs the previous process left open."""
    reported = {run_id for _, run_id in getattr(fe.bridge, "interrupted_runs", ())}
    for sid, rec in list(fe.records.items()):
        run = fe.log.open_run(sid)
        if not run.open:
            continue
        if rec.source == "plugin":
            rec.run = run
            if fe.cluster is None:  # with several nodes, its plugin may be connected to another one
                watch_abandoned(fe, rec)
            continue
        if run.run_id is None:
            run.run_id = f"interrupted-{new_id()}"
        fe.renderer.restore(sid, run)
        if fe.cluster is not None:
            continue  # with several nodes, the core's RunFinished (from whichever node) closes it
        if run.run_id not in reported:
            # the core closed it before the old process stopped (a clean stop cancels runs) but
            # this log missed the close: its open message ends with the text the core kept
            finished = ev.RunFinished(conversation_id=sid, run_id=run.run_id, status="failed", error=INTERRUPTED,
                                      text=kept_text(fe, sid, fe.renderer.open_message(sid)))
            for etype, payload in fe.renderer.render(finished):
                fe._emit(sid, etype, payload, finished.ts)
        log.info("lvmh: session %s had a run open when the bridge stopped; closing it", sid)


def kept_text(fe: "LvmhFrontEnd", cid: str, message_id: Optional[str]) -> str:
    """The text the core stored for ``message_id`` of conversation ``cid`` ("" when none)."""
    conv = fe.bridge.conversations.get(cid)
    if conv is None or message_id is None:
        return ""
    return next((m.text for m in reversed(conv.messages) if m.message_id == message_id), "")


def watch_abandoned(fe: "LvmhFrontEnd", rec: "SessionRecord") -> None:
    """A plugin session whose run is open lost its plugin: close the run if it does not return in time."""
    if rec.abandon is None and rec.run.open:
        loop = asyncio.get_running_loop()
        rec.abandon = loop.call_later(fe.plugin_return, abandoned, fe, rec.id)


def abandoned(fe: "LvmhFrontEnd", sid: str) -> None:
    rec = fe.records.get(sid)
    if rec is None:
        return
    rec.abandon = None
    if rec.conn is not None or not rec.run.open:
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
        fe._store_event(rec, seq, etype, payload, now)
