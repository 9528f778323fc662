"""What the checker's rules share (checker.py lists the rules): the anomaly, the facts every rule
derives from a history once (Context), and the two text comparisons. Pure."""

from __future__ import annotations

from typing import Any, Optional

import attrs

from .history import History

WINDOW = 512  # Loomi §2: the server keeps the last 512 events sent
LOSS_BOUND = 2.0  # s: a streaming draft is saved every second (DRAFT_SAVE_INTERVAL), plus its write under load
TEXT_BACK = 16.0  # s of stream a node closing its runs reads back for their last delta (scale/cluster.py TEXT_BACK)
INTERRUPTED = "interrupted by a restart"  # a run a restart or a survivor closed (the core's RUN_INTERRUPTED)

KINDS = ("hello_seq", "seq_not_increasing", "seq_gap", "truncated_under_window", "event_twice",
         "deltas_incomplete", "transcript_contradicts_client", "text_diverged", "transcript_shorter_than_sent",
         "event_missing", "run_not_closed", "decision_not_once", "stale_read", "nodes_disagree",
         "view_diverged", "turn_out_of_order")  # fmt: skip


@attrs.frozen
class Anomaly:
    kind: str
    client: str  # who saw it ("store" for the final reads)
    detail: str
    frames: tuple = ()  # indices into History.frames
    ops: tuple = ()  # indices into History.ops


class Context:
    """What every check derives from the history once: the final texts, runs, faults."""

    def __init__(self, h: History):
        self.h = h
        self.reference = self._reference_transcripts()
        self.texts = {m["message_id"]: m["text"] for msgs in self.reference.values() for m in msgs}
        self.message_of: dict[str, str] = {}  # run -> its message id (Pheby's message.start says it)
        self.conversation_of: dict[str, str] = {}  # run -> its conversation (a frame naming both says it)
        for r in h.frames:
            f = r.frame
            if r.surface == "pheby" and f.get("type") == "message.start" and f.get("run_id"):
                self.message_of[f["run_id"]] = f["message_id"]
            if f.get("run_id") and (f.get("task_id") or f.get("conversation_id")):
                self.conversation_of.setdefault(f["run_id"], f.get("task_id") or f.get("conversation_id"))
        self.kills = sorted(f.start for f in h.faults if f.kind == "kill9")
        self.pauses = [(f.start, f.end if f.end is not None else f.start) for f in h.faults if f.kind == "pause"]
        self._shown: dict = {}  # message id -> its showings (first_shown)

    def _reference_transcripts(self) -> dict:
        """Per conversation, the transcript of the first node (by name) that read it at the end."""
        out: dict = {}
        for node in sorted(self.h.final.transcripts):
            for cid, msgs in self.h.final.transcripts[node].items():
                out.setdefault(cid, msgs)
        return out

    def final_text(self, run_id: str) -> Optional[str]:
        """The store's final text of the run's message ("" when it kept none); None: no final read (of its
        conversation: one made by a send whose answer was lost is read only once learned, chaos seed 2003)."""
        if not self.reference:
            return None
        cid = self.conversation_of.get(run_id)
        if cid is not None and cid not in self.reference:
            return None
        return self.texts.get(self.message_of.get(run_id, f"draft-{run_id}"), "")

    def message_text(self, message_id: str) -> Optional[str]:
        return self.texts.get(message_id) if self.reference else None

    def loss_allowed(self, t: float) -> bool:
        """Text shown at ``t`` may be missing from the store: a kill -9 within the bound of it, after
        it (the time nodes spent paused in between does not count: nothing was saved then either) or
        before it (text in flight when its node died reaches clients just after)."""
        for k in self.kills:
            paused = sum(max(0.0, min(e, k) - max(s, t)) for s, e in self.pauses)
            if -LOSS_BOUND <= k - t <= LOSS_BOUND + paused:
                return True
        return False

    def first_shown(self, message_id: str, length: int) -> Optional[float]:
        """When any client was first shown more than ``length`` characters of ``message_id``'s text (a Pheby
        draft or snapshot, a phone's deltas so far on one connection): when the text past ``length`` was
        sent. None: never."""
        shown = self._shown.get(message_id)
        if shown is None:
            shown = self._shown[message_id] = self._shown_of(message_id)
        return next((t for t, n in shown if n > length), None)

    def _shown_of(self, message_id: str) -> list[tuple[float, int]]:
        """(time, characters) of every showing of ``message_id``'s text, in time order."""
        runs = {m: r for r, m in self.message_of.items()}
        run = runs.get(message_id, message_id[6:] if message_id.startswith("draft-") else None)
        so_far: dict = {}  # (client, connection) -> characters of the run's deltas it got
        out = []
        for r in self.h.frames:
            f = r.frame
            kind = f.get("type")
            if kind == "message.delta" and f.get("message_id") == message_id:
                out.append((r.t, len(f.get("text") or "")))
            elif kind == "conversation.history" and (f.get("run") or {}).get("message_id") == message_id:
                out.append((r.t, len(f["run"].get("text") or "")))
            elif kind == "run.delta" and run is not None and f.get("run_id") == run:
                payload = f.get("payload") or {}
                if payload.get("kind", "text") == "text":
                    key = (r.client, r.conn)
                    so_far[key] = so_far.get(key, 0) + len(payload.get("text") or "")
                    out.append((r.t, so_far[key]))
        out.sort()
        return out

    def unrecorded(self, run_id: str, kept: str) -> bool:
        """Could no durable record hold the text of ``run_id`` past ``kept`` when the run was closed
        (docs/scale-out.md, "What a kill -9 can lose")? It was first sent within the loss bound of a kill -9
        (the draft lags that much), on several nodes (on one, Loomi's journal holds every delta a phone got),
        and the stream no longer held it: Redis lost its keys between its sending and the close, or the close
        came more than ``TEXT_BACK`` after it. (The Loomi frames' window is not in the history: a close the
        stream could not help is taken as one they could not either.)"""
        if self.h.topology == "embedded":
            return False
        sent = self.first_shown(self.message_of.get(run_id, f"draft-{run_id}"), len(kept))
        closed = self.closed_at(run_id)
        if sent is None or closed is None or not self.loss_allowed(sent):
            return False
        lost = any(f.kind in ("redis_restart", "redis_flush") and sent <= f.start <= closed for f in self.h.faults)
        return lost or closed - sent > TEXT_BACK

    def closed_at(self, run_id: str) -> Optional[float]:
        """When any client first got ``run_id``'s end (a phone's ``run.completed``, a Pheby ``run.finished``)."""
        return min((r.t for r in self.h.frames if r.frame.get("run_id") == run_id
                    and r.frame.get("type") in ("run.completed", "run.finished")), default=None)

    def final_reached(self, client: str) -> bool:
        """The client's last step (its final reconnect and barrier) succeeded: closure can be judged."""
        return any(o.process == client and o.f == "final" and o.outcome == "ok" for o in self.h.ops)

    def connect_op(self, client: str, conn: int) -> Any:
        for o in self.h.ops:
            if o.process == client and o.value.get("conn") == conn and o.f in ("pair", "connect", "final-connect"):
                return o
        return None

    def accepted_runs(self) -> list[tuple[str, str, float]]:
        """(run, conversation, time accepted) of every run a request started: its acknowledgment, or the
        first frame of it any client got if that came first (a slow answer: seed 4201, a phone told
        ``truncated`` between the run's start and the sender's acknowledgment)."""
        first: dict = {}
        for r in self.h.frames:
            run = r.frame.get("run_id")
            if run is not None and run not in first:
                first[run] = r.t
        out = []
        for o in self.h.ops:
            run = o.result.get("run")
            if o.outcome == "ok" and run and o.complete is not None:
                out.append((run, o.result.get("conversation", ""), min(o.complete, first.get(run, o.complete))))
        return out

    def frames_of(self, client: str) -> list[tuple[int, Any]]:
        return [(i, r) for i, r in enumerate(self.h.frames) if r.client == client]


