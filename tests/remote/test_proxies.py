"""Pheby, Loomi and lvmh through real Caddy and nginx (Debian's), configured from
docs/remote-access.md, in front of ``agent-bridge serve``, over wss: the flows a phone runs, the
loopback-only endpoints refused from outside, one bad phone locking out only itself, and
``agent-bridge doctor`` passing through each proxy and naming the fix on a broken nginx config."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import ssl

import aiohttp
import orjson
import pytest

from tests.hardening.proc import LVMH_TOKEN, PHEBY_SECRET, BridgeProcess, admin_headers_for
from tests.loomi.test_cli import cli

from .certs import make_cert
from .proxies import PROXY_HOST, Caddy, Nginx, doc_block, free_port

CREDS = {"PHEBY_SECRET": PHEBY_SECRET, "LVMH_TOKEN": LVMH_TOKEN}
TIMEOUT = 15


class Setup:
    """A bridge behind one proxy; ``trust`` is the TLS context a phone of this set-up has."""

    def __init__(self, bridge: BridgeProcess, proxy, trust: ssl.SSLContext, ca: str, pin: str = ""):
        self.bridge, self.proxy, self.trust, self.ca, self.pin = bridge, proxy, trust, ca, pin

    def url(self, name: str) -> str:
        return self.proxy.url(name)

    def base(self, name: str) -> str:
        return f"https://{PROXY_HOST}:{self.proxy.ports[name]}"

    def session(self, source: str) -> aiohttp.ClientSession:
        """A client on its own loopback address (each a different phone to the proxy)."""
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(source, 0), ssl=self.trust),
                                     timeout=aiohttp.ClientTimeout(total=60))


def start_bridge(base: str, public_urls: str, extra: list) -> BridgeProcess:
    ports = {n: free_port() for n in ("pheby", "loomi", "lvmh")}
    b = BridgeProcess(base, extra_args=[
        "--pheby-port", str(ports["pheby"]), "--loomi-port", str(ports["loomi"]), "--lvmh-port", str(ports["lvmh"]),
        "--trusted-proxy", "127.0.0.1", "--public-url", public_urls, *extra])
    b.wanted = ports
    return b


@pytest.fixture(scope="module", params=["caddy", "nginx"])
def setup(request, tmp_path_factory):
    base = tmp_path_factory.mktemp(request.param)
    if request.param == "nginx":
        cert = make_cert(str(base / "certs"), names=(PROXY_HOST,))
        proxy = Nginx(str(base / "nginx"), cert.cert, cert.key)
        bridge = start_bridge(str(base / "bridge"), proxy.public_url_option(), ["--public-fp", f"loomi={cert.fp}"])
        proxy.start(bridge.wanted)
        ctx = ssl.create_default_context(cafile=cert.cert)
        ca, pin = cert.cert, cert.fp
    else:
        proxy = Caddy(str(base / "caddy"))
        bridge = start_bridge(str(base / "bridge"), proxy.public_url_option(), [])
        proxy.start(bridge.wanted)
        ctx = ssl.create_default_context(cafile=proxy.root_ca)
        ca, pin = proxy.root_ca, ""
    try:
        bridge.start()
        yield Setup(bridge, proxy, ctx, ca, pin)
    finally:
        try:
            assert bridge.stop() == 0
        finally:
            proxy.stop()


async def pheby_hello(s: Setup, source: str, secret: str = PHEBY_SECRET):
    """One hello through the proxy: (the answer type or the HTTP status, the open socket or None)."""
    http = s.session(source)
    try:
        ws = await http.ws_connect(s.url("pheby"))
    except aiohttp.WSServerHandshakeError as exc:
        await http.close()
        return exc.status, None, None
    await ws.send_str(orjson.dumps({"type": "hello", "secret": secret, "protocol_version": 1}).decode())
    msg = await ws.receive_json(timeout=TIMEOUT)
    return msg["type"], ws, http


async def until_frame(ws, pred, timeout: float = TIMEOUT) -> dict:
    while True:
        frame = await ws.receive_json(timeout=timeout)
        if pred(frame):
            return frame


async def test_pheby_echo_and_attachment_download(setup):
    kind, ws, http = await pheby_hello(setup, "127.0.0.3")
    try:
        assert kind == "ready"
        await ws.send_str(json.dumps({"type": "conversation.create", "name": "remote", "request_id": "c"}))
        cid = (await until_frame(ws, lambda f: f["type"] == "conversation.created"))["conversation_id"]
        await ws.send_str(json.dumps({"type": "chat.send", "conversation_id": cid, "text": "hello phone"}))
        done = await until_frame(ws, lambda f: f["type"] == "message.complete")
        assert done["text"] == "Echo: hello phone"
        await ws.send_str(json.dumps({"type": "chat.send", "conversation_id": cid, "text": "/attach"}))
        att = (await until_frame(ws, lambda f: f["type"] == "attachment.added"))["attachment"]
        assert att["download_path"].startswith("/attachments/")
        async with http.get(setup.base("pheby") + att["download_path"],
                            headers={"Authorization": f"Bearer {PHEBY_SECRET}"}) as r:
            assert r.status == 200 and await r.read() == b"demo attachment\n"
    finally:
        await ws.close()
        await http.close()


async def test_loomi_pairs_through_the_qr_url_and_echoes(setup):
    rc, out, err = await cli("loomi", "pair", "--json", "--data-dir", setup.bridge.data_dir)
    assert rc == 0, err
    qr = json.loads(out)
    assert qr["url"] == setup.url("loomi") and qr["fp"] == setup.pin
    if qr["fp"]:  # the app pins the QR's fingerprint instead of checking a CA
        trust = ssl.create_default_context()
        trust.check_hostname, trust.verify_mode = False, ssl.CERT_NONE
    else:
        trust = setup.trust
    conn = aiohttp.TCPConnector(local_addr=("127.0.0.3", 0), ssl=trust)
    async with aiohttp.ClientSession(connector=conn) as http:
        async with http.ws_connect(qr["url"]) as ws:
            if qr["fp"]:
                der = ws.get_extra_info("ssl_object").getpeercert(binary_form=True)
                assert hashlib.sha256(der).hexdigest() == qr["fp"]
            await ws.send_str(json.dumps({"v": 1, "type": "hello", "payload": {"token": qr["token"], "name": "phone"}}))
            ok = await ws.receive_json(timeout=TIMEOUT)
            assert ok["type"] == "hello.ok", ok
            await ws.send_str(json.dumps({"v": 1, "type": "session.send", "payload": {"text": "hi there",
                                                                                     "request_id": "r1"}}))
            done = await until_frame(ws, lambda f: f["type"] == "run.completed")
            assert "Echo: hi there" in json.dumps(done)


@pytest.mark.parametrize("extra", [{}, {"X-Forwarded-For": "127.0.0.1"}, {"Forwarded": "for=127.0.0.1"},
                                   {"X-Real-IP": "127.0.0.1"}, {"Host": "127.0.0.1"}])
async def test_internal_endpoints_are_refused_through_the_proxy(setup, extra):
    port = setup.bridge.ports["loomi"]
    key = admin_headers_for(port)  # even the right admin key does not open them from outside
    async with setup.session("127.0.0.3") as http:
        for path, method in (("/internal/pair/new", "POST"), ("/internal/devices", "GET"),
                             ("/internal/devices/revoke", "POST")):
            for headers in ({}, key):
                async with http.request(method, setup.base("loomi") + path, json={"device_id": "x"},
                                        headers={**headers, **extra}) as r:
                    body = await r.read()
                    if r.status == 200 and body == b"" and r.headers.get("Server") == "Caddy":
                        continue  # a Host no site serves: Caddy's empty answer, the bridge never saw it
                    assert r.status == 403, (path, headers, extra, body)
                    assert orjson.loads(body)["error"]["code"] == "forbidden"


async def test_one_bad_phone_leaves_the_others_connected(setup):
    kind, good, good_http = await pheby_hello(setup, "127.0.0.5")
    assert kind == "ready"
    try:
        for _ in range(5):
            kind, ws, http = await pheby_hello(setup, "127.0.0.6", secret="stale-secret-0123456789")
            assert kind == "error"
            await ws.close()
            await http.close()
        kind, _, http = await pheby_hello(setup, "127.0.0.6")
        assert kind == 429  # the spec's lockout, for that phone only
        kind, other, other_http = await pheby_hello(setup, "127.0.0.7")
        assert kind == "ready"  # another phone behind the same proxy connects
        await other.close()
        await other_http.close()
        await good.send_str(json.dumps({"type": "ping"}))
        assert (await until_frame(good, lambda f: f["type"] == "pong"))["type"] == "pong"  # and this one stays
    finally:
        await good.close()
        await good_http.close()


async def test_doctor_passes_through_the_proxy(setup):
    rc, out, err = await cli("doctor", "--json", "--ca", setup.ca, "--data-dir", setup.bridge.data_dir, **CREDS)
    checks = json.loads(out)
    assert rc == 0, [c for c in checks if not c["ok"]]
    names = {(c["frontend"], c["name"]) for c in checks}
    assert {("pheby", "upgrade"), ("loomi", "internal"), ("lvmh", "web-ui"), ("loomi", "tls")} <= names
    internal = next(c for c in checks if c["name"] == "internal")
    assert "refused from outside" in internal["detail"]


async def test_browser_socket_token_stays_out_of_the_access_log(setup):
    if not isinstance(setup.proxy, Nginx):
        pytest.skip("nginx's access log (Caddy logs no requests unless told to)")
    async with setup.session("127.0.0.3") as http:
        async with http.get(setup.base("lvmh") + "/api/sessions", headers={"Authorization": f"Bearer {LVMH_TOKEN}"}) as r:
            assert r.status == 200
        async with http.ws_connect(setup.base("lvmh").replace("https", "wss") + f"/ws?token={LVMH_TOKEN}") as ws:
            await ws.close()
    with open(setup.proxy.access_log) as f:
        log = f.read()
    assert "/api/sessions" in log  # the log works, and
    assert LVMH_TOKEN not in log and "/ws?token" not in log  # the socket's location logs nothing


async def test_doctor_names_the_fix_for_nginx_without_the_upgrade_headers(tmp_path):
    broken = "\n".join(line for line in doc_block("nginx").splitlines()
                       if "proxy_set_header Upgrade" not in line and "proxy_set_header Connection" not in line)
    cert = make_cert(str(tmp_path / "certs"), names=(PROXY_HOST,))
    proxy = Nginx(str(tmp_path / "nginx"), cert.cert, cert.key, snippet=broken)
    bridge = start_bridge(str(tmp_path / "bridge"), proxy.public_url_option(), ["--public-fp", f"loomi={cert.fp}"])
    proxy.start(bridge.wanted)
    try:
        bridge.start()
        rc, out, err = await cli("doctor", "--ca", cert.cert, "--data-dir", bridge.data_dir, **CREDS)
        assert rc == 1
        lines = out.splitlines()
        for name in ("pheby", "loomi", "lvmh"):
            i = next(i for i, ln in enumerate(lines) if ln.startswith(f"FAIL {name:<6} upgrade"))
            assert "HTTP 400 instead of 101" in lines[i]
            assert "proxy_set_header Upgrade $http_upgrade;" in lines[i + 1] and lines[i + 1].lstrip().startswith("fix:")
        assert any(ln.startswith("ok   lvmh   web-ui") for ln in lines)  # plain HTTP still works through it
    finally:
        try:
            assert bridge.stop() == 0
        finally:
            proxy.stop()


def test_the_public_caddyfile_parses(tmp_path):
    caddy = Caddy(str(tmp_path / "caddy"), block="caddy-public")
    result = caddy.adapt(doc_block("caddy-public"))
    assert result.returncode == 0, result.stderr
    config = json.loads(result.stdout)
    routes = json.dumps(config["apps"]["http"])
    for port in (8620, 8621, 8686):
        assert f"127.0.0.1:{port}" in routes


async def test_wrong_loomi_hellos_from_one_phone_never_refuse_a_fresh_token(setup):
    """Behind the proxy, a phone hammering with a stale credential is slowed alone: a new phone's
    pairing token is served (never rate_limited), and every stale hello gets its own verdict."""
    rc, out, err = await cli("loomi", "pair", "--json", "--data-dir", setup.bridge.data_dir)
    assert rc == 0, err
    token = json.loads(out)["token"]
    pin = ssl.create_default_context(cafile=setup.ca) if not setup.pin else None
    if pin is None:
        pin = ssl.create_default_context()
        pin.check_hostname, pin.verify_mode = False, ssl.CERT_NONE

    async def hello(source: str, payload: dict) -> str:
        conn = aiohttp.TCPConnector(local_addr=(source, 0), ssl=pin)
        async with aiohttp.ClientSession(connector=conn) as http:
            async with http.ws_connect(setup.url("loomi")) as ws:
                await ws.send_str(json.dumps({"v": 1, "type": "hello", "payload": payload}))
                frame = await ws.receive_json(timeout=30)
                return frame["type"] if frame["type"] != "error" else frame["payload"]["code"]

    stale = {"device_id": "d" * 16, "credential": "c" * 43, "last_seq": 0}
    bad = [asyncio.create_task(hello("127.0.0.8", stale)) for _ in range(40)]
    try:
        assert await hello("127.0.0.9", {"token": token, "name": "new phone"}) == "hello.ok"
    finally:
        results = await asyncio.gather(*bad)
    assert set(results) == {"unauthorized"}
