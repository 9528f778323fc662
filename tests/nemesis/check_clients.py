"""The checker's per-client rules (checker.py lists them all): a Loomi phone's stream as the spec's
app processes it, a Pheby client's connections, an lvmh browser's connections. Pure."""

from __future__ import annotations

from typing import Any, Optional

import attrs

from .verdict import INTERRUPTED, WINDOW, Anomaly, Context, compare, draft

# a Loomi event a phone processes once: its type and the field naming it
LOOMI_KEYS = {"run.started": "run_id", "run.completed": "run_id", "run.failed": "run_id",
              "approval.required": "approval_id", "approval.resolved": "approval_id",
              "session.message": "message_id", "task.created": "task_id"}  # fmt: skip


@attrs.define
class RunSeen:
    started: Optional[int] = None  # frame index of run.started
    deltas: list = attrs.field(factory=list)
    completed: list = attrs.field(factory=list)  # frame indices
    conversation: str = ""
    truncated: bool = False  # a truncation came while it ran: events of it may be gone


@attrs.define
class Phone:
    """One phone as the spec's app keeps it: what it processed, in order."""

    client: str
    processed: Optional[int] = None
    seen: dict = attrs.field(factory=dict)  # event key -> frame index
    runs: dict = attrs.field(factory=dict)  # run id -> RunSeen
    required: dict = attrs.field(factory=dict)  # approval id -> frame index
    resolved: set = attrs.field(factory=set)
    paired_at: Optional[float] = None
    truncations: list = attrs.field(factory=list)  # times of hello.ok truncated


def loomi(ctx: Context) -> list[Anomaly]:
    out: list[Anomaly] = []
    for client in ctx.h.clients("loomi"):
        phone = Phone(client)
        frames = ctx.frames_of(client)
        conns: dict = {}
        for i, r in frames:
            conns.setdefault(r.conn, []).append((i, r))
        for conn, rows in conns.items():
            out += _connection(ctx, phone, conn, rows)
        out += _phone_end(ctx, phone)
    return out


def _connection(ctx: Context, phone: Phone, conn: int, rows: list) -> list[Anomaly]:
    out: list[Anomaly] = []
    op = ctx.connect_op(phone.client, conn)
    hello: Optional[int] = None
    live = False
    prev: Optional[int] = None
    replayed = 0
    for i, r in rows:
        f = r.frame
        s = f.get("seq")
        if f.get("type") == "hello.ok":
            hello, prev = i, s
            out += _hello(ctx, phone, op, i, r)
            continue
        if not isinstance(s, int):
            continue
        if phone.processed is not None and s <= phone.processed:
            out.append(Anomaly("seq_not_increasing", phone.client,
                               f"seq {s} after {phone.processed} was processed (conn {conn})", (i,)))
            continue
        if f.get("replayed"):
            replayed += 1
            if live:
                out.append(Anomaly("seq_not_increasing", phone.client, f"replayed seq {s} after live frames", (i,)))
        else:
            if live and prev is not None and s != prev + 1:
                out.append(Anomaly("seq_gap", phone.client,
                                   f"live seq {s} after {prev} on one connection (conn {conn}): "
                                   f"{s - prev - 1} frame(s) numbered and never sent", (i,)))
            live = True
        prev = phone.processed = s
        out += _event(phone, i, r)
    if hello is not None and ctx.h.frames[hello].frame["payload"].get("truncated"):
        out += _truncation(ctx, phone, op, hello, rows, replayed)
    return out


def _hello(ctx: Context, phone: Phone, op: Any, i: int, r: Any) -> list[Anomaly]:
    f = r.frame
    if op is not None and op.f == "pair" and phone.paired_at is None:
        phone.paired_at = r.t
    if f["payload"].get("truncated"):
        phone.truncations.append(r.t)
        for run in phone.runs.values():
            if not run.completed:
                run.truncated = True
    last = op.value.get("last_seq") if op is not None else None
    if last is not None and f.get("seq") != last:
        return [Anomaly("hello_seq", phone.client, f"hello.ok seq {f.get('seq')} for last_seq {last}", (i,))]
    return []


def _truncation(ctx: Context, phone: Phone, op: Any, hello: int, rows: list, replayed: int) -> list[Anomaly]:
    last = op.value.get("last_seq") if op is not None else None
    after = [r.frame["seq"] for i, r in rows if i > hello and isinstance(r.frame.get("seq"), int)]
    skipped = (after[0] - last - 1) if (after and last is not None) else 0
    if replayed + skipped >= WINDOW:
        return []
    return [Anomaly("truncated_under_window", phone.client,
                    f"hello.ok truncated for last_seq {last} with {replayed} frames replayed and {skipped} seqs "
                    f"skipped: under the {WINDOW}-event window", (hello,))]