def compare(ctx: Context, client: str, got: str, want: Optional[str], what: str, refs: tuple) -> list[Anomaly]:
    """A closing text (or a phone's deltas) against the store's final text."""
    if want is None or got == want:
        return []
    return [Anomaly("transcript_contradicts_client", client,
                    f"{what}: {_clip(got)} where the store holds {_clip(want)}", refs)]


def draft(ctx: Context, client: str, text: str, want: Optional[str], t: float, what: str, ref: int,
          message_id: Optional[str] = None) -> list[Anomaly]:
    """A text shown while streaming (a Pheby draft, a snapshot's run text) against the final text. Where
    the store kept less, the bound is judged from when the text past it was first sent (``first_shown``):
    a snapshot, or a node behind in the stream, shows again what was sent earlier (chaos seed 2003)."""
    if want is None or want.startswith(text):
        return []
    if text.startswith(want):
        sent = ctx.first_shown(message_id, len(want)) if message_id is not None else None
        sent = t if sent is None else min(sent, t)
        if ctx.loss_allowed(sent):
            return []
        return [Anomaly("transcript_shorter_than_sent", client,
                        f"{what} showed {_clip(text)} at {t:.2f}s (first sent past the store's at {sent:.2f}s); "
                        f"the store kept {_clip(want)} and no kill -9 followed within {LOSS_BOUND:g}s", (ref,))]
    return [Anomaly("text_diverged", client, f"{what} showed {_clip(text)}; the store holds {_clip(want)}", (ref,))]


def _clip(text: str, n: int = 60) -> str:
    if len(text) <= n:
        return repr(text)
    return f"{text[:24]!r}...{text[-24:]!r} ({len(text)} chars)"
