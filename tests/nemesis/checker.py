"""The checker: a whole history in, the anomalies out. Pure: no I/O, no clock, no project import.

It judges what the clients saw against the specs and against each other and the store, after the
fact, as Jepsen's checkers do. The rules (one anomaly kind each; ``KINDS`` lists them):

- Loomi, per phone (the spec's §2 app): ``hello.ok`` carries the ``last_seq`` the app reported
  (``hello_seq``); every frame's seq is above what the app processed (``seq_not_increasing``);
  on one connection, once the replay is over, seqs go up by one (``seq_gap``: a frame numbered
  and never sent); ``truncated`` only when at least the replay window (512) was missed
  (``truncated_under_window``).
- No event twice on a surface (``event_twice``): a run's start or end, a decision's request or
  resolution, a message, for a phone, a Pheby connection or a browser connection.
- Each run's text as a phone reconstructs it from its ``run.delta`` equals its own ``run.completed``
  text (``deltas_incomplete``); a browser's live ``message_update``s equal the ``message_end``.
- Every closing text a client got (Loomi ``run.completed``, Pheby ``message.complete`` and the
  snapshot's messages, lvmh ``message_end``), and a phone's deltas, equal the store's final text
  (``transcript_contradicts_client``); a Pheby draft or snapshot text is a prefix of it
  (``text_diverged`` otherwise), or, where the final text is shorter, the draft came within
  ``LOSS_BOUND`` of a ``kill -9`` (the stated draft-save interval; ``transcript_shorter_than_sent``).
- Every run a phone should have seen (accepted after it paired, no truncation since) reached it
  (``event_missing``); every run it saw start it saw end (``run_not_closed``, also for a node
  still showing a run or a decision active once everything healed).
- Every decision resolved exactly once on every surface, the same way on all, one winner among
  the answers (``decision_not_once``).
- A request refused as "not found" for a conversation another request had created and had
  acknowledged before it was sent (``stale_read``: read-your-writes across nodes).
- Every node shows the same transcript, and the same lvmh events, once healed (``nodes_disagree``);
  a browser's view equals the stored events (``view_diverged``); a Pheby turn follows the spec's
  order (``turn_out_of_order``).
"""

from __future__ import annotations

from . import check_clients
from .history import History
from .verdict import KINDS, LOSS_BOUND, WINDOW, Anomaly, Context, compare  # noqa: F401  (the checker's names)

NOT_FOUND = ("task_not_found", "conversation_not_found", "session_not_found")


def check(h: History) -> list[Anomaly]:
    """Every anomaly of the history, in the order of the checks above."""
    ctx = Context(h)
    out: list[Anomaly] = []
    out += check_clients.loomi(ctx)
    out += check_clients.pheby(ctx)
    out += check_clients.lvmh(ctx)
    out += decisions(ctx)
    out += stale_reads(ctx)
    out += store(ctx)
    return out


# --- decisions: exactly once, the same everywhere, one winner ---------------------------------------


def _resolutions(ctx: Context) -> dict:
    """approval id -> [(surface, client, (choice, accepted), frame index)]. Who decided is not compared:
    each surface names it in its own set (Loomi's spec has no "restart": a restart is "agent" there)."""
    out: dict = {}
    for i, r in enumerate(ctx.h.frames):
        f = r.frame
        t = f.get("type")
        if r.surface == "pheby" and t == "approval.resolved":
            out.setdefault(f["approval_id"], []).append(
                ("pheby", r.client, (f.get("choice"), f.get("accepted")), i))
        elif r.surface == "loomi" and t == "approval.resolved":
            p = f["payload"]
            out.setdefault(p["approval_id"], []).append(
                ("loomi", r.client, (p.get("choice"), p.get("accepted")), i))
        elif r.surface == "lvmh" and t == "events":
            for e in f["events"]:
                if e.get("type") == "approval_resolved":
                    out.setdefault(e["approvalId"], []).append(
                        ("lvmh", r.client, (e.get("choice"), e.get("accepted")), i))
    return out


def decisions(ctx: Context) -> list[Anomaly]:
    out = []
    for aid, seen in _resolutions(ctx).items():
        ways = {way for _, _, way, _ in seen}
        if len(ways) > 1:
            out.append(Anomaly("decision_not_once", "all",
                               f"approval {aid} resolved differently across surfaces: {sorted(map(str, ways))}",
                               tuple(i for *_, i in seen)))
    winners: dict = {}
    for o in ctx.h.ops:
        if o.f == "resolve" and o.outcome == "ok" and o.result.get("accepted"):
            winners.setdefault(o.value.get("approval"), []).append(o.index)
    for aid, ops in winners.items():
        if len(ops) > 1:
            out.append(Anomaly("decision_not_once", "all", f"approval {aid}: {len(ops)} answers each told they won",
                               ops=tuple(ops)))
    for node, sessions in ctx.h.final.lvmh.items():
        for sid, events in sessions.items():
            out += _lvmh_decisions_once(node, sid, events)
    return out


