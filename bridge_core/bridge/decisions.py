"""The decisions a run waits for (approvals, clarifications): which are pending in which
conversation, which were settled. The first answer wins, once, on every front end and node.

One ``DecisionLedger`` per bridge, and one fold for every way an event reaches this node's
state (``fold``): the bridge's own ``publish``, and another node's event through the bus
(``bridge_core/scale/cluster.py``). A command answering a decision takes it out of the ledger
(``take_approval``, ``take_clarify``): the first answer wins synchronously, before its
``*Resolved`` is published. A decision nobody answered is settled when its run ends or its
agent decides (``settle_approval``, ``settle_clarify``: denied, not accepted, ``decided_by``
saying why). Pending decisions are kept in the store's settings table until resolved
(``record``), so that a restart resolves what a crash left pending (``restore``).
"""

from __future__ import annotations

import collections
import json
import logging
from typing import Any, Mapping, Optional

from ..model import commands as cmd
from ..model import events as ev
from ..model.errors import AlreadyResolved, ApprovalNotFound, BadRequest, ClarifyNotFound
from ..model.state import ConversationState
from .store import SETTING_SQL

log = logging.getLogger("agent_bridge.bridge")

RESOLVED_MEMORY = 4096  # settled decisions remembered (a late answer is told "already resolved")
PENDING_KEY = "pending-decision:"  # settings rows of decisions not yet resolved (for a restart to resolve)
EVENTS = frozenset({ev.ApprovalRequested, ev.ClarifyRequested, ev.ApprovalResolved, ev.ClarifyResolved,
                    ev.RunFinished})  # the events the ledger folds  # fmt: skip

Conversations = Mapping[str, ConversationState]


