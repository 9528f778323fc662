"""pi sessions on every node (docs/scale-out.md "pi sessions on every node").

A pi plugin is connected to one node; its session must look the same from every node. The
node holding the plugin stores its events and translates them into shared events (those
travel as events); what only lvmh has travels as relays (``Cluster.relay``), in stream order:

- ``on`` / ``off``: the plugin connected (with its session info) or went away. Every other
  node keeps which node holds which session (``elsewhere``): ``session_list`` says online,
  and a node that stops or dies takes its sessions with it (a clean stop says ``off``; a
  dead node's are dropped when its liveness expires). A node that starts asks (``sync``)
  and the others answer with what they hold. ``off`` leaves once what the node received
  from the plugin is committed, and a plugin's hello on another node waits for it (at most
  ``HANDOVER_WAIT``): its ``welcome.lastSeq`` then covers all of it, so the plugin resends
  nothing the first node already stored and translated.
- ``f``: each plugin frame the holder ingested (new, not a resend), raw, with the seq the
  plugin gave it: every other node shows it to its browsers live (and to the open message a
  browser subscribing mid-stream gets). Nothing is stored or translated again there, and the
  session's seq books are not touched (a plugin moving here reads them from the store).

Fenced (docs/scale-out.md "Fenced ownership"): a hello here takes the session under a new epoch
(``arriving``: ``EventLog.claim``, committed before its state is read here); every write of this
node for it then carries that epoch, and one another node claimed since is refused: nothing of
it queued here is shown, relayed or translated, and its plugin's socket here is closed (``_lost``).
An ``on`` from another node for a session a socket here still holds makes a guard look at once
(``EventLog.check``). What this node shows or relays of an event waits until it is stored
(``EventLog.after_durable``).

Prompts and aborts for a pi session are commands (``PluginPrompt``, ``PluginAbort``) carried
out where the plugin is: ``Bridge.execute`` runs them here when the plugin is connected here,
else the cluster asks the other nodes (``Cluster.add_hosted``); nobody holding it is 409
offline, as on one node.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Optional

import attrs
import orjson

from bridge_core.model import commands as cmd

from . import codec, cutshort, errors
from .plugin_ws import close_later

if TYPE_CHECKING:
    from .registry import SessionRecord
    from .host import Host

log = logging.getLogger("agent_bridge.lvmh.relay")

NAME = "lvmh"
CHECK_EVERY = 5.0  # s between two looks for dead nodes while another node holds a session
HANDOVER_WAIT = 3.0  # s a hello waits for the node its plugin left to say it stored everything (``off``)


@attrs.frozen
class PluginPrompt:
    """Deliver ``text`` into pi session ``conversation_id`` (a ``prompt`` frame); its promptId back."""

    conversation_id: str
    text: str


@attrs.frozen
class PluginAbort:
    """Abort the current run of pi session ``conversation_id`` (an ``abort`` frame)."""

    conversation_id: str


def _frame_data(sid: str, etype: str, seq: int, ts: int, raw: str) -> dict:
    """A pi session's event as relayed to the other nodes' browsers (``_relayed``'s ``f``)."""
    return {"t": "f", "s": sid, "e": etype, "q": seq, "ts": ts, "r": raw}


def _relay_frame(cluster: Any, data: dict, _: Any) -> None:
    """``frame``'s relay, deferred until the event is stored (a plain function: nothing made per event)."""
    cluster.relay(NAME, data)


class PluginRelay:
    def __init__(self, fe: "Host"):
        self.fe = fe
        self.cluster: Any = None
        self.shared = False  # several nodes (the book numbers bridge sessions from the cluster's event numbers)
        self.elsewhere: dict[str, str] = {}  # session id -> the other node its plugin is connected to
        self._handover: dict[str, asyncio.Event] = {}  # sessions a hello here waits to be let go elsewhere
        self.carried: dict[str, dict] = {}  # session id -> the core run its plugin left open on another node (``off``)

    def attach(self) -> None:
        """At prepare: the commands (every node), and with several nodes the relays and routing."""
        fe = self.fe
        fe.bridge.extensions[PluginPrompt] = self._prompt
        fe.bridge.extensions[PluginAbort] = self._abort
        self.cluster = fe.cluster
        self.shared = self.cluster is not None
        fe.stream.durable = fe.book.log.later  # durable before shown (persistence.py)
        fe.book.log.on_lost = self._lost
        if self.cluster is not None:
            self.cluster.add_relay(NAME, self._relayed)
            self.cluster.add_hosted(PluginPrompt)
            self.cluster.add_hosted(PluginAbort)
            self.cluster.holds.on_inherit(cutshort.HOLD, lambda sid, dead: cutshort.inherit(fe, sid, dead))

    def writes(self) -> bool:
        """Whether this node writes a bridge conversation's session row now: with several nodes, the
        event's origin. Its rendered events are stored by every node (``SessionBook.emit_all``)."""
        c = self.cluster
        return c is None or c.delivering_own

    def start(self) -> None:
        if self.cluster is not None:
            self.cluster.relay(NAME, {"t": "sync"})
            self.fe.tasks.spawn(self._watch(), name="lvmh-relay-watch")

    # --- commands (where the plugin is connected) ----------------------------------------------------

    async def _prompt(self, c: PluginPrompt, origin: cmd.Origin) -> str:
        return self.fe.plugins.send_prompt(c.conversation_id, c.text)  # Offline (409) when not connected here

    async def _abort(self, c: PluginAbort, origin: cmd.Origin) -> None:
        self.fe.plugins.send_abort(c.conversation_id)

    # --- out -----------------------------------------------------------------------------------------

    def online(self, rec: "SessionRecord") -> None:
        if self.cluster is not None:
            self.cluster.relay(NAME, {"t": "on", "s": rec.id, "i": rec.info})

    def offline(self, sid: str) -> None:
        """The plugin left this node: ``off`` once what it sent here is committed (unless it is back)."""
        if self.cluster is not None:
            self.fe.tasks.spawn(self._off(sid), name="lvmh-relay-off")

    async def _off(self, sid: str) -> None:
        await self.fe.book.log.settle(sid)
        rec = self.fe.book.records.get(sid)
        if rec is None or rec.conn is None:
            self.cluster.relay(NAME, self._off_frame(sid))

    async def stopped(self, held: list) -> None:
        """This node stops: ``off`` for the sessions it held, once what they sent is committed."""
        if self.cluster is not None:
            for sid in held:
                await self.fe.book.log.settle(sid, timeout=2.0)
                self.cluster.relay(NAME, self._off_frame(sid))

    def _off_frame(self, sid: str) -> dict:
        """``off``, with the core run the plugin left open here (if any): the node it says hello to
        next takes that run over and goes on from its state (docs/scale-out.md "A pi run follows its
        plugin")."""
        frame: dict = {"t": "off", "s": sid}
        run = self.fe.source.carry(sid)
        if run is not None:
            frame["run"] = run
        return frame

    async def arriving(self, rec: "SessionRecord") -> None:
        """A hello here: on several nodes, for a session no socket here holds, once the node it left let
        go (``handover``), this node answers for its open run (a hold); it takes the session (a new
        epoch, ``EventLog.claim``) and reads its seqs and open run as the store has them."""
        if self.cluster is None:
            return
        away = rec.conn is None
        if away:
            await self.handover(rec.id)  # the node it was connected to has stored what it got
            await self.cluster.holds.hold(cutshort.HOLD, rec.id)  # this node answers for its open run from now
        log_ = self.fe.book.log
        before = log_.epochs.get(rec.id)
        epoch = await log_.claim(rec.id, rec.info)  # the fence: from now on the node it left writes nothing
        if away or before != epoch - 1:  # its plugin may have been connected to another node meanwhile
            self.fe.book.refresh_plugin(rec)

    async def follow_run(self, sid: str) -> None:
        """Several nodes: a run the plugin left open on another node follows it here (``off``'s run)."""
        if self.cluster is not None:
            await self.fe.source.take_over(sid, self.carried.pop(sid, None))

    async def handover(self, sid: str) -> None:
        """A hello here for a session another node held: wait until it let go (``off``), at most
        ``HANDOVER_WAIT`` (it may have died, or not noticed yet that its socket is gone)."""
        if sid not in self.elsewhere:
            return
        gone = self._handover.setdefault(sid, asyncio.Event())
        try:
            await asyncio.wait_for(gone.wait(), HANDOVER_WAIT)
        except asyncio.TimeoutError:
            log.info("lvmh: session %s: node %s did not let it go in time", sid, self.elsewhere.get(sid))
        finally:
            if self._handover.get(sid) is gone:
                del self._handover[sid]

    def frame(self, sid: str, etype: str, seq: int, ts: int, raw: str) -> None:
        """A pi session's event, for every node's browsers, once it is stored here (durable before shown)."""
        if self.cluster is not None:
            self.fe.book.log.later(sid, _relay_frame, self.cluster, _frame_data(sid, etype, seq, ts, raw), None)

    def stored_frame(self, sid: str, etype: str, seq: int, ts: int, raw: str) -> None:
        """``frame`` of an event stored already (the book's effect of a plugin's event): relayed now."""
        if self.cluster is not None:
            self.cluster.relay(NAME, _frame_data(sid, etype, seq, ts, raw))

    def _lost(self, sid: str) -> None:
        """Another node claimed ``sid`` (its epoch moved on): the socket here, if any, is closed, and
        nothing it still sends is taken (the store refused this node's writes for it already)."""
        rec = self.fe.book.records.get(sid)
        if rec is None or rec.source != "plugin":
            return
        rec.lost()  # (its books: the store's again at its next hello here)
        conn = rec.conn
        if conn is None:
            return
        conn.replaced = True  # its frames are dropped from now on (plugin_ws: rec.conn is not it)
        rec.conn = None
        log.info("lvmh: pi session %s was claimed by another node; closing its socket here", sid)
        close_later(self.fe, conn.ws, b"session claimed by another node", errors.CLOSE_REPLACED)
        self.fe.stream.list_changed(sid)

    def is_online(self, rec: "SessionRecord") -> bool:
        """Connected here or to another node (``session_list``'s ``online``)."""
        return rec.conn is not None or rec.id in self.elsewhere

    # --- in ------------------------------------------------------------------------------------------

    def _relayed(self, node: str, data: Any) -> None:
        if not isinstance(data, dict):
            return
        t = data.get("t")
        if t == "f":
            self._frame(data)
        elif t == "on":
            self._on(node, data)
        elif t == "off":
            sid = data.get("s")
            if isinstance(sid, str):
                run = data.get("run")
                if isinstance(run, dict):
                    self.carried[sid] = run
                else:
                    self.carried.pop(sid, None)
            if self.elsewhere.get(sid) == node:  # type: ignore[arg-type]
                del self.elsewhere[sid]  # type: ignore[arg-type]
                self.fe.stream.list_changed(sid)
                waiting = self._handover.get(sid)  # type: ignore[arg-type]
                if waiting is not None:
                    waiting.set()
        elif t == "sync":
            for rec in list(self.fe.book.records.values()):
                if rec.source == "plugin" and rec.conn is not None:
                    self.online(rec)

    def _record(self, sid: Any) -> Optional["SessionRecord"]:
        return self.fe.book.plugin_record(sid) if isinstance(sid, str) else None

    def _on(self, node: str, data: dict) -> None:
        sid = data.get("s")
        rec = self._record(sid)
        if rec is None:
            fe = self.fe
            if not isinstance(sid, str) or fe.book.is_bridge_session(sid) or sid in fe.book.records:
                return
            rec = fe.book.registry.add(sid, "plugin", {}, fe.book.log.committed.get(sid, 0))  # its row not committed yet
        if rec.conn is None:  # (connected here too: a socket here that has not noticed it is gone)
            rec.info = codec.session_info(data.get("i"), rec.id, rec.info)
            cutshort.returned(rec)  # that node answers for its open run now
        else:
            self.fe.book.log.check(rec.id)  # claimed from this node? (the guard closes the socket here)
        self.carried.pop(rec.id, None)  # that node took the run over, if there was one
        self.elsewhere[rec.id] = node
        self.fe.stream.list_changed(rec.id)

    def _frame(self, data: dict) -> None:
        rec = self._record(data.get("s"))
        etype, seq, raw = data.get("e"), data.get("q"), data.get("r")
        if rec is None or rec.conn is not None or not isinstance(seq, int) or not isinstance(raw, str):
            return
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return
        if not isinstance(obj, dict) or not isinstance(etype, str):
            return
        fe = self.fe
        if etype != "message_update":
            ts = data.get("ts")
            if isinstance(ts, int) and (rec.last_event_at is None or ts > rec.last_event_at):
                rec.last_event_at = ts
            if etype == "session_info":
                rec.info = codec.session_info(obj.get("session"), rec.id, rec.info)
                fe.stream.list_changed(rec.id)
        fe.book.inflight.feed(rec.id, etype, seq, obj)
        fe.stream.show(rec.id, seq, raw)  # its holder stored it before it relayed it (durable before shown)

    async def _watch(self) -> None:
        """Sessions held by a node that died (no ``off`` came) are offline once its liveness expired."""
        while True:
            await asyncio.sleep(CHECK_EVERY)
            if not self.elsewhere:
                continue
            try:
                gone = await self.cluster.gone(set(self.elsewhere.values()))
            except Exception:  # the bus away for a moment: the next look tries again
                log.exception("lvmh: looking for dead nodes failed")
                continue
            if gone:
                for sid in [s for s, n in self.elsewhere.items() if n in gone]:
                    del self.elsewhere[sid]
                    waiting = self._handover.get(sid)
                    if waiting is not None:
                        waiting.set()
                    self.fe.stream.list_changed(sid)