def _lvmh_decisions_once(node: str, sid: str, events: list) -> list[Anomaly]:
    asked = [e["approvalId"] for e in events if e.get("type") == "approval_request"]
    told: dict = {}
    for e in events:
        if e.get("type") == "approval_resolved":
            told[e["approvalId"]] = told.get(e["approvalId"], 0) + 1
    bad = {aid: told.get(aid, 0) for aid in asked if told.get(aid, 0) != 1}
    if not bad:
        return []
    return [Anomaly("decision_not_once", f"store@{node}",
                    f"session {sid}: approvals resolved other than once in the stored events: {bad}")]


# --- read-your-writes ---------------------------------------------------------------------------------


def stale_reads(ctx: Context) -> list[Anomaly]:
    """A conversation acknowledged as created, then refused as unknown to a request sent afterwards."""
    created: dict = {}
    for o in ctx.h.ops:
        cid = o.result.get("created")
        if o.outcome == "ok" and cid and o.complete is not None:
            created.setdefault(cid, o)
    out = []
    for o in ctx.h.ops:
        if o.outcome != "fail" or o.result.get("code") not in NOT_FOUND:
            continue
        maker = created.get(o.value.get("conversation"))
        if maker is not None and maker.complete < o.invoke:
            out.append(Anomaly("stale_read", o.process,
                               f"{o.f} on {o.node} at {o.invoke:.2f}s refused {o.result.get('code')} for "
                               f"conversation {o.value.get('conversation')}, created on {maker.node} and "
                               f"acknowledged at {maker.complete:.2f}s", ops=(maker.index, o.index)))
    return out


# --- the store at the end -----------------------------------------------------------------------------


def store(ctx: Context) -> list[Anomaly]:
    out = []
    fin = ctx.h.final
    for cid, want in ctx.reference.items():
        for node, convs in sorted(fin.transcripts.items()):
            got = convs.get(cid)
            if got is None:
                out.append(Anomaly("nodes_disagree", f"store@{node}", f"conversation {cid} unknown to {node}"))
            elif _msgs(got) != _msgs(want):
                out.append(Anomaly("nodes_disagree", f"store@{node}", f"conversation {cid}: {_diff(got, want)}"))
    for node, convs in sorted(fin.active.items()):
        for cid, state in convs.items():
            if state and (state.get("run") or state.get("approvals") or state.get("clarifications")):
                run = state.get("run") or {}
                out.append(Anomaly("run_not_closed", f"store@{node}",
                                   f"conversation {cid} still shows run {run.get('run_id')} "
                                   f"({len(run.get('text') or '')} chars), {len(state.get('approvals') or [])} "
                                   f"approval(s), {len(state.get('clarifications') or [])} clarification(s) "
                                   "after every fault healed"))
    sessions: dict = {}
    for node, per in sorted(fin.lvmh.items()):
        for sid, events in per.items():
            first = sessions.setdefault(sid, (node, events))
            if events != first[1]:
                out.append(Anomaly("nodes_disagree", f"store@{node}",
                                   f"session {sid}: {len(events)} stored events where {first[0]} has "
                                   f"{len(first[1])}"))
            out += _lvmh_texts(ctx, node, events)
    return out


def _msgs(msgs: list) -> list:
    return [(m["message_id"], m["role"], m["text"]) for m in msgs]


def _diff(got: list, want: list) -> str:
    """Where two transcripts part: the first position that differs, each message as id:role:length."""
    k = next((i for i, (a, b) in enumerate(zip(_msgs(got), _msgs(want))) if a != b), min(len(got), len(want)))

    def brief(msgs: list) -> str:
        return ", ".join(f"{m['message_id'][:14]}:{m['role']}:{len(m['text'])}" for m in msgs[k:k + 4]) or "nothing"

    return (f"{len(got)} messages, from #{k}: {brief(got)}; another node holds {len(want)}, from #{k}: "
            f"{brief(want)}")


def _lvmh_texts(ctx: Context, node: str, events: list) -> list[Anomaly]:
    out = []
    for e in events:
        if e.get("type") == "message_end" and isinstance(e.get("message"), dict):
            m = e["message"]
            want = ctx.message_text(m.get("id", ""))
            if want is not None and m.get("id") in ctx.texts and m.get("text") != want:
                out += compare(ctx, f"store@{node}", m.get("text", ""), want,
                               f"lvmh message_end {m.get('id')} (seq {e.get('seq')})", ())
    return out
