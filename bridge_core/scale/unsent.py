"""A close this node made that the store has and the stream may lack (docs/scale-out.md "A close the store has
and the stream lacks"; chaos seed 2024, issue 41).

A node closes the runs nobody runs any more itself: its own after a restart (``Bridge.report_interrupted``) and
a dead node's (``Cluster._take_over``), both through ``Bridge.interrupt``. ``Cluster.publish`` persists each event
of the close (the completion, each decision resolved ``restart``, the ``RunFinished``, the notice), then queues it
for the bus. A kill -9 after the store committed the close and before the bus sent it left the close in the store
only: the next life found the run closed and published nothing, and no other node, no client and no lvmh events
table ever had the run's end or its decisions' resolutions (``decision_not_once``).

So the close's bus forms (what ``Cluster.publish`` sends, ids and ts included) go into a ``settings`` row,
``unsent:<run_id>``, owned by this node, each form appended by a write queued *before* the event's own rows: the
store's writer commits in queue order, so a close the store has comes with its row. The row is dropped once every
form came back from the bus (``back``: this node's delivery of its own event). At join, a row of this node's still
there (its previous life died before its forms came back) is checked against the stream: forms the stream holds
are not sent again (every node has them: the lvmh table numbers its rows by the stream's number, a second entry
would be a second row); the others are published again once the node joined, same ids and ts, and the row is
dropped when they come back. Rows exist only for closes, dropped at once normally: bounded.

A form the stream lacks may still have reached some nodes before the stream lost it (a Redis restart just after
the close went out, before its node read its forms back: chaos seed 2509, ``event_twice``). Such a form was on the
stream: a node that missed it passed over a gap (gone.py: its state read back from the store, its phones told), so
it is not sent again. Every node that delivers a close's form (``note`` marks it, ``CLOSE``: its run) records that
in a ``settings`` row, ``reached:<run_id>:<event>:<ts>`` (``folded``), queued before the form is shown, and
``read`` sends again only the missing forms no node recorded (chaos seed 2918: n2 and n3 restarted between n1's two
sends, their memory of the first gone, showed the close twice). A record not committed yet when the row is read (its
writer held by a store restart) is covered by its node's memory: a form sent again comes under a new stream number,
which no front end knows, so it is marked (``AGAIN``) and a node that delivered it already in this life drops it
(``again``: the idents of the close-kind forms it folded lately). Not covered: a node killed after it showed the
form and before its record committed (one commit of its writer), then restarted before the form is sent again.
The records go with their row (``back``, ``read``), and at a drop and join those older than ``REACHED_KEEP``
whose run has no row (a straggler's, written after the row went).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from typing import Any, Iterator, Optional

from ..bridge.decisions import PENDING_KEY
from ..bridge.drafts import MESSAGE_SQL
from ..bridge.store import SETTING_SQL
from ..model.serialize import from_dict

log = logging.getLogger("agent_bridge.cluster")

KEY = "unsent:"  # + run_id: {"node": its node, "forms": [bus forms, in publish order]}
FLOOR = 40.0  # s of stream read back at the least for a row's forms (as started.py BACK)
SKEW = 5.0  # s between this node's clock (the forms' ts) and Redis's (the entries' ids)
AGAIN = "again"  # a form's field: published again by ``resend`` (receivers that hold it drop it)
KEEP = 4096  # idents of close-kind forms folded lately, kept to know one published again
CLOSE = "close"  # a form's field: the run whose close ``Bridge.interrupt`` published it in (``note``)
REACHED = "reached:"  # + run_id + ":" + event + ":" + ts: a node delivered that form of the close (``folded``)
REACHED_KEEP = 600.0  # s a record whose run has no row is kept (its row may not be committed yet)


def _ident(data: Any) -> Optional[tuple]:
    """What tells one event's bus form from another's (as ``Cluster._own_event`` matches its own)."""
    if type(data) is not dict:
        return None
    return data.get("event"), data.get("ts"), data.get("conversation_id")


def _append(c: Any, key: str, node: str, form: dict) -> None:
    row = c.execute("SELECT value FROM settings WHERE key=?", (key,)).fetchone()
    forms = json.loads(row[0]).get("forms", []) if row is not None else []
    forms.append(form)
    c.execute(SETTING_SQL, (key, json.dumps({"node": node, "forms": forms})))


class Unsent:
    def __init__(self, store: Any, node_id: str):
        self.store = store
        self.node_id = node_id
        self._run: Optional[str] = None  # the run whose close ``Bridge.interrupt`` publishes now (``closing``)
        self._waiting: dict[str, set] = {}  # run_id -> idents of its close's forms not back from the bus yet
        self._resend: list = []  # forms read at join that the stream lacks: published again (``Cluster.joined``)
        self._held: dict = {}  # idents of close-kind forms this node folded or loaded (oldest first, ``KEEP``)

    @contextlib.contextmanager
    def closing(self, run_id: str) -> Iterator[None]:
        """While ``Bridge.interrupt`` publishes the close of ``run_id`` (synchronously: nothing else interleaves)."""
        self._run = run_id
        try:
            yield
        finally:
            self._run = None

    def note(self, data: dict) -> None:
        """A form ``Cluster.publish`` is about to persist and send: one of a close's, its row grows first."""
        run = self._run
        if run is None:
            return
        data[CLOSE] = run  # (every node that delivers it records that: ``folded``)
        self._waiting.setdefault(run, set()).add(_ident(data))
        key, node = KEY + run, self.node_id
        self.store.write_later(lambda c: _append(c, key, node, data))

    def back(self, data: Any) -> None:
        """One of this node's events delivered by the bus: its close's row dropped once every form is back."""
        if not self._waiting:
            return
        ident = _ident(data)
        for run, idents in self._waiting.items():
            if ident in idents:
                idents.discard(ident)
                if not idents:
                    del self._waiting[run]
                    self.store.write_later(lambda c, r=run: _drop(c, r))
                return

    def folded(self, data: Any, node: str) -> None:
        """A form this node delivered (``node``'s): if a close could hold it, its ident kept a while; another node's
        close's, recorded."""
        if _key(data) is None:
            return
        run = data.get(CLOSE)
        if type(run) is str and node != self.node_id:
            row = (_reached(run, data), json.dumps({"at": time.time(), "form": data}))  # (``reached_close``)
            self.store.execute_later(SETTING_SQL, row)
        held = self._held
        held[_ident(data)] = None
        if len(held) > KEEP:
            del held[next(iter(held))]

    def again(self, data: Any) -> bool:
        """Is ``data`` a form another node published again (``resend``) that this node holds already?"""
        return type(data) is dict and data.get(AGAIN) is True and _ident(data) in self._held

    async def read(self, bus: Any) -> int:
        """At join: this node's rows left by its previous life; forms the stream holds dropped, the rest kept
        for ``resend``. A row whose stream could not be read stays (the next start tries). Forms to send."""
        count = 0
        await self.store.write(_prune)
        for key, value in self.store.query("SELECT key, value FROM settings WHERE key LIKE ?", (KEY + "%",)):
            try:
                row = json.loads(value)
            except ValueError:
                row = None
            if not isinstance(row, dict) or row.get("node") != self.node_id:
                continue  # another node's (its own start sees to it)
            run = key[len(KEY):]
            forms = _stored(self.store, run, [f for f in row.get("forms", []) if _key(f) is not None])
            forms = [f for f in forms if self.store.query_one(
                "SELECT 1 FROM settings WHERE key=?", (_reached(run, f),)) is None]  # (on the stream once: gone.py)
            try:
                missing = await _missing(bus, forms)
            except Exception:  # the bus away for a moment: kept for the next start
                log.exception("cluster: reading the close of run %s back from the bus failed", run)
                continue
            if missing:
                log.warning("run %s: %d event(s) of its close the store has and the stream lacks: sent again",
                            run, len(missing))  # fmt: skip
                self._waiting[run] = {_ident(f) for f in missing}
                self._resend += missing
                count += len(missing)
            for form in missing:  # a kill between the close's end and its notice: the notice's row too, as loaded next
                if form["event"] == "Notification":
                    await self.store.write(lambda c, f=form: _notice_row(c, f))
            value = json.dumps({"node": self.node_id, "forms": missing})  # only those (a new close appends to it)
            await self.store.write(lambda c, k=key, v=value, r=run, m=missing: c.execute(SETTING_SQL, (k, v)) if m
                                   else _drop(c, r))  # fmt: skip
        return count

    def resend(self, own: Any, bus: Any) -> None:
        """The forms ``read`` found missing from the stream published again, once, oldest first: noted in ``own``
        (``Cluster._own``: delivered back as this node's own, folded already, the store having them)."""
        forms, self._resend = self._resend, []
        for data in forms:
            own.append((from_dict(data), data["event"], data["ts"]))
            bus.publish({**data, AGAIN: True})


