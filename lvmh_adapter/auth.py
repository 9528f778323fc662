"""Who is asking, and what may they do: lvmh credentials, their scopes, and the Origin rule.

Every request to ``/api/*``, the browser ``/ws`` and the plugin ``/agent/ws`` is judged
here (docs/security.md, "Worker containers and spawn"), by the ``guard`` middleware of
``guard.py``; handlers read the result with ``principal_of(request)``.

- The user's ``LVMH_TOKEN`` is a ``Principal(kind="user")``: it may do everything.
- A worker token (``WorkerCredentials.issue``: one per spawned container, 256 bits, only its
  SHA-256 is stored) is a ``Principal(kind="worker", session_id=...)``: it may open
  ``/agent/ws`` and say ``hello`` for that one session, nothing else. Revoked when its
  container is deleted.
- Anything else is no credential: 401.

A request carrying an ``Origin`` header (a browser) must come from the origin it was sent
to (``Origin`` equal to its scheme + ``Host``) or from the lvmh public URL when one is
configured; any other ``Origin`` (``null`` included) is refused with 403 before the
credential is looked at. Requests without ``Origin`` (plugins, curl) are judged by their
credential alone.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import secrets
import time
from typing import Any, Callable, Literal, Optional

import attrs
from aiohttp import web

from bridge_core.kit.security import same_secret

from . import codec
from .request import check_origin, origin_allowed, public_url  # noqa: F401  (the Origin rule: request.py)

log = logging.getLogger("agent_bridge.lvmh.auth")

WORKER_PREFIX = "lvmhw_"  # worker tokens are recognisable in a leak report, never confusable with the user's
AGENT_WS = "/agent/ws"


@attrs.frozen
class Principal:
    kind: Literal["user", "worker"]
    session_id: Optional[str] = None  # a worker's own session

    @property
    def credential(self) -> str:
        """Which credential this is, for "the same plugin reconnecting": every holder of the
        user's token is one credential (local pi plugins); each worker token is its own."""
        return "user" if self.kind == "user" else f"worker:{self.session_id}"

    def may_open(self, path: str) -> bool:
        """The scope rule: the user may reach everything, a worker only ``/agent/ws``."""
        return self.kind == "user" or path == AGENT_WS

    def may_hello(self, session_id: str) -> bool:
        return self.kind == "user" or session_id == self.session_id

    @property
    def max_frame(self) -> int:
        """The largest ``/agent/ws`` frame it may send (a worker's is smaller; aiohttp closes 1009 above)."""
        return codec.MAX_PLUGIN_FRAME if self.kind == "user" else codec.MAX_WORKER_FRAME


USER = Principal("user")
PRINCIPAL_KEY: web.RequestKey[Principal] = web.RequestKey("lvmh.principal", Principal)


def principal_of(request: web.Request) -> Optional[Principal]:
    return request.get(PRINCIPAL_KEY)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


class WorkerCredentials:
    """Worker tokens in the store (table ``lvmh_worker_tokens``: SHA-256 hash -> session).

    The store is the truth (a token issued on one node is known on every node sharing it);
    listeners registered with ``on_revoke`` close what the revoked token still holds open.
    """

    def __init__(self, store: Any):
        self.store = store
        self._listeners: list[Callable[[str], Any]] = []
        self._migrated = False

    def migrated(self) -> None:
        """The lvmh migrations ran already (the front end's prepare)."""
        self._migrated = True

    def _schema(self) -> None:
        if not self._migrated:
            from .persistence import MIGRATIONS

            self.store.migrate("lvmh", MIGRATIONS)
            self._migrated = True

    def on_revoke(self, fn: Callable[[str], Any]) -> None:
        self._listeners.append(fn)

    async def issue(self, session_id: str) -> str:
        """A new token for ``session_id``'s container (committed before it is returned)."""
        self._schema()
        token = WORKER_PREFIX + secrets.token_urlsafe(32)
        digest = token_hash(token)
        now = int(time.time())
        await self.store.write(lambda c: c.execute(
            "INSERT INTO lvmh_worker_tokens(hash, sessionId, createdAt) VALUES(?,?,?)", (digest, session_id, now)))
        return token

    async def revoke(self, session_id: str) -> None:
        """Forget every token of ``session_id`` and tell the listeners (its socket closes)."""
        self._schema()
        await self.store.write(lambda c: c.execute("DELETE FROM lvmh_worker_tokens WHERE sessionId=?", (session_id,)))
        for fn in list(self._listeners):
            try:
                out = fn(session_id)
                if inspect.isawaitable(out):
                    await out
            except Exception:
                log.exception("lvmh: a revocation listener failed")

    def lookup(self, token: str) -> Optional[str]:
        """The session a worker token was issued for, or None."""
        if not token.startswith(WORKER_PREFIX) or len(token) > 200:
            return None
        self._schema()
        row = self.store.query_one("SELECT sessionId FROM lvmh_worker_tokens WHERE hash=?", (token_hash(token),))
        return row[0] if row else None

    def sessions(self) -> list[str]:
        self._schema()
        return [r[0] for r in self.store.query("SELECT DISTINCT sessionId FROM lvmh_worker_tokens")]


class Authenticator:
    """Credential -> Principal, the one place lvmh decides who a request is."""

    def __init__(self, user_token: str, workers: Optional[WorkerCredentials]):
        self._user = user_token or ""
        self.workers = workers

    def resolve(self, presented: Optional[str]) -> Optional[Principal]:
        if not presented:
            return None
        if same_secret(presented, self._user):
            return USER
        if self.workers is not None:
            sid = self.workers.lookup(presented)
            if sid is not None:
                return Principal("worker", sid)
        return None
