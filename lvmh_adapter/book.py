"""The lvmh session book, without I/O (docs/architecture.md, "Where each rule lives"): every session's
record, what it stores and what it shows.

One book per front end holds the records (``registry``: their seq books and ownership), the event
log (``log``: ``persistence.EventLog``, given), the open messages' text (``inflight``) and the
renderer of the bridge's own conversations (``render``). It turns what happens into events:

- a plugin's frame (``ingest``), stored unless a delta, shown and translated into shared events;
- an event the daemon writes into a session (``store_event`` / ``show_event``: a run closed for a
  plugin that did not come back, cutshort.py);
- a core event (``on_event``): a bridge conversation's rendered lvmh events, numbered here (one
  node) or from the cluster-wide event number (several nodes: registry.cluster_seq), and the
  list's changes.

It notifies, and never imports, what is around it:

- ``browsers`` (stream.EventStream): ``push(sid, seq, raw)``, ``list_changed(sid, change)``,
  ``entry_changed(sid)``, ``forget(sid)``, ``subs`` (who watches what) and ``last`` (the seq shown last);
- ``link`` (relay.PluginRelay), the one link to the other nodes: ``shared`` (several nodes),
  ``writes()`` (whether this node writes a bridge session's row now), ``frame(...)`` (a pi session's
  event, for every node's browsers);
- ``source`` (plugin_source.PluginSource): ``translate`` and ``info_changed`` (a pi session's
  shared events).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Optional

from bridge_core.model import events as ev
from bridge_core.model.errors import BridgeError

from . import codec
from .inflight import InFlight
from .registry import END_SLOTS, SEQ_STRIDE, SessionRecord, SessionRegistry, cluster_seq, rendered_seq
from .render import Renderer

log = logging.getLogger("agent_bridge.lvmh")

SOURCE_NAME = "lvmh"  # the agent source of pi sessions (plugin_source.py)
LIST_EVENTS = (ev.ConversationCreated, ev.ConversationRenamed, ev.ConversationUpdated)
# events whose rendering depends on the run and message the renderer holds open (render.py)
RUN_STATE_EVENTS = frozenset({ev.InterimMessage, ev.MessageCompleted, ev.RunFinished})


def display_name(info: dict) -> str:
    name = info.get("name")
    if isinstance(name, str) and name.strip():
        return name.strip()[:200]
    cwd = info.get("cwd") or ""
    base = os.path.basename(cwd.rstrip("/")) if isinstance(cwd, str) else ""
    return f"pi: {base}" if base else "pi session"


class SessionBook:
    def __init__(self, bridge: Any, log: Any):
        self.bridge = bridge
        self.log = log  # persistence.EventLog
        self.registry = SessionRegistry()  # the seq books and ownership of every session (registry.py)
        self.records = self.registry.records
        self.renderer = Renderer(self.bridge_info)
        self.inflight = InFlight()  # open messages' text for browsers subscribing mid-stream
        self.browsers: Any = None  # stream.EventStream
        self.link: Any = None  # relay.PluginRelay
        self.source: Any = None  # plugin_source.PluginSource
        self.seq_base = 0  # several nodes: where bridge sessions' derived seqs start (registry.cluster_seq)
        self._models: dict[str, tuple] = {}
        self._shown = self._stored  # bound once: an event deferred makes no method object of its own

    # --- sessions ------------------------------------------------------------------------------------

    def plugin_record(self, sid: str) -> Optional[SessionRecord]:
        rec = self.records.get(sid)
        conv = self.bridge.conversations.get(sid) if rec is None and self.link.shared else None
        if conv is not None and conv.source == SOURCE_NAME:  # a pi session another node holds: from the store
            rec = self.registry.restore_one(self.log.load_one(sid), codec.session_info)
        return rec if rec is not None and rec.source == "plugin" else None

    def plugin_online(self, sid: str) -> bool:
        rec = self.records.get(sid)
        return rec is not None and rec.conn is not None

    def plugin_info(self, sid: str) -> Optional[dict]:
        rec = self.plugin_record(sid)
        return rec.info if rec is not None else None

    def is_bridge_session(self, sid: str) -> bool:
        conv = self.bridge.conversations.get(sid)
        return conv is not None and conv.source != SOURCE_NAME

    def _model_of(self, cid: str) -> tuple:
        cached = self._models.get(cid)
        if cached is None:
            conv = self.bridge.conversations.get(cid)
            try:
                cur = self.bridge.source_for(conv).current_model(cid)
                cached = (cur.model, cur.provider)
            except BridgeError:
                cached = (None, None)
            except Exception:
                log.exception("lvmh: current model of a conversation")
                cached = (None, None)
            self._models[cid] = cached
        return cached

    def bridge_info(self, cid: str) -> dict:
        conv = self.bridge.conversations.get(cid)
        rec = self.records.get(cid)
        if conv is None:
            return dict(rec.info) if rec is not None and rec.info else {"id": cid}
        model, provider = self._model_of(cid)
        return {
            "id": cid,
            "name": conv.name,
            "cwd": "",
            "model": model,
            "provider": provider,
            "agent": False,
            "repo": None,
            "startedAt": int(conv.created_at * 1000),
        }

    def forget_deleted(self) -> None:
        """At start (the bridge has loaded its conversations): drop sessions of conversations deleted meanwhile."""
        for sid, rec in list(self.records.items()):
            if rec.source == "bridge" and sid not in self.bridge.conversations:
                self.forget(sid, store=not self.link.shared)  # several nodes: another may have created it

    def forget(self, sid: str, store: bool = True) -> None:
        rec = self.registry.pop(sid)
        if rec is not None and rec.abandon is not None:
            rec.abandon.cancel()
        self._models.pop(sid, None)
        self.renderer.forget(sid)
        self.inflight.forget(sid)
        self.browsers.forget(sid)
        if rec is not None and store:
            self.log.delete_session(sid)
        self.browsers.list_changed(sid, "removed")

    # --- events the daemon writes -----------------------------------------------------------------

    def store_event(self, rec: SessionRecord, seq: int, etype: str, payload: dict, ts_ms: int,
                    persist: bool = True) -> None:
        """One event the daemon writes into a session: persisted (unless a delta, or not ``persist``) and streamed."""
        raw = codec.event_raw(rec.id, seq, ts_ms, etype, payload)
        if etype != "message_update" and persist:
            self.log.append(rec.id, seq, ts_ms, etype, raw)
        self.show_event(rec, seq, etype, payload, ts_ms, raw)

    def show_event(self, rec: SessionRecord, seq: int, etype: str, payload: dict, ts_ms: int, raw: str) -> None:
        """An event the daemon wrote into a session, to the browsers (a plugin session's: every node's)."""
        if etype != "message_update":
            rec.last_event_at = ts_ms
        self.inflight.feed(rec.id, etype, seq, payload)
        self.browsers.push(rec.id, seq, raw)
        if rec.source == "plugin":  # a run its plugin left open, closed here (cutshort.py)
            self.link.frame(rec.id, etype, seq, ts_ms, raw)

    # --- a plugin's frames ----------------------------------------------------------------------------

    def apply_info(self, rec: SessionRecord, raw: Any) -> None:
        before = rec.info
        info = codec.session_info(raw, rec.id, before)
        if info == before:
            return
        rec.info = info
        self.log.upsert_session(rec.id, info, "plugin")
        self.source.info_changed(rec.id, display_name(info), before, info)  # the shared events come from the source
        self.browsers.list_changed(rec.id)

    def ingest(self, rec: SessionRecord, frame: codec.PluginFrame, charged: int = 0) -> None:
        etype = frame.type
        if etype == "message_update":
            fresh, reserve = rec.plugin_delta(frame.seq)
            if reserve is not None:  # recorded ahead, so a closing event never reuses a delta's seq
                self.log.reserve(rec.id, reserve)
            if fresh:
                self.inflight.feed(rec.id, etype, frame.seq, frame.obj)
                self.log.later(rec.id, self._shown, frame.obj, frame.raw, frame.seq)  # behind what is queued
            return
        self.log.append(rec.id, frame.seq, frame.ts, etype, frame.raw, charged)
        if not rec.plugin_event(frame.seq, frame.ts):
            return  # a resend: stored once (INSERT OR IGNORE), not shown or translated twice
        rec.run.feed(etype, frame.obj)
        self.inflight.feed(rec.id, etype, frame.seq, frame.obj)
        if etype == "session_info":
            try:
                self.apply_info(rec, frame.obj.get("session"))
            except Exception:  # the event is stored and shown all the same
                log.exception("lvmh: a session_info event of a plugin session failed")
        self.log.later(rec.id, self._shown, frame.obj, frame.raw, frame.seq)

    def _stored(self, obj: dict, raw: str, seq: int) -> None:
        """A plugin's event once stored (durable before shown, persistence.EventLog.later): one deferred
        effect per event for its browsers here, the other nodes' and the core's shared events. It keeps
        the frame's decoded object, not the frame (one object less per event waiting for its commit):
        the object holds the frame's session id, type and ts (codec.decode_plugin_frame)."""
        sid, etype = obj["sessionId"], obj["type"]
        self.browsers.show(sid, seq, raw)
        if self.link.shared:  # several nodes: their browsers too
            self.link.stored_frame(sid, etype, seq, obj["ts"], raw)
        try:
            self.source.translate(sid, etype, obj)
        except Exception:  # the event is stored and shown; only its shared-event form is lost
            log.exception("lvmh: translating a %s event of a plugin session failed", etype)

    def refresh_plugin(self, rec: SessionRecord) -> None:
        """Several nodes: the session's seqs and open run as stored by whichever node held it last."""
        got = self.log.refresh(rec.id)
        if got is not None:
            rec.refreshed(*got)
        rec.run = self.log.open_run(rec.id)

    # --- the bridge's own conversations --------------------------------------------------------------

    def bridge_record(self, cid: str) -> SessionRecord:
        rec = self.records.get(cid)
        if rec is None:
            info = self.bridge_info(cid)
            rec = self.registry.add(cid, "bridge", info, self.log.committed.get(cid, 0))
            if self.link.writes():
                self.log.upsert_session(cid, info, "bridge", online=True)
        return rec

    def emit(self, cid: str, etype: str, payload: dict, ts: float) -> None:
        rec = self.bridge_record(cid)
        seq, reserve = rec.next_bridge_seq()
        if reserve is not None:  # reserve ahead, so a restart never reuses a seq
            self.log.reserve(cid, reserve)
        self.store_event(rec, seq, etype, payload, int(ts * 1000))

    def emit_all(self, cid: str, rendered: list, ts: float, n: int) -> None:
        """Events rendered from event ``n``: on several nodes numbered from ``n`` (registry.cluster_seq),
        and stored by every node that renders them, not only the event's origin (the same rows:
        ``INSERT OR IGNORE``): an origin killed before its batch committed, whose browser-less session
        no other node would store, loses none of them while one node lives (issue 41, chaos seed 2003
        ``decision_not_once``: an approval every phone saw resolved, missing from the stored events)."""
        if not self.link.shared:
            for etype, payload in rendered:
                self.emit(cid, etype, payload, ts)
            return
        rec = self.bridge_record(cid)
        if len(rendered) > SEQ_STRIDE:
            log.error("lvmh: %d events rendered from one; those past %d dropped", len(rendered), SEQ_STRIDE)
            rendered = rendered[:SEQ_STRIDE - 2] + [r for r in rendered if r[0] in END_SLOTS]
        for i, (etype, payload) in enumerate(rendered):
            seq = rendered_seq(self.seq_base, n, i, etype)  # (a run's end: the same seqs on every node)
            if seq > rec.high:
                rec.high = seq
            self.store_event(rec, seq, etype, payload, int(ts * 1000))

    def on_event(self, seq: int, e: Any) -> None:
        t = type(e)
        if t is ev.TextDelta:  # the hot path: only rendered for a browser that watches
            cid = e.conversation_id
            if e.kind != "text":
                return
            rec = self.records.get(cid)
            # nobody watches, and nothing rendered waits for its commit to be shown (durable before shown): a
            # browser subscribing before the message's start is shown would see it without these deltas (issue 41)
            if cid not in self.browsers.subs and self.renderer.open_message(cid) is not None and (
                    rec is None or self.browsers.last.get(cid, 0) >= rec.high):
                if self.link.shared:
                    at = cluster_seq(self.seq_base, seq, 0)  # the seq its message_update would have had
                else:
                    at = rec.high if rec is not None else 0
                self.inflight.append(cid, e.delta, at)
                return
            conv = self.bridge.conversations.get(cid)
            if conv is None or conv.source == SOURCE_NAME:
                return
            if not self.renderer.knows(cid, e.run_id):
                self._rebuild(cid, e.run_id)
            self.emit_all(cid, self.renderer.render(e), e.ts, seq)
            return
        if t in LIST_EVENTS:
            self._listed(e)
            return
        if t is ev.ConversationDeleted:
            self.forget(e.conversation_id)  # by every node, after what it stored of it (emit_all)
            return
        if t is ev.ModelChanged:
            self._model_changed(e.conversation_id)
        cid = getattr(e, "conversation_id", None)
        if cid is None:
            return
        self.browsers.entry_changed(cid)  # its entry's time, status, preview, waiting decisions (activity.py)
        conv = self.bridge.conversations.get(cid)
        if conv is None or conv.source == SOURCE_NAME:
            return  # plugin sessions are stored as their plugin sent them, never re-rendered
        if t in RUN_STATE_EVENTS and e.run_id is not None:
            if not self.renderer.knows(cid, e.run_id):
                self._rebuild(cid, e.run_id)
            if self.link.shared and cid in self.browsers.subs:
                self._fill(cid, e, seq)
            if t is ev.RunFinished and self.link.shared:
                self.renderer.completed_before_end(cid, e.run_id)  # several nodes: the end closes no message
        self.emit_all(cid, self.renderer.render(e), e.ts, seq)

    def _fill(self, cid: str, e: Any, n: int) -> None:
        """Before the open message's end (event ``n``, a completion, an interim message, the run's end): the
        text its deltas here fell short of, as one more ``message_update``, when they made a prefix of it.
        Several nodes: deltas the stream lost for good (a Redis restart, their writer killed) never reach
        this node, and a browser here that got the message's start got its end without them (issue 41,
        chaos seed 2003 ``deltas_incomplete``). Its seq is the last below event ``n``'s, never stored (a
        delta): above every seq rendered from an earlier event, below the message's end."""
        mid = self.renderer.open_message(cid)
        if mid is None or self.renderer.run_of(cid) != e.run_id:
            return
        text, said = e.text, self.inflight.shown(cid, mid)
        if said is None or len(said) >= len(text) or not text.startswith(said):
            return
        rec, seq = self.bridge_record(cid), cluster_seq(self.seq_base, n, 0) - 1
        if seq > rec.high:  # (a later event rendered already, delivered late after a gap: not in order)
            self.store_event(rec, seq, "message_update", {"delta": text[len(said):]}, int(e.ts * 1000))

    def _rebuild(self, cid: str, run_id: str) -> None:
        """An event of a run this node's renderer never saw start (a node restarted mid-run, which folds
        what the bus held before its front ends restore what the store left open; issue 41): the run and
        its open message are rebuilt from the stored events, so this node renders the event as every node
        that saw the run does (the same seqs, the same bytes: docs/scale-out.md "Durable before shown").
        Read once per run: a run the store does not show open renders as before, its end nothing when
        the store holds it (an end read back or delivered again after a restart: one end per run). Rebuilt
        at its end, its message is not closed there (``Renderer.completed_before_end``, as for every run's
        end with several nodes): the store may not hold the completion's rows yet (chaos seed 2019)."""
        run = self.log.open_run(cid)
        if run.open and run.run_id == run_id:
            self.renderer.rebuild(cid, run_id, run)
        else:
            self.renderer.rebuild(cid, run_id, None, ended=self.log.run_ended(cid, run_id))

    def _model_changed(self, cid: Optional[str]) -> None:
        if cid is None:
            self._models.clear()
        else:
            self._models.pop(cid, None)
        self.browsers.list_changed(cid)  # None: every conversation's model

    def _listed(self, e: Any) -> None:
        """A conversation created, renamed or updated: its record's info, and the list."""
        cid = e.conversation_id
        self._models.pop(cid, None)
        if self.is_bridge_session(cid):
            rec = self.records.get(cid)
            if rec is None:
                self.bridge_record(cid)
            else:
                rec.info = self.bridge_info(cid)
                if self.link.writes():
                    self.log.upsert_session(cid, rec.info, "bridge")
        elif self.link.shared and not self.link.writes():
            self.plugin_record(cid)  # a pi session connected to another node: listed here too
        self.browsers.list_changed(cid, "added" if type(e) is ev.ConversationCreated else "changed")
