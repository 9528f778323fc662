"""Origin checks on lvmh's browser ``/ws``, REST and ``/agent/ws``, over real sockets against
``agent-bridge serve`` (a subprocess).

A page from another origin that got hold of the token (or a browser extension page, a
``null`` origin) must get nothing: 403 and no session list. The same-origin web UI and
clients without ``Origin`` (plugins, curl) keep working; behind a reverse proxy the
configured lvmh public URL is the browser's origin.
"""

from __future__ import annotations

import json

import aiohttp
import pytest

from tests.hardening.clients import lvmh_plugin
from tests.hardening.proc import LVMH_TOKEN, BridgeProcess

AUTH = {"Authorization": f"Bearer {LVMH_TOKEN}"}
PUBLIC = "https://lvmh.example.com"


@pytest.fixture(scope="module")
def bridges(tmp_path_factory):
    plain = BridgeProcess(str(tmp_path_factory.mktemp("origin")), adapters="lvmh")
    proxied = BridgeProcess(str(tmp_path_factory.mktemp("origin-public")), adapters="lvmh",
                            config={"lvmh": {"public_url": PUBLIC}})
    plain.start()
    proxied.start()
    try:
        yield plain.ports["lvmh"], proxied.ports["lvmh"]
    finally:
        assert plain.stop() == 0
        assert proxied.stop() == 0


async def rest(port, path, method="GET", headers=None, body=None):
    async with aiohttp.ClientSession() as http:
        h = dict(AUTH)
        h.update(headers or {})
        async with http.request(method, f"http://127.0.0.1:{port}{path}", headers=h,
                                data=None if body is None else json.dumps(body)) as r:
            text = await r.text()
            return r.status, (json.loads(text) if text else None)


async def browser_ws(port, origin=None, host=None):
    """(HTTP status of a refused upgrade or 101, the first frame when accepted)."""
    headers = {}
    if origin is not None:
        headers["Origin"] = origin
    if host is not None:
        headers["Host"] = host
    async with aiohttp.ClientSession() as http:
        try:
            ws = await http.ws_connect(f"http://127.0.0.1:{port}/ws?token={LVMH_TOKEN}", headers=headers)
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status, None
        try:
            msg = await ws.receive(timeout=5)
            return 101, json.loads(msg.data)
        finally:
            await ws.close()


FOREIGN = ["http://evil.example", "http://evil.example:{port}", "null", "https://127.0.0.1:{port}",
           "http://127.0.0.1:{other}", "http://localhost:{port}", "file://", "garbage", ""]


async def test_foreign_origin_on_the_browser_socket_gets_no_session_list(bridges):
    port, _ = bridges
    for origin in FOREIGN:
        status, frame = await browser_ws(port, origin.format(port=port, other=port + 1))
        assert (status, frame) == (403, None), origin


async def test_foreign_origin_on_rest_is_403_and_changes_nothing(bridges):
    port, _ = bridges
    plugin = lvmh_plugin(port, "origin-target")
    try:
        await plugin.connect()
        for origin in FOREIGN:
            origin = origin.format(port=port, other=port + 1)
            status, body = await rest(port, "/api/sessions", headers={"Origin": origin})
            assert status == 403 and body["code"] == "forbidden_origin" and "Origin" in body["error"], origin
            assert set(body) == {"error", "code"}
            status, body = await rest(port, "/api/sessions/origin-target/prompt", "POST",
                                      headers={"Origin": origin, "Content-Type": "application/json"},
                                      body={"message": "from a foreign page"})
            assert status == 403, origin
        # no prompt reached the plugin: the next frame it gets is the one sent with the right origin
        status, _ = await rest(port, "/api/sessions/origin-target/prompt", "POST",
                               headers={"Origin": f"http://127.0.0.1:{port}", "Content-Type": "application/json"},
                               body={"message": "same origin"})
        assert status == 200
        assert (await plugin.recv_type("prompt"))["message"] == "same origin"
    finally:
        await plugin.close()


async def test_foreign_origin_on_the_plugin_socket_is_refused(bridges):
    port, _ = bridges
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as err:
            await http.ws_connect(f"http://127.0.0.1:{port}/agent/ws", headers={**AUTH, "Origin": "http://evil.example"})
        assert err.value.status == 403