class DecisionLedger:
    def __init__(self) -> None:
        self.approvals: dict[str, str] = {}  # pending approval_id -> conversation_id
        self.clarifications: dict[str, str] = {}  # pending clarify_id -> conversation_id
        self.resolved: collections.OrderedDict[str, ev.ApprovalResolved] = collections.OrderedDict()
        self.resolved_clarify: collections.OrderedDict[str, ev.ClarifyResolved] = collections.OrderedDict()

    # --- the fold ----------------------------------------------------------------------------------

    def fold(self, event: Any, conv: Optional[ConversationState]) -> None:
        """``event``, folded into ``conv`` (its conversation's state, None when unknown) already."""
        t = type(event)
        if t is ev.ApprovalRequested:
            if conv is not None and event.approval_id in conv.approvals:
                self.approvals[event.approval_id] = conv.conversation_id
        elif t is ev.ClarifyRequested:
            if conv is not None and event.clarify_id in conv.clarifications:
                self.clarifications[event.clarify_id] = conv.conversation_id
        elif t is ev.ApprovalResolved:
            self.approvals.pop(event.approval_id, None)
            _remember(self.resolved, event.approval_id, event)
        elif t is ev.ClarifyResolved:
            self.clarifications.pop(event.clarify_id, None)
            _remember(self.resolved_clarify, event.clarify_id, event)
        elif t is ev.RunFinished:
            # a finished run leaves no decision pending (its state dropped them): forget their ids
            cid = event.conversation_id
            for table, pending in ((self.approvals, conv.approvals if conv else {}),
                                   (self.clarifications, conv.clarifications if conv else {})):  # fmt: skip
                for key in [k for k, c in table.items() if c == cid and k not in pending]:
                    del table[key]

    def pending(self, decision_id: str) -> Optional[str]:
        """The conversation in which ``decision_id`` (an approval's or a clarification's) waits, or None."""
        return self.approvals.get(decision_id) or self.clarifications.get(decision_id)

    # --- answers: the first one wins ---------------------------------------------------------------

    def take_approval(self, c: cmd.ResolveApproval, conversations: Conversations) -> ev.ApprovalRequested:
        """The pending request ``c`` answers, taken out of the ledger; the error a late, unknown or
        wrong answer gets otherwise."""
        if c.choice not in ev.APPROVAL_CHOICES:
            raise BadRequest(f"choice must be one of {', '.join(ev.APPROVAL_CHOICES)}")
        if c.approval_id not in self.approvals and c.approval_id in self.resolved:
            raise AlreadyResolved("Approval already resolved")
        request = self._request(self.approvals, "approvals", c.approval_id, conversations)
        if request is None:
            raise ApprovalNotFound()
        if c.choice not in request.choices:
            raise BadRequest(f"choice must be one of {', '.join(request.choices)}")
        del self.approvals[c.approval_id]  # first answer wins, synchronously
        return request

    def take_clarify(self, c: cmd.AnswerClarify, conversations: Conversations) -> ev.ClarifyRequested:
        if c.clarify_id not in self.clarifications and c.clarify_id in self.resolved_clarify:
            raise AlreadyResolved("Clarification already answered")
        request = self._request(self.clarifications, "clarifications", c.clarify_id, conversations)
        if request is None:
            raise ClarifyNotFound()
        if request.choices is not None and not request.allow_free_text and c.response not in request.choices:
            raise BadRequest("response must be one of the choices")
        del self.clarifications[c.clarify_id]
        return request

    def approval(self, approval_id: str, conversations: Conversations) -> Optional[ev.ApprovalRequested]:
        """The pending approval ``approval_id``, or None (its stale entry dropped)."""
        return self._request(self.approvals, "approvals", approval_id, conversations)

    def _request(self, table: dict, kind: str, did: str, conversations: Conversations) -> Any:
        cid = table.get(did)
        conv = conversations.get(cid) if cid is not None else None
        request = getattr(conv, kind).get(did) if conv is not None else None
        if request is None:
            table.pop(did, None)
        return request

    # --- nobody answered ---------------------------------------------------------------------------

    def settle_approval(self, request: ev.ApprovalRequested, decided_by: str) -> ev.ApprovalResolved:
        """``request`` taken out, denied (the spec's choice set): the event to publish on every front end."""
        self.approvals.pop(request.approval_id, None)
        return ev.ApprovalResolved(
            conversation_id=request.conversation_id, run_id=request.run_id, approval_id=request.approval_id,
            choice="deny", accepted=False, decided_by=decided_by, surface="agent",  # type: ignore[arg-type]
        )  # fmt: skip

    def settle_clarify(self, request: ev.ClarifyRequested, decided_by: str) -> ev.ClarifyResolved:
        self.clarifications.pop(request.clarify_id, None)
        return ev.ClarifyResolved(
            conversation_id=request.conversation_id, run_id=request.run_id, clarify_id=request.clarify_id,
            response="", accepted=False, decided_by=decided_by, surface="agent",  # type: ignore[arg-type]
        )  # fmt: skip

    # --- across a restart ----------------------------------------------------------------------------

    @staticmethod
    def record(store: Any, e: Any) -> None:
        """The store's part of a decision event: a pending one kept until resolved, a resolved one dropped."""
        t = type(e)
        if t is ev.ApprovalRequested or t is ev.ClarifyRequested:
            store.execute_later(*pending_row(e))
        elif t is ev.ApprovalResolved or t is ev.ClarifyResolved:
            store.execute_later(*settled(e))

    def restore(self, store: Any, conversations: Conversations) -> None:
        """At load: the decisions pending when the process died, back into their runs (to be resolved)."""
        for key, value in store.query("SELECT key, value FROM settings WHERE key LIKE ?", (PENDING_KEY + "%",)):
            try:
                if not self._restore(json.loads(value), conversations):
                    store.execute_later("DELETE FROM settings WHERE key=?", (key,))
            except (ValueError, KeyError, TypeError):
                log.warning("dropping an unreadable pending decision %s", key)
                store.execute_later("DELETE FROM settings WHERE key=?", (key,))

    def _restore(self, d: dict, conversations: Conversations) -> bool:
        conv = conversations.get(d["conversation_id"])
        if conv is None or conv.run is None or conv.run.run_id != d["run_id"]:
            return False
        cid = conv.conversation_id
        if d["kind"] == "approval":
            conv.approvals[d["id"]] = ev.ApprovalRequested(
                conversation_id=cid, run_id=d["run_id"], approval_id=d["id"], session_key=d.get("session_key", ""),
                command=d.get("text", ""), description="",
            )  # fmt: skip
            self.approvals[d["id"]] = cid
        else:
            conv.clarifications[d["id"]] = ev.ClarifyRequested(
                conversation_id=cid, run_id=d["run_id"], clarify_id=d["id"], session_key=d.get("session_key", ""),
                question=d.get("text", ""),
            )  # fmt: skip
            self.clarifications[d["id"]] = cid
        return True


def pending_row(e: Any) -> tuple[str, tuple]:
    """The store's write of a pending decision (``e``, an ``ApprovalRequested`` or a ``ClarifyRequested``): its row
    kept until resolved, read back into its run at load (``restore``). Also written by a node's restart for a run
    whose start and pending rows its previous life lost (bridge_core/scale/started.py ``restore_start``)."""
    approval = type(e) is ev.ApprovalRequested
    did = e.approval_id if approval else e.clarify_id
    value = json.dumps({
        "kind": "approval" if approval else "clarify", "id": did, "conversation_id": e.conversation_id,
        "run_id": e.run_id, "session_key": e.session_key, "text": e.command if approval else e.question,
    })  # fmt: skip
    return SETTING_SQL, (PENDING_KEY + did, value)


def settled(e: Any) -> tuple[str, tuple]:
    """The store's write of a resolved decision (``e``, an ``ApprovalResolved`` or a ``ClarifyResolved``): its
    pending row dropped, so that no restart resolves it again (``record``; ``Persister.restore_rows``)."""
    did = e.approval_id if type(e) is ev.ApprovalResolved else e.clarify_id
    return "DELETE FROM settings WHERE key=?", (PENDING_KEY + did,)


def _remember(table: collections.OrderedDict, key: str, value: Any) -> None:
    table[key] = value
    while len(table) > RESOLVED_MEMORY:
        table.popitem(last=False)
