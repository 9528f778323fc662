"""The loopback-only endpoints (``/internal/*`` on the Loomi port) against a DNS-rebinding page and a
local process without the admin key, over real sockets against ``agent-bridge serve``; the CLI (the
legitimate path) still pairs, lists and revokes."""

from __future__ import annotations

import os
import stat

import aiohttp
import orjson

from .helpers import bridges, cli, loomi_hello, pair_device  # noqa: F401 (bridges: fixture)

ENDPOINTS = (("POST", "/internal/pair/new", "{}"), ("GET", "/internal/devices", None),
             ("POST", "/internal/devices/revoke", None))


async def _devices(srv) -> list:
    rc, out, err = await cli("loomi", "devices", "--json", "--data-dir", srv.data_dir, env=srv.env)
    assert rc == 0, err
    return orjson.loads(out)


async def _call_all(port: int, device_id: str, headers: dict) -> list[tuple[int, bytes]]:
    out = []
    async with aiohttp.ClientSession() as http:
        for method, path, body in ENDPOINTS:
            if path.endswith("revoke"):
                body = orjson.dumps({"device_id": device_id}).decode()
            # text/plain: what a page may send without a CORS preflight
            async with http.request(method, f"http://127.0.0.1:{port}{path}", data=body,
                                    headers={"Content-Type": "text/plain", **headers}) as r:
                out.append((r.status, await r.read()))
    return out


def _refused(answers: list[tuple[int, bytes]]) -> bool:
    for status, body in answers:
        if status != 403:
            return False
        err = orjson.loads(body)["error"]
        if err["code"] != "forbidden" or not err["message"] or b'"token"' in body:
            return False
    return True


async def test_dns_rebinding_origin_and_proxies_are_refused(bridges):
    srv = bridges("rebind")
    port = srv.ports["loomi"]
    device_id, credential = await pair_device(srv, "victim phone")
    key = srv.admin_headers()
    evil = {"Host": f"rebind.evil.example:{port}", "Origin": f"http://rebind.evil.example:{port}"}
    # the page as it really is (no key), and even with the key: the Host and Origin alone refuse it
    assert _refused(await _call_all(port, device_id, evil))
    assert _refused(await _call_all(port, device_id, {**evil, **key}))
    assert _refused(await _call_all(port, device_id, {"Host": f"rebind.evil.example:{port}", **key}))
    for origin in ("null", f"http://127.0.0.1:{port}", f"http://localhost:{port}"):
        assert _refused(await _call_all(port, device_id, {"Origin": origin, **key})), origin
    for header in ("X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-IP", "Forwarded", "Via"):
        assert _refused(await _call_all(port, device_id, {header: "127.0.0.1", **key})), header
    # nothing changed: the phone is still paired and still connects
    assert [d["device_id"] for d in await _devices(srv)] == [device_id]
    first, _ = await loomi_hello(port, {"device_id": device_id, "credential": credential})
    assert first["type"] == "hello.ok"
    # the same requests with a loopback Host, no Origin, no proxy header and the key work
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}"):
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/internal/devices", headers={"Host": host, **key}) as r:
                assert r.status == 200, host
    assert srv.admin_key() not in srv.all_output()  # the key never reaches a log


async def test_a_local_process_needs_the_admin_key(bridges):
    srv = bridges("adminkey")
    port = srv.ports["loomi"]
    path = os.path.join(srv.data_dir, "run", "admin.key")
    mode = stat.S_IMODE(os.stat(path).st_mode)
    key = srv.admin_key()
    assert mode == 0o600 and len(key) >= 43  # 32 random bytes, base64url
    device_id, _ = await pair_device(srv, "phone")
    assert _refused(await _call_all(port, device_id, {}))  # no Authorization
    assert _refused(await _call_all(port, device_id, {"Authorization": "Bearer " + "x" * 43}))
    assert _refused(await _call_all(port, device_id, {"Authorization": f"Basic {key}"}))
    assert _refused(await _call_all(port, device_id, {"Authorization": f"Bearer {key[:-1]}"}))
    # with the key: pair and list work
    async with aiohttp.ClientSession() as http:
        async with http.post(f"http://127.0.0.1:{port}/internal/pair/new", json={}, headers=srv.admin_headers()) as r:
            assert r.status == 200 and (await r.json())["payload"]["token"]
    # a restart makes a new key: the previous run's key is refused
    old = key
    assert srv.stop() == 0
    assert not os.path.exists(path)  # removed on a clean shutdown
    srv.start()
    port = srv.ports["loomi"]
    assert srv.admin_key() != old and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert _refused(await _call_all(port, device_id, {"Authorization": f"Bearer {old}"}))
    assert [d["device_id"] for d in await _devices(srv)] == [device_id]


async def test_the_cli_pairs_lists_and_revokes(bridges):
    srv = bridges("cli")
    rc, out, err = await cli("loomi", "pair", "--json", "--data-dir", srv.data_dir, env=srv.env)
    assert rc == 0, err
    qr = orjson.loads(out)
    assert set(qr) == {"v", "url", "token", "name", "fp"} and qr["url"].endswith(f":{srv.ports['loomi']}/ws")
    first, _ = await loomi_hello(srv.ports["loomi"], {"token": qr["token"], "device_info": {"model": "cli phone"}})
    assert first["type"] == "hello.ok"
    device_id = first["payload"]["device_id"]
    assert [d["device_id"] for d in await _devices(srv)] == [device_id]
    rc, out, err = await cli("loomi", "revoke", device_id, "--data-dir", srv.data_dir, env=srv.env)
    assert rc == 0 and device_id in out, err
    assert await _devices(srv) == []
    # the offline fallback (no server running) still reads the database
    other_id, _ = await pair_device(srv, "other")
    assert srv.stop() == 0
    assert [d["device_id"] for d in await _devices(srv)] == [other_id]
    rc, out, err = await cli("loomi", "revoke", other_id, "--data-dir", srv.data_dir, env=srv.env)
    assert rc == 0, err
    assert await _devices(srv) == []
    rc, out, err = await cli("loomi", "pair", "--json", "--data-dir", srv.data_dir, env=srv.env)
    assert rc == 1 and "not running" in err