async def test_same_origin_and_origin_less_clients_still_work(bridges):
    port, _ = bridges
    # the web UI served by lvmh itself: Origin is the address it was loaded from
    status, frame = await browser_ws(port, f"http://127.0.0.1:{port}")
    assert status == 101 and frame["type"] == "session_list"
    status, frame = await browser_ws(port, f"http://localhost:{port}", host=f"localhost:{port}")
    assert status == 101 and frame["type"] == "session_list"
    status, body = await rest(port, "/api/sessions", headers={"Origin": f"http://127.0.0.1:{port}"})
    assert status == 200 and isinstance(body, list)
    # no Origin at all (curl, the plugin): judged by the token alone
    status, frame = await browser_ws(port)
    assert status == 101 and frame["type"] == "session_list"
    status, body = await rest(port, "/api/sessions")
    assert status == 200 and isinstance(body, list)
    plugin = lvmh_plugin(port, "origin-less-plugin")
    try:
        assert (await plugin.connect())["type"] == "welcome"
    finally:
        await plugin.close()
    # a foreign Origin without a token is refused for its origin, a wrong token without Origin is a 401
    status, _ = await rest(port, "/api/sessions", headers={"Origin": "http://evil.example", "Authorization": ""})
    assert status == 403
    status, _ = await rest(port, "/api/sessions", headers={"Authorization": "Bearer wrong-token-0123456789"})
    assert status == 401


async def test_public_url_is_an_allowed_origin(bridges):
    _, port = bridges
    status, frame = await browser_ws(port, PUBLIC)
    assert status == 101 and frame["type"] == "session_list"
    status, body = await rest(port, "/api/sessions", headers={"Origin": PUBLIC})
    assert status == 200 and isinstance(body, list)
    status, body = await rest(port, "/api/sessions", headers={"Origin": PUBLIC + ":443"})
    assert status == 200  # the default port spelled out is the same origin
    for origin in ("http://lvmh.example.com", "https://lvmh.example.com:8443", "https://evil.example.com"):
        status, _ = await browser_ws(port, origin)
        assert status == 403, origin
    # the address it is bound to stays its own origin too
    status, _ = await rest(port, "/api/sessions", headers={"Origin": f"http://127.0.0.1:{port}"})
    assert status == 200


# --- the rule itself (lvmh_adapter/auth.py), pure ------------------------------------------------


@pytest.mark.parametrize("origin, scheme, host, public, allowed", [
    ("http://127.0.0.1:8686", "http", "127.0.0.1:8686", None, True),
    ("HTTP://LOCALHOST:8686", "http", "localhost:8686", None, True),  # scheme and host are case-insensitive
    ("http://example.com", "http", "example.com:80", None, True),  # default ports normalised
    ("https://example.com:443", "https", "example.com", None, True),
    ("http://[::1]:8686", "http", "[::1]:8686", None, True),
    ("http://127.0.0.1:8686", "https", "127.0.0.1:8686", None, False),  # scheme differs
    ("http://127.0.0.1:8687", "http", "127.0.0.1:8686", None, False),  # port differs
    ("http://localhost:8686", "http", "127.0.0.1:8686", None, False),  # host differs
    ("http://127.0.0.1:8686/", "http", "127.0.0.1:8686", None, True),
    ("null", "http", "127.0.0.1:8686", None, False),
    ("", "http", "127.0.0.1:8686", None, False),
    ("http://127.0.0.1:8686", "http", None, None, False),
    ("https://lvmh.example.com", "http", "127.0.0.1:8686", "https://lvmh.example.com", True),
    ("https://lvmh.example.com", "http", "127.0.0.1:8686", "https://lvmh.example.com/", True),
    ("https://lvmh.example.com", "http", "127.0.0.1:8686", "wss://lvmh.example.com", True),
    ("http://lvmh.example.com", "http", "127.0.0.1:8686", "https://lvmh.example.com", False),
    ("https://evil.example.com", "http", "127.0.0.1:8686", "https://lvmh.example.com", False),
])
def test_origin_rule(origin, scheme, host, public, allowed):
    from lvmh_adapter.auth import origin_allowed

    assert origin_allowed(origin, scheme, host, public) is allowed


def test_public_url_hook_reads_the_config(tmp_path):
    from cli.config import build_config
    from lvmh_adapter.auth import public_url

    cfg = build_config({"data_dir": str(tmp_path)}, {}, with_secrets=False)
    assert public_url(cfg) is None
    cfg.extra["lvmh"] = {"public_url": PUBLIC}
    assert public_url(cfg) == PUBLIC
    # a --public-url lvmh=URL option, once the config has one, wins
    import types

    later = types.SimpleNamespace(public_urls={"lvmh": "https://other.example"}, section=cfg.section)
    assert public_url(later) == "https://other.example"
