"""The notifier: a hub subscriber that turns shared events into pushes (docs/push.md).

``on_event`` never awaits: it feeds ``NotifierState`` (the pure rules, ``state.py``), arms
or disarms the grace timers, and queues messages on ``Deliveries`` (``delivery.py``), whose
workers send them off the hot path. It answers the push commands (``RegisterPush``,
``UnregisterPush``) through ``Bridge.extensions``, and ``decide(token)``: the one thing a
decision token can do, resolve its approval with its choice through the core's normal
command, with the origin ``push`` so every front end shows who decided.

Decision tokens: 256 random bits (``secrets.token_urlsafe(32)``, as every generated secret), one per
decision, choice and endpoint, only their SHA-256 kept, in table ``push_tokens`` with the endpoint
(``target``) and its owner. The store is their only truth, so every node sees a token used or voided
at once: a use takes the row in one store write (``_take``); used once (every token of the decision
goes), gone when the decision resolves or its deadline passes, when its subscription goes, and when
its owner is revoked (``forget_owner``: a revoked device's notifications answer nothing).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import time
from typing import Any, Callable, Iterable, Optional

from ..model import commands as cmd
from ..model import events as ev
from ..kit.config import PushConfig
from ..model.errors import BridgeError, NotFound, TooLarge, Unavailable
from ..bridge.tasks import TaskSet
from . import channels
from .delivery import MIGRATIONS, Deliveries, Target, drop_owner_rows
from .model import (
    ACTION_CHOICES,
    MAX_SUBSCRIPTIONS,
    Registered,
    RegisterPush,
    UnregisterPush,
    check_subscription,
    conversation_url,
    decide_url,
    message,
    run_title,
)
from .state import Arm, Disarm, NotifierState, PushDecision, PushNotice, PushRun, Withdraw

log = logging.getLogger("agent_bridge.push")

PUSH_ORIGIN = cmd.Origin(surface="push", decided_by="remote")  # what every front end shows as the decider
MAX_TOKEN = 128

_FED = frozenset({ev.ApprovalRequested, ev.ApprovalResolved, ev.ClarifyRequested, ev.ClarifyResolved,
                  ev.RunStarted, ev.RunFinished, ev.Notification, ev.ConversationDeleted})  # fmt: skip


DEVICE_OWNER = "loomi:"  # a Loomi device's subscriptions and tokens are owned by "loomi:<device id>"


def device_owner(device_id: str) -> str:
    return DEVICE_OWNER + device_id


def owner_of(origin: cmd.Origin) -> str:
    """Who a subscription belongs to: a Loomi device (revoked with it), else the front end."""
    if origin.surface == "loomi" and origin.connection:
        return device_owner(origin.connection)
    return origin.surface


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def _take(c: Any, h: str) -> Optional[tuple]:
    """In one store write: the token's (decision_id, choice, expires_at), and every token of its decision
    gone with it (once, across nodes: a second use, here or elsewhere, finds nothing)."""
    # one delete: of two uses racing (on two nodes), one gets the row
    row = c.execute("DELETE FROM push_tokens WHERE token_hash=? RETURNING decision_id, choice, expires_at",
                    (h,)).fetchone()  # fmt: skip
    if row is not None:
        c.execute("DELETE FROM push_tokens WHERE decision_id=?", (row[0],))
    return None if row is None else tuple(row)


class Notifier:
    def __init__(self, bridge: Any, cfg: PushConfig, data_dir: str):
        self.bridge = bridge
        self.cfg = cfg
        self.state = NotifierState(cfg.grace_seconds, cfg.run_seconds)
        self.tasks = TaskSet("push")
        self.vapid, self.vapid_created = channels.load_vapid(data_dir)
        self.public_key = channels.vapid_public_key(self.vapid)
        self.deliveries = Deliveries(bridge.store, cfg, self.vapid, self.tasks)
        # who watches a conversation now (each front end's, wired by the composition root)
        self.watchers: list[Callable[[str], bool]] = []
        # where the web UI is reached (the lvmh front end sets it): message urls and action urls
        self.base_url: Callable[[], Optional[str]] = lambda: None
        self.timers: dict[str, asyncio.TimerHandle] = {}
        self._unsubscribe: Optional[Callable[[], None]] = None
        bridge.extensions[RegisterPush] = self._register
        bridge.extensions[UnregisterPush] = self._unregister
        bridge.push = self

    # --- lifecycle ------------------------------------------------------------------------------

    async def prepare(self) -> None:
        """Once the store is open: the migration, the subscriptions, what was still queued; expired tokens go."""
        await self.bridge.store.amigrate("push", MIGRATIONS)
        self.deliveries.load()
        self.bridge.store.execute_later("DELETE FROM push_tokens WHERE expires_at <= ?", (int(time.time()),))

    async def start(self) -> None:
        self._unsubscribe = self.bridge.hub.subscribe(self.on_event)
        await self.deliveries.start()

    async def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for handle in self.timers.values():
            handle.cancel()
        self.timers.clear()
        await self.tasks.close()
        await self.deliveries.close()

    # --- events -----------------------------------------------------------------------------------

    def watched(self, conversation_id: str) -> bool:
        for w in self.watchers:
            try:
                if w(conversation_id):
                    return True
            except Exception:
                log.exception("push: a watcher failed")
        return False

    def on_event(self, seq: int, e: Any) -> None:
        t = type(e)
        if t not in _FED:
            return
        cluster = self.bridge.cluster
        if cluster is not None and not cluster.delivering_own:
            return  # several nodes: the node that published it (its run's) notifies, once (bridge_core/scale/cluster.py)
        if t is ev.ApprovalResolved or t is ev.ClarifyResolved:
            self._drop_tokens(e.approval_id if t is ev.ApprovalResolved else e.clarify_id)
        cid = getattr(e, "conversation_id", None)
        watched = cid is not None and t in (ev.RunFinished, ev.Notification) and self.watched(cid)
        self._perform(self.state.on_event(e, time.time(), watched))

    def _due(self, decision_id: str) -> None:
        self.timers.pop(decision_id, None)
        self._perform(self.state.due(decision_id, time.time()))

    def _perform(self, actions: list) -> None:
        for a in actions:
            t = type(a)
            if t is Arm:
                loop = asyncio.get_running_loop()
                self.timers[a.decision_id] = loop.call_later(max(0.0, a.at - time.time()), self._due, a.decision_id)
            elif t is Disarm:
                handle = self.timers.pop(a.decision_id, None)
                if handle is not None:
                    handle.cancel()
            elif t is PushDecision:
                self._push_decision(a.decision)
            elif t is Withdraw:
                d = a.decision
                self._send(message("withdraw", d.conversation_id, self._name(d.conversation_id), "",
                                   self._url(d.conversation_id), decision_id=d.decision_id))  # fmt: skip
            elif t is PushRun:
                detail = a.error if a.status == "failed" and a.error else (a.text or self._last_reply(a.conversation_id))
                self._send(message("run_finished", a.conversation_id, self._name(a.conversation_id), detail,
                                   self._url(a.conversation_id), title=run_title(a.status)))  # fmt: skip
            elif t is PushNotice:
                self._send(message("notify", a.conversation_id, self._name(a.conversation_id), a.text,
                                   self._url(a.conversation_id), title=a.title or None))  # fmt: skip

    def _push_decision(self, d: Any) -> None:
        msg = message(d.kind, d.conversation_id, self._name(d.conversation_id), d.text, self._url(d.conversation_id),
                      decision_id=d.decision_id)  # fmt: skip
        base = self.base_url()
        choices = [(c, title) for c, title in ACTION_CHOICES.items() if c in d.choices] if d.kind == "approval" else []
        if not (choices and base):
            self._send(msg)
            return

        def with_actions(target: Target) -> dict:  # each endpoint its own tokens: a revoke voids only its owner's
            if target.kind == "ntfy" and not self.cfg.ntfy_actions:
                return msg  # never sent there: no token for it
            return {**msg, "actions": [{"action": c, "title": title, "url": decide_url(base, self._issue(d, c, target))}
                                       for c, title in choices]}  # fmt: skip

        self._send(msg, with_actions)

    def _send(self, msg: dict, tailor: Optional[Callable[[Target], dict]] = None) -> None:
        n = self.deliveries.enqueue(msg, self._name(msg["conversation_id"]), tailor)
        log.info("push: %s for a conversation queued for %d endpoint(s)", msg["kind"], n)

    def _name(self, conversation_id: str) -> str:
        conv = self.bridge.conversations.get(conversation_id)
        return conv.name if conv is not None else ""

    def _last_reply(self, conversation_id: str) -> str:
        conv = self.bridge.conversations.get(conversation_id)
        for m in reversed(conv.messages if conv is not None else []):
            if m.role == "assistant":
                return m.text
        return ""

    def _url(self, conversation_id: str) -> str:
        return conversation_url(self.base_url(), conversation_id)

    # --- decision tokens ---------------------------------------------------------------------------

    def _issue(self, d: Any, choice: str, target: Target) -> str:
        token = secrets.token_urlsafe(32)
        expires = d.deadline_ts if d.deadline_ts is not None else time.time() + self.cfg.ttl_seconds
        # in the store before the message leaves (the worker waits for it: delivery.py)
        self.bridge.store.execute_later(
            "INSERT INTO push_tokens(token_hash, decision_id, choice, conversation_id, expires_at, owner, target) "
            "VALUES(?, ?, ?, ?, ?, ?, ?)",
            (token_hash(token), d.decision_id, choice, d.conversation_id, int(expires) + 1, target.owner, target.key),
        )
        return token

    def _drop_tokens(self, decision_id: str) -> None:
        self.bridge.store.execute_later("DELETE FROM push_tokens WHERE decision_id=?", (decision_id,))

    async def decide(self, token: str) -> bool:
        """Resolve the token's approval with its choice; False (nothing changed) when the token is
        unknown, used, expired, voided (its subscription or its owner gone), or its decision was
        resolved meanwhile. The store decides, whichever node issued it."""
        if not isinstance(token, str) or not 0 < len(token) <= MAX_TOKEN:
            return False
        h = token_hash(token)
        row = await self.bridge.store.write(lambda c: _take(c, h))
        if row is None:
            return False
        decision_id, choice, expires_at = row
        if expires_at <= time.time():
            return False
        try:
            await self.bridge.execute(
                cmd.ResolveApproval(approval_id=decision_id, choice=choice, reason="answered from a notification"),
                PUSH_ORIGIN,
            )
        except BridgeError as exc:
            log.info("push: a notification's answer did not resolve its approval (%s)", exc.code)
            return False
        return True

    # --- the push commands ------------------------------------------------------------------------

    async def _register(self, c: RegisterPush, origin: cmd.Origin) -> Registered:
        if not self.cfg.web_push:
            raise Unavailable("Web Push is switched off on this bridge ([push] web_push)")
        check_subscription(c.endpoint, c.p256dh, c.auth, allow_insecure=self.cfg.allow_insecure_endpoints)
        subs = self.deliveries.subscriptions
        if len(subs) >= MAX_SUBSCRIPTIONS and all(s.endpoint != c.endpoint for s in subs.values()):
            raise TooLarge(f"At most {MAX_SUBSCRIPTIONS} push subscriptions")
        sid = self.deliveries.add_subscription(c.endpoint, c.p256dh, c.auth, owner_of(origin))
        await self.bridge.store.synced()  # kept before it is confirmed
        return Registered(subscription_id=sid)

    async def _unregister(self, c: UnregisterPush, origin: cmd.Origin) -> Registered:
        if not self.deliveries.remove_subscription(c.subscription_id):
            raise NotFound("Push subscription not found")
        await self.bridge.store.synced()
        return Registered(subscription_id=c.subscription_id)

    # --- owners gone (a revoked Loomi device: ``device_owner(device id)``) ----------------------------

    async def forget_owner(self, owner: str) -> int:
        """Everything ``owner`` was given, in the store (whichever node it registered on) before this
        returns: its subscriptions, what was queued for them, every decision token sent to them (each
        answers 410 from now on, on every node). Returns how many of its subscriptions this node held."""
        n = self.forget_owner_here(owner)
        await self.bridge.store.write(lambda c: drop_owner_rows(c, owner))
        return n

    def forget_owner_here(self, owner: str) -> int:
        """``owner``'s subscriptions out of this node's memory (another node revoked it: the rows are gone)."""
        gone = [s.id for s in self.deliveries.subscriptions.values() if s.owner == owner]
        for sid in gone:
            self.deliveries.remove_subscription(sid, f"{owner} is gone")
        return len(gone)

    async def drop_gone_devices(self, alive: Callable[[], Iterable[str]]) -> int:
        """At start: forget every device owner whose id ``alive()`` no longer has (a device revoked while no
        server ran, or by a version that left its subscriptions behind). ``alive`` is read after the owners,
        so a device paired meanwhile (on another node) is never taken for a gone one."""
        owners = {s.owner for s in self.deliveries.subscriptions.values()}
        owners.update(r[0] for r in self.bridge.store.query("SELECT DISTINCT owner FROM push_tokens"))
        devices = {o for o in owners if o.startswith(DEVICE_OWNER)}
        if not devices:
            return 0
        living = {device_owner(d) for d in alive()}
        gone = sorted(devices - living)
        for owner in gone:
            await self.forget_owner(owner)
        if gone:
            log.info("push: dropped the subscriptions and decision tokens of %d revoked device(s)", len(gone))
        return len(gone)
