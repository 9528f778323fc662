"""The three channels as HTTP requests, built without I/O (the worker in ``delivery.py`` sends them).

- Web Push (RFC 8030 delivery, RFC 8291 ``aes128gcm`` message encryption with ``http_ece``,
  RFC 8292 VAPID with ``py_vapid``): the message JSON, encrypted to the subscription's keys,
  with ``TTL``, ``Urgency`` and the conversation's ``Topic``.
- ntfy: ``POST ntfy_url`` with ``Title``, ``Click``, ``Actions`` and the optional bearer;
  the body is the conversation's name only, unless ``ntfy_full_text``.
- A webhook: the message JSON (plus its ``delivery_id``) with ``X-Agent-Bridge-Timestamp`` and
  ``X-Agent-Bridge-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">``.

The VAPID key pair lives in ``<data-dir>/secrets/vapid_private.pem`` (0600), made on first start.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from typing import Optional
from urllib.parse import urlsplit

import attrs
import http_ece
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from py_vapid import Vapid02

from ..kit.config import PUSH_RETRY_FLOOR
from .model import b64url, b64url_decode

VAPID_FILE = "vapid_private.pem"
VAPID_LIFETIME = 12 * 3600  # a VAPID JWT's exp (RFC 8292 allows at most 24 h)


@attrs.frozen
class Request:
    url: str
    headers: dict
    body: bytes


# --- VAPID -------------------------------------------------------------------------------------------


def load_vapid(data_dir: str) -> tuple[Vapid02, Optional[str]]:
    """The bridge's VAPID key pair, generated on first start; returns it and the path it was made at
    (None when it already existed)."""
    sdir = os.path.join(data_dir, "secrets")
    os.makedirs(sdir, mode=0o700, exist_ok=True)
    path = os.path.join(sdir, VAPID_FILE)
    try:
        with open(path, "rb") as f:
            return Vapid02.from_pem(f.read()), None
    except FileNotFoundError:
        pass
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())  # fmt: skip
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    os.replace(tmp, path)
    return Vapid02.from_pem(pem), path


def vapid_public_key(vapid: Vapid02) -> str:
    """The application server key a browser subscribes with: the base64url uncompressed P-256 point."""
    raw = vapid.public_key.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    return b64url(raw)


def vapid_header(vapid: Vapid02, endpoint: str, subject: str, now: float) -> str:
    parts = urlsplit(endpoint)
    claims = {"aud": f"{parts.scheme}://{parts.netloc}", "exp": int(now) + VAPID_LIFETIME, "sub": subject}
    return vapid.sign(claims)["Authorization"]


# --- the requests -------------------------------------------------------------------------------------


def webpush_request(endpoint: str, p256dh: str, auth: str, msg: dict, *, vapid: Vapid02, subject: str,
                    topic: str, ttl: int, urgency: str, now: Optional[float] = None) -> Request:
    plaintext = json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    body = http_ece.encrypt(
        plaintext,
        salt=os.urandom(16),
        private_key=ec.generate_private_key(ec.SECP256R1()),  # a new sender key per message (RFC 8291)
        dh=b64url_decode(p256dh),
        auth_secret=b64url_decode(auth),
        version="aes128gcm",
    )
    headers = {
        "Content-Type": "application/octet-stream",
        "Content-Encoding": "aes128gcm",
        "TTL": str(max(0, int(ttl))),
        "Urgency": urgency,
        "Topic": topic,
        "Authorization": vapid_header(vapid, endpoint, subject, time.time() if now is None else now),
    }
    return Request(url=endpoint, headers=headers, body=body)


def header_text(value: str) -> str:
    """A header value: ASCII as is, anything else RFC 2047 encoded (ntfy decodes it)."""
    value = " ".join(str(value).split())
    try:
        value.encode("ascii")
        return value
    except UnicodeEncodeError:
        return "=?UTF-8?B?" + base64.b64encode(value.encode("utf-8")).decode("ascii") + "?="


def ntfy_request(url: str, msg: dict, conversation_name: str, *, token: str = "", full_text: bool = False,
                 actions: bool = True) -> Request:
    headers = {"Title": header_text(msg["title"])}
    if msg.get("url"):
        headers["Click"] = msg["url"]
    if actions and msg.get("actions"):
        headers["Actions"] = "; ".join(
            f"http, {header_text(a['title'])}, {a['url']}, method=POST, clear=true" for a in msg["actions"]
        )
    if token:
        headers["Authorization"] = f"Bearer {token}"
    body = msg["body"] if full_text else (conversation_name or "agent-bridge")
    return Request(url=url, headers=headers, body=body.encode("utf-8"))


def webhook_signature(secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode("utf-8"), timestamp.encode("ascii") + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def webhook_request(url: str, secret: str, msg: dict, delivery_id: str, now: Optional[float] = None) -> Request:
    """The message with its ``delivery_id`` (the same on every retry of one delivery: a receiver drops a
    replay by it), signed over the exact body."""
    body = json.dumps({**msg, "delivery_id": delivery_id}, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    ts = str(int(time.time() if now is None else now))
    return Request(url=url, headers={
        "Content-Type": "application/json",
        "X-Agent-Bridge-Timestamp": ts,
        "X-Agent-Bridge-Signature": webhook_signature(secret, ts, body),
    }, body=body)  # fmt: skip


def outcome(status: int) -> str:
    """What a push service's answer means: ``ok``, ``retry`` (429, 5xx), ``gone`` (404/410: the
    subscription is dead) or ``drop`` (any other refusal: this message will never go)."""
    if 200 <= status < 300:
        return "ok"
    if status in (404, 410):
        return "gone"
    if status == 429 or status >= 500 or status == 408:
        return "retry"
    return "drop"


def retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds from a ``Retry-After`` header (delta-seconds only; a date is ignored)."""
    if not value:
        return None
    try:
        return max(0.0, float(value.strip()))
    except ValueError:
        return None


def backoff(attempt: int, base: float, cap: float) -> float:
    return min(cap, base * (2 ** max(0, attempt - 1)))


def retry_delay(failures: int, asked: Optional[float], base: float, cap: float) -> float:
    """How long after a failed try (the ``failures``-th in a row) the next one waits: the exponential
    backoff, longer when the service ``asked`` (``Retry-After``), at most ``cap``, and never under
    ``PUSH_RETRY_FLOOR`` whatever the service says: ``Retry-After: 0`` never makes a loop."""
    delay = max(backoff(failures, base, cap), asked or 0.0)
    return max(PUSH_RETRY_FLOOR, min(delay, cap))


__all__ = ["Request", "backoff", "load_vapid", "ntfy_request", "outcome", "retry_after", "retry_delay",
           "vapid_public_key", "webhook_request", "webhook_signature", "webpush_request"]