def reached_close(store: Any, run: str) -> list:
    """The forms of a close of ``run`` that other nodes delivered, as their records (``folded``) hold them, in the
    order a restart folds them (``_ORDER``); [] unless its end is among them. A restart's close goes out on the bus
    before its rows commit: a kill -9 while they wait (a PostgreSQL restart), then Redis losing its keys, left it in
    no store and no stream, every other node and their clients having it, and the next life closed the run again
    with its older draft (chaos seed 3409: ``event_twice``, ``nodes_disagree``). The records are that close
    (``Cluster.read_end``)."""
    forms: dict = {}
    for _, value in store.query("SELECT key, value FROM settings WHERE key LIKE ?", (f"{REACHED}{run}:%",)):
        try:
            form = json.loads(value).get("form")
        except (ValueError, AttributeError):
            continue
        if _key(form) is not None and form.get(CLOSE) == run and form.get("conversation_id"):
            forms.setdefault(_ident(form), form)
    if not any(f["event"] == "RunFinished" and f.get("run_id") == run for f in forms.values()):
        return []
    log.warning("run %s: its close read back from the other nodes' records (the store and the stream lack it)", run)
    return sorted(forms.values(), key=lambda f: (_ORDER.get(f["event"], 0), f["ts"]))


# a close's forms in the order a restart folds a close read back from the stream (``Cluster.read_end``): its
# decisions' resolutions, its completion, its end, its notice. Not by ts: the end is made first (its ts the
# oldest) and published after the rest (``Bridge.close_run``); folded first, it closed the run before its
# completion was written, and the store kept the older draft (the test loop, tests/scale/test_close_reached_only.py)
_ORDER = {"MessageCompleted": 1, "RunFinished": 2, "Notification": 3}