def _event(phone: Phone, i: int, r: Any) -> list[Anomaly]:
    f = r.frame
    t = f.get("type")
    p = f.get("payload") or {}
    out: list[Anomaly] = []
    field = LOOMI_KEYS.get(t)
    if field is not None:
        key = (t, p.get(field) or f.get(field))
        if key in phone.seen:
            out.append(Anomaly("event_twice", phone.client, f"{t} {key[1]} processed twice (seq {f.get('seq')})",
                               (phone.seen[key], i)))
        phone.seen.setdefault(key, i)
    run_id = p.get("run_id") or f.get("run_id")
    if t == "run.started":
        phone.runs[run_id] = RunSeen(started=i, conversation=f.get("task_id") or "")
    elif t == "run.delta" and p.get("kind", "text") == "text" and run_id in phone.runs:
        phone.runs[run_id].deltas.append(p.get("text", ""))
    elif t == "run.completed":
        phone.runs.setdefault(run_id, RunSeen(conversation=f.get("task_id") or "")).completed.append(i)
    elif t == "approval.required":
        phone.required.setdefault(p["approval_id"], i)
    elif t == "approval.resolved":
        phone.resolved.add(p["approval_id"])
    return out


def _phone_end(ctx: Context, phone: Phone) -> list[Anomaly]:
    out: list[Anomaly] = []
    final = ctx.final_reached(phone.client)
    for run_id, run in phone.runs.items():
        if run.started is None or run.truncated:
            continue
        if not run.completed:
            if final:
                out.append(Anomaly("run_not_closed", phone.client, f"run {run_id} started, never completed",
                                   (run.started,)))
            continue
        done = ctx.h.frames[run.completed[0]].frame["payload"]
        streamed = "".join(run.deltas)
        refs = (run.started, run.completed[0])
        if streamed != done.get("text") and _lost_by_design(ctx, run_id, streamed, done):
            streamed = done.get("text")  # within the stated bound, and no durable record held more at the close
        if streamed != done.get("text"):
            out.append(Anomaly("deltas_incomplete", phone.client,
                               f"run {run_id}: {len(run.deltas)} run.delta make {len(streamed)} chars, run.completed "
                               f"has {len(done.get('text') or '')} ({done.get('status')})", refs))
        want = ctx.final_text(run_id)
        out += compare(ctx, phone.client, done.get("text") or "", want, f"run.completed of {run_id}", refs)
        if streamed != done.get("text"):
            out += compare(ctx, phone.client, streamed, want, f"the run.delta of {run_id}", refs)
    if final:
        out += _unresolved(phone) + _missing(ctx, phone)
    return out


def _lost_by_design(ctx: Context, run_id: str, streamed: str, done: dict) -> bool:
    """A phone's deltas going on past the text a run was closed with as interrupted, the rest sent within
    the loss bound of a kill -9 and held by no durable record at the close (``Context.unrecorded``)."""
    kept = done.get("text") or ""
    return (done.get("status") == "failed" and done.get("error") == INTERRUPTED and streamed.startswith(kept)
            and ctx.unrecorded(run_id, kept))


def _unresolved(phone: Phone) -> list[Anomaly]:
    return [Anomaly("decision_not_once", phone.client, f"approval {aid} required, never resolved", (i,))
            for aid, i in phone.required.items() if aid not in phone.resolved and not phone.truncations]


def _missing(ctx: Context, phone: Phone) -> list[Anomaly]:
    if phone.paired_at is None:
        return []
    out = []
    for run_id, cid, t in ctx.accepted_runs():
        if t <= phone.paired_at or any(x >= t for x in phone.truncations):
            continue
        run = phone.runs.get(run_id)
        if run is None or run.started is None or not run.completed:
            what = "nothing" if run is None else ("no run.started" if run.started is None else "no run.completed")
            out.append(Anomaly("event_missing", phone.client,
                               f"run {run_id} of {cid}, accepted at {t:.2f}s after pairing: {what} reached it"))
    return out


# --- Pheby --------------------------------------------------------------------------------------------


def pheby(ctx: Context) -> list[Anomaly]:
    out: list[Anomaly] = []
    for client in ctx.h.clients("pheby"):
        conns: dict = {}
        for i, r in ctx.frames_of(client):
            conns.setdefault(r.conn, []).append((i, r))
        for rows in conns.values():
            out += _pheby_connection(ctx, client, rows)
    return out


