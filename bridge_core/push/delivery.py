"""Delivery off the hot path: one bounded, persisted queue per endpoint, drained by its own worker.

An endpoint (a ``Target``) is one Web Push subscription, the ntfy topic or the webhook. A
message queued for it is written to the store (table ``push_queue``) before it is first
sent, and deleted once the endpoint took it, so a restart loses nothing still queued. The
queue holds at most one message per conversation (a newer one replaces the older, as the
Web Push ``Topic`` does at the push service) and at most ``queue_size`` in all (the
oldest is dropped): an endpoint that never answers never grows memory or the store.

The worker (a task in the notifier's ``TaskSet``) retries on 429, 5xx and network errors
with exponential backoff (longer when ``Retry-After`` asks, never sooner than 1 s after the
last try: ``channels.retry_delay``), drops a Web Push subscription that answers 404 or 410,
and drops a message any other refusal says will never go. An endpoint's failures are logged
at most once a minute (``LOG_EVERY``), with how many went unsaid.

Everything a subscription was given goes with it (``remove_subscription``, ``drop_owner_rows``):
its queued messages and the decision tokens issued to it.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import time
from typing import Any, Callable, Optional

import aiohttp
import attrs

from ..kit.config import PUSH_RETRY_FLOOR, PushConfig
from ..model.errors import BadRequest
from ..model.ids import new_id
from ..model.redact import fingerprint
from ..bridge.tasks import TaskSet
from . import channels
from .model import check_endpoint
from .model import topic as topic_of

log = logging.getLogger("agent_bridge.push")

MIGRATIONS = [
    # 1: subscriptions, the delivery queues, decision tokens (portable SQL: TEXT and INTEGER only)
    """
    CREATE TABLE push_subscriptions(
        id TEXT PRIMARY KEY,
        endpoint TEXT NOT NULL,
        p256dh TEXT NOT NULL,
        auth TEXT NOT NULL,
        owner TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE push_queue(
        id TEXT PRIMARY KEY,
        target TEXT NOT NULL,
        topic TEXT NOT NULL,
        body TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX push_queue_target ON push_queue(target);
    CREATE TABLE push_tokens(
        token_hash TEXT PRIMARY KEY,
        decision_id TEXT NOT NULL,
        choice TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        expires_at INTEGER NOT NULL
    );
    """,
    # 2: each decision token belongs to the endpoint it was sent to (target) and that endpoint's owner (a
    # revoke voids what that owner was sent, docs/push.md). Tokens from before were shared by every endpoint,
    # so nobody's could be voided alone: they go (the decision can still be answered in any client)
    """
    ALTER TABLE push_tokens ADD COLUMN owner TEXT NOT NULL DEFAULT '';
    ALTER TABLE push_tokens ADD COLUMN target TEXT NOT NULL DEFAULT '';
    DELETE FROM push_tokens;
    CREATE INDEX push_tokens_owner ON push_tokens(owner);
    CREATE INDEX push_tokens_decision ON push_tokens(decision_id);
    CREATE INDEX push_subscriptions_owner ON push_subscriptions(owner);
    """,
]

SEND_TIMEOUT = 15.0
LOG_EVERY = 60.0  # s: an endpoint's failures are logged at most this often

# what an owner was given, in the store (every node's, whichever node it registered on): what was queued
# for its subscriptions, the subscriptions, the decision tokens sent to them. Statements on a DB-API
# connection, so the running bridge (a store write) and the offline revoke (loomi_adapter) run the same ones
OWNER_ROWS_SQL = (
    "DELETE FROM push_queue WHERE target IN (SELECT 'webpush:' || id FROM push_subscriptions WHERE owner=?)",
    "DELETE FROM push_subscriptions WHERE owner=?",
)
OWNER_TOKENS_SQL = "DELETE FROM push_tokens WHERE owner=?"


def drop_owner_rows(c: Any, owner: str, tokens: bool = True) -> None:
    """Delete everything ``owner`` was given on connection ``c`` (``tokens=False``: a schema from before
    tokens had an owner, whose migration deletes them all)."""
    for sql in OWNER_ROWS_SQL + ((OWNER_TOKENS_SQL,) if tokens else ()):
        c.execute(sql, (owner,))


@attrs.define
class Subscription:
    id: str
    endpoint: str
    p256dh: str
    auth: str
    owner: str  # who registered it: "pheby", "lvmh", or "loomi:<device id>" (dropped with that device)
    created_at: int


@attrs.define(eq=False)
class Item:
    id: str
    topic: str
    msg: dict
    name: str  # the conversation's name (ntfy's body when not full text)
    created_at: float

    def row(self, target: str) -> tuple:
        return (self.id, target, self.topic, json.dumps({"msg": self.msg, "name": self.name}), int(self.created_at))


@attrs.define(eq=False)
class Target:
    key: str  # "webpush:<subscription id>", "ntfy", "webhook"
    kind: str
    sub: Optional[Subscription] = None
    queue: "collections.OrderedDict[str, Item]" = attrs.field(factory=collections.OrderedDict)
    worker: Optional[asyncio.Task] = None
    sending: Optional[Item] = None  # the item on the wire now
    failures: int = 0  # failed attempts in a row: the backoff is the endpoint's, whatever message is at the head
    not_before: float = 0.0  # monotonic: no try before (a queue reloaded at start waits the retry floor)
    logged_at: Optional[float] = None  # monotonic: the last failure logged
    unlogged: int = 0  # failures since, not logged

    @property
    def owner(self) -> str:
        """Who the endpoint is: a subscription's owner, else the configured channel (``ntfy``, ``webhook``)."""
        return self.sub.owner if self.sub is not None else self.key


class Deliveries:
    def __init__(self, store: Any, cfg: PushConfig, vapid: Any, tasks: TaskSet):
        self.store = store
        self.cfg = cfg
        self.vapid = vapid
        self.tasks = tasks
        self.targets: dict[str, Target] = {}
        self.subscriptions: dict[str, Subscription] = {}
        self.http: Optional[aiohttp.ClientSession] = None
        self.stats = collections.Counter()
        self.results: collections.Counter = collections.Counter()  # (channel, result) -> attempts (metrics)
        if cfg.ntfy_url:
            self.targets["ntfy"] = Target(key="ntfy", kind="ntfy")
        if cfg.webhook_url:
            self.targets["webhook"] = Target(key="webhook", kind="webhook")

    # --- lifecycle ------------------------------------------------------------------------------

    def load(self) -> None:
        for row in self.store.query("SELECT id, endpoint, p256dh, auth, owner, created_at FROM push_subscriptions"):
            sub = Subscription(*row)
            self.subscriptions[sub.id] = sub
            try:  # kept under an older rule (a host matched as text) or allow_insecure_endpoints since turned off
                check_endpoint(sub.endpoint, allow_insecure=self.cfg.allow_insecure_endpoints)
            except BadRequest as exc:
                self.remove_subscription(sub.id, f"its endpoint is refused now: {exc.message}")
                continue
            if self.cfg.web_push:
                self.targets[f"webpush:{sub.id}"] = Target(key=f"webpush:{sub.id}", kind="webpush", sub=sub)
        stale = []
        for rid, target, topic, body, created in self.store.query(
            "SELECT id, target, topic, body, created_at FROM push_queue ORDER BY created_at, id"
        ):
            t = self.targets.get(target)
            try:
                data = json.loads(body)
                item = Item(id=rid, topic=topic, msg=data["msg"], name=data.get("name", ""), created_at=float(created))
            except (ValueError, KeyError, TypeError):
                t = None
            if t is None:  # its endpoint is gone (or the channel was switched off)
                stale.append(rid)
                continue
            self._put(t, item, persist=False)
        for rid in stale:
            self.store.execute_later("DELETE FROM push_queue WHERE id=?", (rid,))
        queued = sum(len(t.queue) for t in self.targets.values())
        if queued:
            log.info("push: %d notification(s) still queued from before the restart", queued)

    async def start(self) -> None:
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=SEND_TIMEOUT))
        floor = time.monotonic() + PUSH_RETRY_FLOOR  # what was queued may have just been tried before a restart
        for t in self.targets.values():
            if t.queue:
                t.not_before = floor
                self._kick(t)

    async def close(self) -> None:
        if self.http is not None:
            await self.http.close()
            self.http = None

    # --- subscriptions ------------------------------------------------------------------------

    def add_subscription(self, endpoint: str, p256dh: str, auth: str, owner: str) -> str:
        for sub in self.subscriptions.values():
            if sub.endpoint == endpoint:  # the same endpoint again: its keys (or its owner) may have changed
                if (sub.p256dh, sub.auth, sub.owner) != (p256dh, auth, owner):
                    sub.p256dh, sub.auth, sub.owner = p256dh, auth, owner
                    self.store.execute_later("UPDATE push_subscriptions SET p256dh=?, auth=?, owner=? WHERE id=?",
                                             (p256dh, auth, owner, sub.id))  # fmt: skip
                return sub.id
        sub = Subscription(id=f"ps_{new_id()}", endpoint=endpoint, p256dh=p256dh, auth=auth, owner=owner,
                           created_at=int(time.time()))  # fmt: skip
        self.subscriptions[sub.id] = sub
        self.store.execute_later(
            "INSERT INTO push_subscriptions(id, endpoint, p256dh, auth, owner, created_at) VALUES(?, ?, ?, ?, ?, ?)",
            (sub.id, sub.endpoint, sub.p256dh, sub.auth, sub.owner, sub.created_at),
        )
        if self.cfg.web_push:
            self.targets[f"webpush:{sub.id}"] = Target(key=f"webpush:{sub.id}", kind="webpush", sub=sub)
        log.info("push: subscription %s added by %s (endpoint %s)", sub.id, owner, fingerprint(endpoint))
        return sub.id

    def remove_subscription(self, subscription_id: str, why: str = "unregistered") -> bool:
        sub = self.subscriptions.pop(subscription_id, None)
        if sub is None:
            return False
        key = f"webpush:{subscription_id}"
        t = self.targets.pop(key, None)
        if t is not None:
            t.queue.clear()
            if t.worker is not None and t.worker is not asyncio.current_task():
                t.worker.cancel()
        self.store.execute_later("DELETE FROM push_queue WHERE target=?", (key,))
        self.store.execute_later("DELETE FROM push_tokens WHERE target=?", (key,))  # its notifications' answers
        self.store.execute_later("DELETE FROM push_subscriptions WHERE id=?", (subscription_id,))
        log.info("push: subscription %s removed (%s)", subscription_id, why)
        return True

    # --- queueing -----------------------------------------------------------------------------

    def enqueue(self, msg: dict, conversation_name: str, tailor: Optional[Callable[[Target], dict]] = None) -> int:
        """Queue ``msg`` for every endpoint that takes its kind (``tailor(target)``: that endpoint's own
        copy, an approval's with its own decision tokens); returns how many."""
        n = 0
        for t in list(self.targets.values()):
            topic = topic_of(msg["conversation_id"])
            if msg["kind"] == "withdraw":
                if t.kind == "ntfy":
                    continue  # ntfy cannot take a notification back: a withdraw would only buzz again
                queued = t.queue.get(topic)
                if queued is not None and queued is not t.sending and queued.msg.get("decision_id") == msg.get("decision_id"):
                    self._done(t, queued, None)  # its push never left: nothing to take back
                    continue
            item = Item(id=new_id(), topic=topic, msg=msg if tailor is None else tailor(t), name=conversation_name,
                        created_at=time.time())
            self._put(t, item)
            self._kick(t)
            n += 1
        return n

    def _put(self, t: Target, item: Item, persist: bool = True) -> None:
        old = t.queue.pop(item.topic, None)
        if old is not None:  # one per conversation: the newer replaces it
            self.stats["replaced"] += 1
            if persist:
                self.store.execute_later("DELETE FROM push_queue WHERE id=?", (old.id,))
        while len(t.queue) >= self.cfg.queue_size:
            _, dropped = t.queue.popitem(last=False)
            self.stats["overflow"] += 1
            self.store.execute_later("DELETE FROM push_queue WHERE id=?", (dropped.id,))
        t.queue[item.topic] = item
        if persist:
            self.store.execute_later("INSERT INTO push_queue(id, target, topic, body, created_at) VALUES(?, ?, ?, ?, ?)",
                                     item.row(t.key))  # fmt: skip

    def _kick(self, t: Target) -> None:
        if t.worker is None or t.worker.done():
            t.worker = self.tasks.spawn(self._work(t), name=f"push-{t.key}")

    def queued(self) -> int:
        return sum(len(t.queue) for t in self.targets.values())

    # --- the worker -----------------------------------------------------------------------------

    async def _work(self, t: Target) -> None:
        cfg = self.cfg
        wait = t.not_before - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        while t.queue and self.targets.get(t.key) is t:
            item = next(iter(t.queue.values()))
            if time.time() - item.created_at > cfg.ttl_seconds:
                self._done(t, item, "expired")
                continue
            await self.store.synced()  # on disk before it leaves: a crash mid-send sends it again, never loses it
            t.sending = item
            try:
                result, asked = await self._send(t, item)
            finally:
                t.sending = None
            self.results[(t.kind, result)] += 1
            if result != "retry":
                t.failures = 0
            if result == "ok":
                self.stats["delivered"] += 1
                self._done(t, item, None)
            elif result == "gone":
                if t.kind == "webpush" and t.sub is not None:
                    self.stats["gone"] += 1
                    self.remove_subscription(t.sub.id, "the push service says it is gone")
                    return
                self._done(t, item, "refused (404/410)")
            elif result == "drop":
                self._done(t, item, "refused")
            else:
                t.failures += 1
                self.stats["retries"] += 1
                # a retry waits for its backoff (a newer message for the queue does not hurry it)
                delay = channels.retry_delay(t.failures, asked, cfg.retry_seconds, cfg.retry_max_seconds)
                t.not_before = time.monotonic() + delay
                await asyncio.sleep(delay)

    def _failed(self, t: Target, what: str) -> None:
        """A failure of ``t``: logged at most once per ``LOG_EVERY``, saying how many went unsaid since."""
        now = time.monotonic()
        if t.logged_at is not None and now - t.logged_at < LOG_EVERY:
            t.unlogged += 1
            return
        more = f" ({t.unlogged} more failure(s) since the last report)" if t.unlogged else ""
        log.warning("push: %s: %s%s; next report in %.0f s at the earliest", t.key, what, more, LOG_EVERY)
        t.logged_at, t.unlogged = now, 0

    def _done(self, t: Target, item: Item, why: Optional[str]) -> None:
        if t.queue.get(item.topic) is item:
            del t.queue[item.topic]
        self.store.execute_later("DELETE FROM push_queue WHERE id=?", (item.id,))
        if why is not None:
            self.stats["dropped"] += 1
            self._failed(t, f"a {item.msg.get('kind')} notification was dropped: {why}")

    def _request(self, t: Target, item: Item) -> channels.Request:
        cfg, msg = self.cfg, item.msg
        if t.kind == "webpush":
            sub = t.sub
            assert sub is not None
            urgency = "high" if msg["kind"] in ("approval", "clarify") else "normal"
            return channels.webpush_request(sub.endpoint, sub.p256dh, sub.auth, msg, vapid=self.vapid,
                                            subject=cfg.vapid_subject, topic=item.topic,
                                            ttl=int(cfg.ttl_seconds), urgency=urgency)  # fmt: skip
        if t.kind == "ntfy":
            return channels.ntfy_request(cfg.ntfy_url, msg, item.name, token=cfg.ntfy_token,
                                         full_text=cfg.ntfy_full_text, actions=cfg.ntfy_actions)  # fmt: skip
        return channels.webhook_request(cfg.webhook_url, cfg.webhook_secret, msg, item.id)  # item.id: on every retry

    async def _send(self, t: Target, item: Item) -> tuple[str, Optional[float]]:
        if self.http is None:
            return "retry", None
        try:
            req = self._request(t, item)
        except Exception:
            log.exception("push: cannot build the %s request for %s", item.msg.get("kind"), t.key)
            return "drop", None
        try:
            async with self.http.post(req.url, data=req.body, headers=req.headers, allow_redirects=False) as resp:
                await resp.read()
                result = channels.outcome(resp.status)
                if result == "retry":
                    self._failed(t, f"answered {resp.status}, retrying")
                return result, channels.retry_after(resp.headers.get("Retry-After")) if result == "retry" else None
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            self._failed(t, f"unreachable ({type(exc).__name__}), retrying")
            return "retry", None
