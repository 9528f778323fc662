"""``--trusted-proxy``: behind it, a client's address (limits, logs) is the nearest untrusted hop of
its forwarded headers; from any other peer those headers are ignored (and logged once). Over real
sockets against ``agent-bridge serve``, clients on their own loopback addresses."""

from __future__ import annotations

import ipaddress
import os

import aiohttp
import orjson
import pytest

from bridge_core.kit.security import resolve_client
from tests.hardening.proc import PHEBY_SECRET, BridgeProcess, admin_headers_for
from tests.waiting import until_sync

PROXY = "127.0.0.1"  # the trusted proxy's address
STRANGER = "127.0.0.2"  # a peer that is not a trusted proxy


@pytest.fixture(scope="module")
def bridge(tmp_path_factory):
    b = BridgeProcess(str(tmp_path_factory.mktemp("trusted")), adapters="pheby,loomi",
                      extra_args=["--trusted-proxy", f"{PROXY}/32,10.0.0.0/8"])
    b.start()
    yield b
    assert b.stop() == 0


async def hello(port: int, secret: str, source: str, headers: dict) -> object:
    """A Pheby hello from ``source`` with ``headers`` on the upgrade: the answer type, or the HTTP status."""
    conn = aiohttp.TCPConnector(local_addr=(source, 0))
    async with aiohttp.ClientSession(connector=conn) as http:
        try:
            async with http.ws_connect(f"ws://127.0.0.1:{port}/ws", headers=headers) as ws:
                await ws.send_str(orjson.dumps({"type": "hello", "secret": secret, "protocol_version": 1}).decode())
                msg = await ws.receive(timeout=15)
                return orjson.loads(msg.data)["type"] if msg.type == aiohttp.WSMsgType.TEXT else msg.type
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status


async def test_one_bad_phone_behind_the_proxy_locks_out_only_itself(bridge):
    port = bridge.ports["pheby"]
    bad = {"X-Forwarded-For": "198.51.100.7"}
    for _ in range(5):
        assert await hello(port, "wrong-secret-0123456789", PROXY, bad) == "error"
    assert await hello(port, PHEBY_SECRET, PROXY, bad) == 429  # the spec's lockout, for that phone
    assert await hello(port, PHEBY_SECRET, PROXY, {"X-Forwarded-For": "198.51.100.8"}) == "ready"
    # a client the proxy forwarded through a chain: the nearest untrusted hop counts, not a forged first one
    assert await hello(port, PHEBY_SECRET, PROXY, {"X-Forwarded-For": "198.51.100.7, 198.51.100.9, 10.1.2.3"}) == "ready"
    assert await hello(port, PHEBY_SECRET, PROXY, {"X-Forwarded-For": "198.51.100.9, 198.51.100.7"}) == 429
    # the RFC 7239 header, when there is no X-Forwarded-For
    assert await hello(port, PHEBY_SECRET, PROXY, {"Forwarded": 'for="198.51.100.7:4711";proto=https'}) == 429
    assert await hello(port, PHEBY_SECRET, PROXY, {"Forwarded": "for=198.51.100.10"}) == "ready"


async def test_forwarded_headers_from_an_untrusted_peer_are_ignored_and_logged_once(bridge):
    port = bridge.ports["pheby"]
    for i in range(5):
        assert await hello(port, "wrong-secret-0123456789", STRANGER, {"X-Forwarded-For": f"203.0.113.{i}"}) == "error"
    # the stranger cannot pose as someone else: its own address is locked out
    assert await hello(port, PHEBY_SECRET, STRANGER, {"X-Forwarded-For": "203.0.113.99"}) == 429
    assert await hello(port, PHEBY_SECRET, PROXY, {}) == "ready"  # nobody else is

    def logged():
        with open(os.path.join(bridge.log_dir, f"stderr.{bridge.starts}.log")) as f:
            text = f.read()
        return text if f"ignored X-Forwarded-For/Forwarded from {STRANGER}" in text else None

    text = until_sync(logged, 10, "the log line")
    assert text.count(f"ignored X-Forwarded-For/Forwarded from {STRANGER}") == 1


async def test_internal_endpoints_refuse_forwarded_requests_even_from_a_trusted_proxy(bridge):
    port = bridge.ports["loomi"]
    async with aiohttp.ClientSession() as http:
        for extra in ({"X-Forwarded-For": "127.0.0.1"}, {"Forwarded": "for=127.0.0.1"}, {"X-Real-IP": "127.0.0.1"}):
            async with http.post(f"http://127.0.0.1:{port}/internal/pair/new", json={},
                                 headers={**admin_headers_for(port), **extra}) as r:
                assert r.status == 403 and (await r.json())["error"]["code"] == "forbidden"
        async with http.post(f"http://127.0.0.1:{port}/internal/pair/new", json={},
                             headers=admin_headers_for(port)) as r:
            assert r.status == 200  # the CLI's own request, straight on loopback


NETS = [ipaddress.ip_network("127.0.0.1/32"), ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("fd00::/8")]


@pytest.mark.parametrize("peer,headers,expected", [
    ("127.0.0.1", {}, ("127.0.0.1", False)),
    ("127.0.0.1", {"X-Forwarded-For": "192.0.2.1"}, ("192.0.2.1", False)),
    ("127.0.0.1", {"X-Forwarded-For": "6.6.6.6, 192.0.2.1"}, ("192.0.2.1", False)),  # a forged first hop
    ("127.0.0.1", {"X-Forwarded-For": "192.0.2.1, 10.0.0.5"}, ("192.0.2.1", False)),  # two proxies
    ("127.0.0.1", {"X-Forwarded-For": "10.0.0.9, 10.0.0.5"}, ("10.0.0.9", False)),  # all trusted: the farthest
    ("127.0.0.1", {"X-Forwarded-For": "192.0.2.1:5555"}, ("192.0.2.1", False)),
    ("127.0.0.1", {"X-Forwarded-For": "[2001:db8::1]:80"}, ("2001:db8::1", False)),
    ("127.0.0.1", {"X-Forwarded-For": "unknown"}, ("127.0.0.1", False)),  # unparsable: the proxy that said it
    ("127.0.0.1", {"Forwarded": 'for=192.0.2.60;proto=http;by=203.0.113.43'}, ("192.0.2.60", False)),
    ("127.0.0.1", {"Forwarded": 'for="[2001:db8:cafe::17]:4711"'}, ("2001:db8:cafe::17", False)),
    ("::ffff:127.0.0.1", {"X-Forwarded-For": "192.0.2.1"}, ("192.0.2.1", False)),
    ("fd00::2", {"X-Forwarded-For": "192.0.2.1"}, ("192.0.2.1", False)),
    ("192.0.2.50", {"X-Forwarded-For": "192.0.2.1"}, ("192.0.2.50", True)),  # not a trusted proxy
    ("192.0.2.50", {}, ("192.0.2.50", False)),
])
def test_resolve_client(peer, headers, expected):
    assert resolve_client(peer, headers, NETS) == expected