def _pheby_connection(ctx: Context, client: str, rows: list) -> list[Anomaly]:
    out: list[Anomaly] = []
    completed: dict = {}  # message id -> frame index
    finished: dict = {}  # run id -> frame index
    open_of: dict = {}  # run id -> its started message id
    resolved: dict = {}  # approval id -> frame index
    for i, r in rows:
        f = r.frame
        t = f.get("type")
        if t == "message.start" and f.get("run_id"):
            open_of[f["run_id"]] = f["message_id"]
        elif t == "message.delta":
            if f["message_id"] in completed:
                out.append(Anomaly("turn_out_of_order", client, f"delta for {f['message_id']} after its complete",
                                   (i,)))
            out += draft(ctx, client, f["text"], ctx.message_text(f["message_id"]), r.t,
                         f"message.delta of {f['message_id']}", i, f["message_id"])
        elif t == "message.complete" and f.get("kind") != "notice":
            if f["message_id"] in completed:
                out.append(Anomaly("event_twice", client, f"message.complete {f['message_id']} twice",
                                   (completed[f["message_id"]], i)))
            completed.setdefault(f["message_id"], i)
            out += compare(ctx, client, f["text"], ctx.message_text(f["message_id"]),
                           f"message.complete of {f['message_id']}", (i,))
        elif t == "run.finished":
            out += _finished(client, f, i, finished, open_of, completed)
        elif t == "approval.resolved":
            if f["approval_id"] in resolved:
                out.append(Anomaly("decision_not_once", client, f"approval.resolved {f['approval_id']} twice on one "
                                   "connection", (resolved[f["approval_id"]], i)))
            resolved.setdefault(f["approval_id"], i)
        elif t == "conversation.history":
            out += _snapshot(ctx, client, f, r.t, i)
    return out


def _finished(client: str, f: dict, i: int, finished: dict, open_of: dict, completed: dict) -> list[Anomaly]:
    out = []
    run = f["run_id"]
    if run in finished:
        out.append(Anomaly("event_twice", client, f"run.finished {run} twice", (finished[run], i)))
    finished.setdefault(run, i)
    mid = open_of.get(run)
    if mid is not None and mid not in completed:
        out.append(Anomaly("turn_out_of_order", client, f"run.finished {run} before message.complete of {mid}", (i,)))
    return out


def _snapshot(ctx: Context, client: str, f: dict, t: float, i: int) -> list[Anomaly]:
    out = []
    for m in f.get("messages", []):
        out += compare(ctx, client, m["text"], ctx.message_text(m["message_id"]),
                       f"conversation.open message {m['message_id']}", (i,))
    run = f.get("run")
    if run:
        out += draft(ctx, client, run.get("text") or "", ctx.message_text(run["message_id"]), t,
                     f"conversation.open run text of {run['message_id']}", i, run["message_id"])
    return out


# --- lvmh browsers ------------------------------------------------------------------------------------


def lvmh(ctx: Context) -> list[Anomaly]:
    out: list[Anomaly] = []
    for client in ctx.h.clients("lvmh"):
        conns: dict = {}
        for i, r in ctx.frames_of(client):
            if r.frame.get("type") == "events":
                conns.setdefault(r.conn, []).append((i, r))
        for rows in conns.values():
            out += _browser_connection(ctx, client, rows)
        out += _browser_view(ctx, client)
    return out


def _browser_connection(ctx: Context, client: str, rows: list) -> list[Anomaly]:
    out: list[Anomaly] = []
    last: dict = {}  # session -> (seq, frame index)
    open_: dict = {}  # session -> [message id, deltas]
    for i, r in rows:
        sid = r.frame["sessionId"]
        for e in r.frame["events"]:
            s = e["seq"]
            if sid in last and s <= last[sid][0]:
                kind = "event_twice" if s == last[sid][0] else "seq_not_increasing"
                out.append(Anomaly(kind, client, f"session {sid}: seq {s} after {last[sid][0]} on one connection",
                                   (last[sid][1], i)))
                continue
            last[sid] = (s, i)
            out += _browser_event(ctx, client, sid, e, open_, i)
    return out


def _browser_event(ctx: Context, client: str, sid: str, e: dict, open_: dict, i: int) -> list[Anomaly]:
    t = e.get("type")
    msg = e.get("message") if isinstance(e.get("message"), dict) else {}
    if t == "message_start" and msg.get("role") == "assistant":
        open_[sid] = [msg.get("id"), []]
    elif t == "message_update" and sid in open_:
        open_[sid][1].append(e.get("delta") or "")
    elif t == "message_end" and msg.get("role") == "assistant":
        out = compare(ctx, client, msg.get("text") or "", ctx.message_text(msg.get("id", "")),
                      f"lvmh message_end {msg.get('id')}", (i,))
        mid, deltas = open_.pop(sid, [None, []])
        if mid == msg.get("id") and "".join(deltas) != (msg.get("text") or ""):
            out.append(Anomaly("deltas_incomplete", client,
                               f"session {sid}: {len(deltas)} message_update make {len(''.join(deltas))} chars, "
                               f"message_end {mid} has {len(msg.get('text') or '')}", (i,)))
        return out
    return []


def _browser_view(ctx: Context, client: str) -> list[Anomaly]:
    out = []
    for sid, view in ctx.h.final.views.get(client, {}).items():
        for node, per in sorted(ctx.h.final.lvmh.items()):
            stored = per.get(sid)
            if stored is not None and stored != view:
                extra = [e["seq"] for e in view if e not in stored][:5]
                lacking = [e["seq"] for e in stored if e not in view][:5]
                out.append(Anomaly("view_diverged", client,
                                   f"session {sid}: the view holds {len(view)} events, {node} stores {len(stored)} "
                                   f"(only in the view: seqs {extra}; only stored: {lacking})"))
    return out
