"""What a push says, pure: the message, its Topic, the push commands and the subscription checks.

The message is the one JSON object every channel carries (the Web Push plaintext, the
webhook body; ntfy takes its title, body, url and actions as headers): docs/push.md,
"The message". Nothing here does I/O.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
from typing import Any, Literal, Optional
from urllib.parse import quote

import attrs
from yarl import URL

from ..model.errors import BadRequest

Kind = Literal["approval", "clarify", "run_finished", "notify", "withdraw"]
KINDS = ("approval", "clarify", "run_finished", "notify", "withdraw")
ACTION_CHOICES = {"once": "Approve once", "deny": "Deny"}  # what a notification can answer
TITLES = {
    "approval": "Approval needed",
    "clarify": "The agent asks",
    "notify": "Notification",
    "withdraw": "Answered",
}
MAX_BODY = 500  # characters of agent text in a message (a Web Push payload is at most 4 KiB, even in UTF-8)
MAX_ENDPOINT = 2048
MAX_SUBSCRIPTIONS = 200


def _frozen(cls):
    return attrs.frozen(kw_only=True)(cls)


# --- the push commands (decoded by each front end's codec, answered by the notifier) ---------------


@_frozen
class RegisterPush:
    """A Web Push subscription (a browser's, or a UnifiedPush distributor's endpoint)."""

    endpoint: str
    p256dh: str
    auth: str
    request_id: Optional[str] = None


@_frozen
class UnregisterPush:
    subscription_id: str
    request_id: Optional[str] = None


@_frozen
class Registered:
    subscription_id: str


# --- subscriptions --------------------------------------------------------------------------------


def b64url_decode(value: str) -> bytes:
    value = value.strip()
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def check_subscription(endpoint: str, p256dh: str, auth: str, *, allow_insecure: bool = False) -> tuple[bytes, bytes]:
    """The subscription's keys as bytes; BadRequest saying what is wrong.

    ``p256dh`` is an uncompressed P-256 point, ``auth`` 16 bytes, both base64url; the endpoint
    as ``check_endpoint`` says.
    """
    check_endpoint(endpoint, allow_insecure=allow_insecure)
    try:
        key = b64url_decode(p256dh)
        secret = b64url_decode(auth)
    except (ValueError, TypeError):
        raise BadRequest("keys.p256dh and keys.auth must be base64url")
    if len(key) != 65 or key[0] != 4:
        raise BadRequest("keys.p256dh must be an uncompressed P-256 public key (65 bytes)")
    if len(secret) != 16:
        raise BadRequest("keys.auth must be 16 bytes")
    return key, secret


def check_endpoint(endpoint: str, *, allow_insecure: bool = False) -> None:
    """A Web Push endpoint is an ``https://`` URL; plain ``http://`` only with ``allow_insecure``
    (``[push] allow_insecure_endpoints``, for tests) and only to a loopback *address*: the host is
    parsed as the HTTP client will parse it (yarl, aiohttp's) and read as an IP address, never
    matched as text (``127.attacker.example`` is a name, not a loopback address). BadRequest otherwise."""
    if not isinstance(endpoint, str) or len(endpoint) > MAX_ENDPOINT:
        raise BadRequest(f"endpoint must be a URL of at most {MAX_ENDPOINT} characters")
    try:
        url = URL(endpoint)
        host = url.raw_host or ""
    except (ValueError, TypeError):
        raise BadRequest("endpoint is not a URL")
    if not url.is_absolute() or not host:
        raise BadRequest("endpoint must be an https:// URL")
    if url.scheme == "https":
        return
    if url.scheme == "http" and allow_insecure and loopback_address(host):
        return
    raise BadRequest("endpoint must be an https:// URL (http:// only to a loopback address, with "
                     "[push] allow_insecure_endpoints)")


def loopback_address(host: str) -> bool:
    """``host`` is a loopback IP address (127.0.0.0/8, ``::1``): parsed, so no name ever is."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# --- the message ------------------------------------------------------------------------------------


def topic(conversation_id: str) -> str:
    """The Web Push ``Topic`` of a conversation: a newer message replaces an undelivered older one
    (32 base64url characters at most, so a hash, which also keeps the id from the push service)."""
    return b64url(hashlib.sha256(conversation_id.encode("utf-8")).digest())[:32]


def conversation_url(base: Optional[str], conversation_id: str) -> str:
    """Where the web UI opens ``conversation_id`` (``base``: the lvmh public URL, or its bound address)."""
    if not base:
        return ""
    return f"{base.rstrip('/')}/#/s/{quote(conversation_id, safe='')}"


def decide_url(base: Optional[str], token: str) -> str:
    return f"{base.rstrip('/')}/api/push/decide/{token}" if base else ""


def clip(text: str, limit: int = MAX_BODY) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def message(
    kind: Kind,
    conversation_id: str,
    conversation_name: str,
    detail: str,
    url: str,
    *,
    title: Optional[str] = None,
    decision_id: Optional[str] = None,
    actions: Optional[list[dict]] = None,
) -> dict:
    """``{v, kind, conversation_id, title, body, url, decision_id?, actions?}``.

    ``title`` says what happened (never agent text, except a notification's own title);
    ``body`` is the conversation's name, then what waits or what was said.
    """
    name = clip(conversation_name, 120) or "Conversation"
    body = f"{name}: {clip(detail)}" if detail else name
    msg: dict[str, Any] = {
        "v": 1,
        "kind": kind,
        "conversation_id": conversation_id,
        "title": clip(title, 120) if title else TITLES.get(kind, "agent-bridge"),
        "body": body,
        "url": url,
    }
    if decision_id is not None:
        msg["decision_id"] = decision_id
    if actions:
        msg["actions"] = actions
    return msg


def run_title(status: str) -> str:
    return {"completed": "Run finished", "failed": "Run failed", "cancelled": "Run cancelled"}.get(status, "Run finished")