def _reached(run: str, form: dict) -> str:
    return f"{REACHED}{run}:{form.get('event')}:{form.get('ts')!r}"


def _drop(c: Any, run: str) -> None:
    """A close's row and its records (and old ones of closes gone: ``_prune``)."""
    c.execute("DELETE FROM settings WHERE key=?", (KEY + run,))
    c.execute("DELETE FROM settings WHERE key LIKE ?", (f"{REACHED}{run}:%",))
    _prune(c)


def _prune(c: Any) -> None:
    """Records older than ``REACHED_KEEP`` whose run has no row (written after it went)."""
    old = time.time() - REACHED_KEEP
    for key, value in c.execute("SELECT key, value FROM settings WHERE key LIKE ?", (REACHED + "%",)).fetchall():
        run = key[len(REACHED):].split(":", 1)[0]
        try:
            at = float(json.loads(value)["at"])
        except (ValueError, KeyError, TypeError):
            at = 0.0
        if at < old and c.execute("SELECT 1 FROM settings WHERE key=?", (KEY + run,)).fetchone() is None:
            c.execute("DELETE FROM settings WHERE key=?", (key,))


def _notice_row(c: Any, form: dict) -> None:
    cid, mid = form.get("conversation_id"), form.get("message_id")
    if c.execute("SELECT 1 FROM messages WHERE conversation_id=? AND message_id=?", (cid, mid)).fetchone() is None:
        c.execute(MESSAGE_SQL, (cid, mid, "assistant", form.get("text", ""), form["ts"]))


def _key(data: Any) -> Optional[tuple]:
    """What a form does, whoever published it: ends a run, completes or adds a message, resolves a decision."""
    if type(data) is not dict or type(data.get("ts")) is not float:
        return None
    field = DOES.get(data.get("event"))  # type: ignore[arg-type]
    return (data["event"], data.get(field)) if field is not None else None


# what a form of a close does, by its event: the field naming what it ends, completes or resolves
DOES = {"RunFinished": "run_id", "MessageCompleted": "message_id", "Notification": "message_id",
        "ApprovalResolved": "approval_id", "ClarifyResolved": "clarify_id"}  # fmt: skip


def _stored(store: Any, run: str, forms: list) -> list:
    """Those of ``forms`` whose events the store has. The writer commits in queue order: the close's own end
    stored (the run's ``finished_at`` its ts), every form before it is. Else the store has the run open (the
    kill came mid-close; this start closes it again, resolving only what the store still has pending) or another
    node's close ended it: of this one only the resolutions whose pending row is gone count."""
    end = next((f for f in forms if f["event"] == "RunFinished"), None)
    row = store.query_one("SELECT finished_at FROM runs WHERE run_id=?", (run,))
    if end is not None and row is not None and row[0] is not None and abs(float(row[0]) - end["ts"]) < 1e-3:
        return forms
    return [f for f in forms if f["event"] in ("ApprovalResolved", "ClarifyResolved") and store.query_one(
        "SELECT 1 FROM settings WHERE key=?", (PENDING_KEY + str(_key(f)[1]),)) is None]  # type: ignore[index]


async def _missing(bus: Any, forms: list) -> list:
    """Those of ``forms`` (one close's, one conversation's) whose deed no event on the stream did (``_key``: a
    resolution of the same decision, an end of the same run, whoever published it): read back from the newest
    entry down to the oldest form's time (and ``FLOOR`` s at the least)."""
    if not forms:
        return []
    want = {_key(f) for f in forms}
    held: set = set()

    def note(d: Any) -> bool:
        key = _key(d)
        if key in want:
            held.add(key)
        return held == want

    back = max(FLOOR, time.time() - min(f["ts"] for f in forms) + SKEW)
    await bus.newest(str(forms[0].get("conversation_id")).encode(), note, back)
    return [f for f in forms if _key(f) not in held]
