"""What a session's entry in the session list says beyond the spec's fields (pure; docs/web-ui.md).

The spec's entry is ``{id, name, cwd, model, provider, agent, repo, startedAt, online,
lastEventAt}``. The web UI also shows, for every session, whether its agent is at work,
what it said last and which decisions wait for an answer (with when they expire), so an
approval waiting in another conversation is visible from anywhere. These fields come
from the core's conversation state; spec clients ignore them:

``status``     ``"idle"`` | ``"running"`` | ``"waiting"`` (a decision waits for an answer)
``preview``    the last message's text, at most ``MAX_PREVIEW`` characters
``waiting``    ``[{kind: "approval"|"clarify", id, text, expiresAt}]``, oldest first; ``text``
               is the command or the question, ``expiresAt`` epoch ms or null (never)
``agentName``  the agent behind it (``demo``, ``hermes``, ``lvmh`` for a pi session)
``agentLabel`` that agent's name for people (``Demo``, ``Hermes``, ``pi (lvmh)``)
"""

from __future__ import annotations

from typing import Any, Optional

MAX_PREVIEW = 160
MAX_TEXT = 200
MAX_WAITING = 20  # decisions listed per session; more never wait at once in practice


def _ms(ts: Optional[float]) -> Optional[int]:
    return int(ts * 1000) if ts is not None else None


def waiting(conv: Any) -> list:
    """The decisions waiting in ``conv`` (a ``bridge_core.model.state.ConversationState``), oldest first."""
    out = [(a.ts, {"kind": "approval", "id": a.approval_id, "text": a.command[:MAX_TEXT],
                   "expiresAt": _ms(a.deadline_ts)}) for a in conv.approvals.values()]
    out += [(c.ts, {"kind": "clarify", "id": c.clarify_id, "text": c.question[:MAX_TEXT],
                    "expiresAt": _ms(getattr(c, "deadline_ts", None))}) for c in conv.clarifications.values()]
    out.sort(key=lambda pair: pair[0])
    return [entry for _, entry in out[:MAX_WAITING]]


def fields(conv: Any, source: Any) -> dict:
    """The extension fields of ``conv``'s entry; ``source`` is its agent source."""
    return {
        "status": conv.status,
        "preview": conv.preview[:MAX_PREVIEW],
        "waiting": waiting(conv),
        "agentName": source.name,
        "agentLabel": source.label,
    }
