"""What a node's renders of a run's end need beyond the events (pure, no I/O; server.py ``on_event``).

- **The run's final text**: ``run.completed`` carries the text of the run's last completed message (its
  ``RunFinished`` may have none).
- **The text the phones were not streamed**: a message's completion whose text goes on past the text
  this node's ``run.delta``s made (a prefix of it) is preceded by one more ``run.delta``, the rest, so a
  phone's deltas add up to the ``run.completed`` that ends them; and so is a delta whose text so far goes
  on past them by more than its own increment (``streamed``: deltas lost mid-run). Several nodes: a delta's event can be
  lost before any node gets it, with no number of the stream missing (its origin, its publish waiting
  for Redis to come back, killed with -9; its next life, or a survivor, closes the run with the draft
  the origin had saved, which held that delta: issue 41, chaos seed 2018 ``deltas_incomplete``), or lost
  for good on the way to this node. lvmh does the same for a browser (lvmh_adapter/book.py ``_fill``).
  The filler is rendered and numbered under the completion's number, stored like every frame (a replay
  serves it too). A node that rendered none of the message's deltas (restarted since, or it missed them; its
  origin killed with -9 holding its last deltas, which its draft kept: issue 41, chaos seed 2022) counts what
  the phones got from the stored frames of the run (``sent``: journal.py ``sent_text``, exact), a query
  made only then, of the rows naming the run only (a store failing then: no filler, logged): the run's
  deltas from its start, or past a *mark* (``marks``: where a source's frames of a
  streaming message stood, stored at each prune of its rows, so a run longer than the rows keep is counted
  too). Where they do not show it exactly, no filler.
"""

from __future__ import annotations

import collections
import math
from typing import Any, Callable, Optional

from bridge_core.model import events as ev

from . import codec

KEEP = 1024  # runs (and streaming messages) remembered at once; the oldest go first


class RunTexts:
    def __init__(self, keep: int = KEEP, sent: Optional[Callable[[ev.MessageCompleted], Optional[str]]] = None):
        self.keep = keep
        # a completion -> the text its run's deltas made as the stored frames show it went out (I/O: the rare
        # path only)
        self.sent = sent
        self._marked: dict[str, Any] = {}  # message id -> the delta its last mark was of
        self._final: collections.OrderedDict[str, str] = collections.OrderedDict()  # run id -> text
        self._streamed: dict[str, Any] = {}  # message id -> the last text TextDelta rendered here

    def streamed(self, e: ev.TextDelta) -> Optional[bytes]:
        """A text delta this node renders (the hot path: a dict write and a length compare); the filler
        ``run.delta`` it needs first, when its text so far goes on past what the deltas rendered here made by
        more than its own increment (deltas lost on the way here mid-run: a Redis loss whose gap was judged a
        jump, their writer not answering; chaos seed 2000 at 2561942, 300 deltas)."""
        if e.kind != "text":
            return None
        streamed = self._streamed
        last = streamed.get(e.message_id)
        streamed[e.message_id] = e
        if last is None:
            if len(streamed) > self.keep:
                del streamed[next(iter(streamed))]
            return None
        said, upto = last.draft[1], e.draft[1] - len(e.delta)
        if upto <= said:  # the usual case (upto == said), or an edit of the text (not an append)
            return None
        text, before = e.text, last.text
        if not text.startswith(before):
            return None
        payload = {"run_id": e.run_id, "text": text[said:upto], "kind": "text", "iteration": e.iteration}
        return codec.body("run.delta", payload, task_id=e.conversation_id, run_id=e.run_id, ts=e.ts)

    def completed(self, e: ev.MessageCompleted) -> list[bytes]:
        """A run's message completed: its text kept for the run's end; the filler ``run.delta`` it needs."""
        last = self._streamed.pop(e.message_id, None)
        if e.run_id is None:
            return []
        self._final[e.run_id] = e.text
        while len(self._final) > self.keep:
            self._final.popitem(last=False)
        if e.kind != "normal" or not e.text:
            return []
        if last is not None:
            said, iteration = last.text, last.iteration
        else:  # none of its deltas rendered here: what the stored frames show went out (the rare path)
            said, iteration = (self.sent(e) if self.sent is not None else None), 0
            if said is None:
                return []
        if len(said) >= len(e.text) or not e.text.startswith(said):
            return []
        payload = {"run_id": e.run_id, "text": e.text[len(said):], "kind": "text", "iteration": iteration}
        return [codec.body("run.delta", payload, task_id=e.conversation_id, run_id=e.run_id, ts=e.ts)]

    def marks(self, due: float = math.inf) -> list[tuple[str, str, int, float]]:
        """Where the deltas rendered here of each message streaming stand (at a prune of this node's rows, with
        them: cluster.py): (message id, run id, the length of the text its deltas up to the last one made, that
        delta's time), for those that moved since their mark was given and whose mark given is older than
        ``due`` (the time of the oldest frame the next prune keeps: that prune deletes it), or that have none.
        A mark is good while the rows hold its delta; one given at every prune for every message was ~100
        statements 78 times a second under the scale bench's load (docs/performance.md)."""
        out, marked, was = [], {}, self._marked
        for message_id, e in self._streamed.items():
            old = was.get(message_id)
            if old is not None and (old is e or old.ts >= due):
                marked[message_id] = old
                continue
            marked[message_id] = e
            out.append((message_id, e.run_id, e.draft[1], e.ts))
        self._marked = marked
        return out

    def final(self, run_id: str) -> Optional[str]:
        """The text of the run's last completed message (taken: a run ends once)."""
        return self._final.pop(run_id, None)
