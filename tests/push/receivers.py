"""Loopback stand-ins for what a push reaches, written from the standards, not from our code.

- ``PushService``: an RFC 8030 push service. Every request must carry an RFC 8292 VAPID
  ``Authorization: vapid t=<JWT>, k=<key>`` whose ES256 signature verifies with ``k`` (the
  bridge's published key), whose ``aud`` is this service's origin and whose ``exp`` is in
  the next 24 h; the body is RFC 8291 ``aes128gcm``, decrypted with the subscription's
  private key and auth secret (``http_ece``). Each subscription's answer can be set (201,
  410, 503 ...).
- ``Ntfy``: an ntfy-compatible topic endpoint that records each publish (headers, body).
- ``Webhook``: a receiver that accepts a POST only with a valid HMAC-SHA256 signature; it can
  be made to fail (``status``, ``retry_after``), and records when each signed attempt came.

Nothing here imports the bridge.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from typing import Optional

import http_ece
from aiohttp import web
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature


def b64d(value: str) -> bytes:
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))


def b64e(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Loopback:
    """An aiohttp app on 127.0.0.1, port 0."""

    def __init__(self) -> None:
        self.app = web.Application()
        self.runner: Optional[web.AppRunner] = None
        self.port = 0

    async def start(self) -> "Loopback":
        self.runner = web.AppRunner(self.app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", self.port)
        await site.start()
        self.port = self.runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Subscriber:
    """What a browser (or a UnifiedPush distributor) holds: a P-256 key pair and an auth secret."""

    def __init__(self, name: str, service: "PushService"):
        self.name = name
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.auth = os.urandom(16)
        self.endpoint = f"{service.origin}/push/{name}"

    @property
    def keys(self) -> dict:
        raw = self.key.public_key().public_bytes(serialization.Encoding.X962,
                                                 serialization.PublicFormat.UncompressedPoint)
        return {"p256dh": b64e(raw), "auth": b64e(self.auth)}

    def decrypt(self, body: bytes) -> dict:
        return json.loads(http_ece.decrypt(body, private_key=self.key, auth_secret=self.auth, version="aes128gcm"))


def verify_vapid(header: str, audience: str, expected_key: Optional[str]) -> dict:
    """The JWT's claims, after checking the signature (ES256 with ``k``), ``aud`` and ``exp``."""
    scheme, _, params = header.partition(" ")
    assert scheme.lower() == "vapid", header
    parts = dict(p.strip().split("=", 1) for p in params.split(","))
    token, key = parts["t"], parts["k"]
    if expected_key is not None:
        assert key == expected_key, "VAPID key is not the one the bridge publishes"
    head_b64, claims_b64, sig_b64 = token.split(".")
    head = json.loads(b64d(head_b64))
    assert head["alg"] == "ES256", head
    sig = b64d(sig_b64)
    assert len(sig) == 64
    public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b64d(key))
    der = encode_dss_signature(int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big"))
    try:
        public.verify(der, f"{head_b64}.{claims_b64}".encode(), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise AssertionError("VAPID signature does not verify")
    claims = json.loads(b64d(claims_b64))
    assert claims["aud"] == audience, claims
    assert time.time() < claims["exp"] <= time.time() + 24 * 3600, claims
    assert claims.get("sub", "").startswith(("mailto:", "https:")), claims
    return claims


class PushService(Loopback):
    def __init__(self) -> None:
        super().__init__()
        self.subscribers: dict[str, Subscriber] = {}
        self.status: dict[str, int] = {}  # what each subscription's endpoint answers (default 201)
        self.received: list[dict] = []  # {"name", "msg", "headers"} per accepted message
        self.attempts: list[tuple[str, int]] = []  # (name, status answered) per request
        self.errors: list[str] = []
        self.vapid_key: Optional[str] = None  # the bridge's published key, once known
        self.app.router.add_post("/push/{name}", self.handle)

    def subscribe(self, name: str) -> Subscriber:
        sub = Subscriber(name, self)
        self.subscribers[name] = sub
        return sub

    def messages(self, name: Optional[str] = None) -> list[dict]:
        return [r["msg"] for r in self.received if name is None or r["name"] == name]

    async def handle(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        body = await request.read()
        status = self.status.get(name, 201)
        self.attempts.append((name, status))
        if status >= 300:
            return web.Response(status=status)
        try:
            sub = self.subscribers[name]
            verify_vapid(request.headers["Authorization"], self.origin, self.vapid_key)
            assert request.headers["Content-Encoding"] == "aes128gcm"
            assert int(request.headers["TTL"]) > 0
            msg = sub.decrypt(body)
        except Exception as exc:  # recorded for the test to fail on, answered as a push service would
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return web.Response(status=400)
        self.received.append({"name": name, "msg": msg, "headers": dict(request.headers)})
        return web.Response(status=201, headers={"Location": f"/m/{len(self.received)}"})


class Ntfy(Loopback):
    def __init__(self) -> None:
        super().__init__()
        self.received: list[dict] = []
        self.app.router.add_post("/{topic}", self.handle)

    @property
    def url(self) -> str:
        return f"{self.origin}/agent"

    async def handle(self, request: web.Request) -> web.Response:
        body = (await request.read()).decode("utf-8")
        self.received.append({"topic": request.match_info["topic"], "headers": dict(request.headers), "body": body})
        return web.json_response({"id": str(len(self.received)), "event": "message"})


def parse_actions(header: str) -> list[dict]:
    """ntfy's ``Actions`` header (``http, <label>, <url>, method=POST; ...``) as dicts."""
    out = []
    for action in header.split(";"):
        fields = [f.strip() for f in action.split(",")]
        entry = {"type": fields[0], "label": fields[1], "url": fields[2]}
        for extra in fields[3:]:
            k, _, v = extra.partition("=")
            entry[k] = v
        out.append(entry)
    return out


class Webhook(Loopback):
    def __init__(self, secret: str) -> None:
        super().__init__()
        self.secret = secret
        self.received: list[dict] = []  # accepted messages
        self.refused: list[str] = []  # bad signatures
        self.attempts: list[tuple[float, dict]] = []  # (time.monotonic() at arrival, body) per signed request
        self.status = 204  # what a signed request is answered (a failing receiver: 503 ...)
        self.retry_after: Optional[str] = None  # its Retry-After header, if any
        self.app.router.add_post("/hook", self.handle)

    @property
    def url(self) -> str:
        return f"{self.origin}/hook"

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        ts = request.headers.get("X-Agent-Bridge-Timestamp", "")
        given = request.headers.get("X-Agent-Bridge-Signature", "")
        want = "sha256=" + hmac.new(self.secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(given, want) or abs(time.time() - int(ts or 0)) > 300:
            self.refused.append(given)
            return web.Response(status=401)
        msg = json.loads(body)
        self.attempts.append((time.monotonic(), msg))
        if self.status >= 300:
            headers = {"Retry-After": self.retry_after} if self.retry_after else None
            return web.Response(status=self.status, headers=headers)
        self.received.append(msg)
        return web.Response(status=self.status)
