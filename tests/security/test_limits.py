"""Limits that hold the attacker, not the user, over real sockets against ``agent-bridge serve``:
credential-less requests lock nobody out, phones behind one address survive a misbehaving one, wrong
guesses are answered at most ~20 per second per address on every secret (the right one passes at once),
a descriptor flood is capped per address, and a weak environment secret is refused at start."""

from __future__ import annotations

import asyncio
import resource
import signal

import orjson

from bridge_core.kit.security import DEFAULT_UNAUTH_PER_ADDRESS, raise_nofile_limit

from .helpers import (  # noqa: F401 (bridges: fixture)
    LVMH_TOKEN,
    PHEBY_SECRET,
    HandshakeRefused,
    LimitedBridge,
    RawWS,
    answered_within,
    bridges,
    fire,
    http_from,
    loomi_hello,
    pair_device,
    pheby_hello,
    rate_bound,
    until,
)

ATT = "0" * 32


async def test_credential_less_requests_lock_nobody_out(bridges):
    srv = bridges("nolock")
    ports = srv.ports
    proxy = "127.0.0.77"  # everyone behind one reverse proxy
    device = await pair_device(srv, "phone", source=proxy)
    async with http_from(proxy) as http:
        for port in (ports["pheby"], ports["loomi"]):
            for headers in ({}, {"Authorization": "Bearer"}, {"Authorization": "Basic abc"}):
                for _ in range(6):
                    async with http.get(f"http://127.0.0.1:{port}/attachments/{ATT}", headers=headers) as r:
                        assert r.status == 401, (port, r.status)
        # wrong credentials on downloads are slowed, and never lock the hello either
        for _ in range(6):
            async with http.get(f"http://127.0.0.1:{ports['pheby']}/attachments/{ATT}",
                                headers={"Authorization": "Bearer wrong-secret-guess"}) as r:
                assert r.status == 401
            async with http.get(f"http://127.0.0.1:{ports['loomi']}/attachments/{ATT}",
                                headers={"Authorization": f"Bearer {device[0]}:wrong"}) as r:
                assert r.status == 401
    ready = await pheby_hello(ports["pheby"], PHEBY_SECRET, source=proxy)
    assert ready["type"] == "ready", ready
    first, _ = await loomi_hello(ports["loomi"], {"device_id": device[0], "credential": device[1]}, source=proxy)
    assert first["type"] == "hello.ok", first
    # the right credential downloads from there too
    async with http_from(proxy) as http:
        async with http.get(f"http://127.0.0.1:{ports['pheby']}/attachments/{ATT}",
                            headers={"Authorization": f"Bearer {PHEBY_SECRET}"}) as r:
            assert r.status == 404  # judged, then not found: no lockout
        async with http.get(f"http://127.0.0.1:{ports['loomi']}/attachments/{ATT}",
                            headers={"Authorization": f"Bearer {device[0]}:{device[1]}"}) as r:
            assert r.status == 404


async def test_phones_behind_one_address_survive_a_revoked_one_retrying(bridges):
    srv = bridges("proxy")
    port = srv.ports["loomi"]
    proxy = "127.0.0.78"
    good = [await pair_device(srv, f"phone {i}", source=proxy) for i in range(3)]
    bad = await pair_device(srv, "lost phone", source=proxy)
    from .helpers import cli

    rc, _, err = await cli("loomi", "revoke", bad[0], "--data-dir", srv.data_dir, env=srv.env)
    assert rc == 0, err
    codes: list = []
    stop = asyncio.Event()

    async def retry_forever() -> None:  # what a revoked phone's app does: reconnect, again and again
        while not stop.is_set():
            first, code = await loomi_hello(port, {"device_id": bad[0], "credential": bad[1]}, source=proxy)
            codes.append(((first or {}).get("payload", {}).get("code"), code))

    retries = [asyncio.ensure_future(retry_forever()) for _ in range(4)]
    try:
        await until(lambda: _true(len(codes) >= 12), 30, "the revoked phone's retries")
        for device in good:  # meanwhile every other phone connects from the same address
            first, _ = await loomi_hello(port, {"device_id": device[0], "credential": device[1]}, source=proxy)
            assert first["type"] == "hello.ok", first
        new = await pair_device(srv, "new phone", source=proxy)  # and a new one pairs
        assert new[0] not in {d[0] for d in good}
        await until(lambda: _true(len(codes) >= 40), 30, "more retries")
    finally:
        stop.set()
        await asyncio.gather(*retries)
    assert set(codes) == {("unauthorized", 4001)}, set(codes)  # refused, never a lockout (4029)


async def _true(value: bool) -> bool:
    return value


async def test_wrong_guesses_are_answered_at_most_20_per_second_per_address(bridges):
    """Every secret, attacked concurrently from its own address with the defaults (20/s, 64 unauthenticated)."""
    srv = bridges("guess")
    ports = srv.ports
    device = await pair_device(srv, "phone")
    n = 150

    async def http_status(http, url: str, headers: dict) -> int:
        async with http.get(url, headers=headers) as r:
            await r.read()
            return r.status

    def http_attack(url: str, wrong: dict, expect: int):
        async def attempt(http, i: int) -> str:
            status = await http_status(http, url, wrong(i))
            return "verdict" if status == expect else ("refused" if status == 429 else f"status {status}")
        return attempt

    targets = {
        "lvmh token": ("127.0.0.81", f"http://127.0.0.1:{ports['lvmh']}/api/sessions",
                       lambda i: {"Authorization": f"Bearer wrong-token-{i}"}, 401,
                       {"Authorization": f"Bearer {LVMH_TOKEN}"}, 200),
        "Pheby secret (downloads)": ("127.0.0.82", f"http://127.0.0.1:{ports['pheby']}/attachments/{ATT}",
                                     lambda i: {"Authorization": f"Bearer wrong-secret-{i}"}, 401,
                                     {"Authorization": f"Bearer {PHEBY_SECRET}"}, 404),
        "admin key": ("127.0.0.83", f"http://127.0.0.1:{ports['loomi']}/internal/devices",
                      lambda i: {"Authorization": f"Bearer wrong-admin-key-{i}"}, 403, srv.admin_headers(), 200),
        "Loomi credential (downloads)": ("127.0.0.84", f"http://127.0.0.1:{ports['loomi']}/attachments/{ATT}",
                                         lambda i: {"Authorization": f"Bearer {device[0]}:wrong-{i}"}, 401,
                                         {"Authorization": f"Bearer {device[0]}:{device[1]}"}, 404),
    }

    async def attack_http(name: str):
        source, url, wrong, expect, right, right_status = targets[name]
        async with http_from(source) as http:
            attempt = http_attack(url, wrong, expect)
            t0, results = await fire(n, lambda i: attempt(http, i))
        async with http_from(source) as http:  # the right credential, from the same address, right after
            async def passes() -> bool:
                try:
                    return await http_status(http, url, right) == right_status
                except OSError:
                    return False
            await until(passes, 10, f"the right {name}")
        return t0, results

    async def attack_loomi_hello():
        async def attempt(i: int) -> str:
            first, code = await loomi_hello(ports["loomi"], {"device_id": device[0], "credential": f"wrong-{i}"},
                                            source="127.0.0.85")
            return "verdict" if code == 4001 else f"close {code}"
        t0, results = await fire(n, attempt)
        first, _ = await loomi_hello(ports["loomi"], {"device_id": device[0], "credential": device[1]},
                                     source="127.0.0.85")
        assert first["type"] == "hello.ok", first
        return t0, results

    async def attack_pheby_hello():
        async def attempt(i: int) -> str:
            answer = await pheby_hello(ports["pheby"], f"wrong-secret-{i}", source="127.0.0.86")
            code = answer["error"]["code"] if answer else None
            return {"unauthorized": "verdict", "rate_limited": "refused"}.get(code, f"code {code}")
        return await fire(n, attempt)

    names = list(targets) + ["Loomi credential (hello)", "Pheby secret (hello)"]
    outcomes = await asyncio.gather(*(attack_http(name) for name in targets), attack_loomi_hello(),
                                    attack_pheby_hello())
    report = {}
    for name, (t0, results) in zip(names, outcomes):
        kinds = [o for _, o in results]
        within = answered_within(t0, results, 1.0)
        report[name] = (within, kinds.count("verdict"), kinds.count("refused"))
        assert set(kinds) <= {"verdict", "refused"}, (name, set(kinds))
        assert within <= rate_bound(1.0), (name, report[name])
        if "hello" not in name or "Loomi" in name:
            # answered in full up to the unauthenticated cap; beyond it refused at once (nothing learnt)
            assert kinds.count("verdict") >= min(n, DEFAULT_UNAUTH_PER_ADDRESS) // 2, (name, report[name])
    # Pheby's spec lockout: 5 failed hellos, then hellos on sockets already open are not judged either,
    # and that address gets no new connection for the rest of the minute
    assert report["Pheby secret (hello)"][1] == 5, report
    try:
        await pheby_hello(ports["pheby"], PHEBY_SECRET, source="127.0.0.86")
        raise AssertionError("a locked-out address got a connection")
    except HandshakeRefused as exc:
        assert exc.status == 429
    print("guesses answered within 1 s of", n, "fired at once:", report)


async def test_a_descriptor_flood_is_capped_per_address(bridges, tmp_path):
    raise_nofile_limit()  # the attacker side needs its own 300 descriptors
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert soft >= 1024, "the test process needs at least 1024 descriptors"
    srv = bridges("fds", cls=LimitedBridge, nofile=256)
    ports = srv.ports
    socks = []
    try:
        # the flood lands while the bridge is busy (stopped here, so every connection waits in the
        # listen queue at once, as on a loaded machine): it must not accept more than its descriptors hold
        srv.proc.send_signal(signal.SIGSTOP)
        try:
            for _ in range(300):  # idle unauthenticated sockets on the Pheby port from one address
                socks.append(await asyncio.open_connection("127.0.0.1", ports["pheby"], local_addr=("127.0.0.90", 0)))
        finally:
            srv.proc.send_signal(signal.SIGCONT)
        # the first bytes each socket gets: a 429 for the refused, nothing (yet) for the admitted
        reads = [asyncio.ensure_future(reader.read(64)) for reader, _ in socks]

        async def refused_enough() -> bool:
            done = [t.result() for t in reads if t.done() and not t.cancelled() and t.exception() is None]
            # the per-address cap: 128, or with only 256 descriptors a quarter of the front end's share (256 // 16)
            return sum(1 for data in done if data.startswith(b"HTTP/1.1 429")) >= len(socks) - 256 // 16

        await until(refused_enough, 10, "the excess connections refused")
        assert srv.fds() < 256, srv.fds()
        # the service keeps working for everyone else: lvmh REST and a valid Pheby client
        async with http_from("127.0.0.1") as http:
            async with http.get(f"http://127.0.0.1:{ports['lvmh']}/api/sessions",
                                headers={"Authorization": f"Bearer {LVMH_TOKEN}"}) as r:
                assert r.status == 200
        ready = await pheby_hello(ports["pheby"], PHEBY_SECRET)
        assert ready["type"] == "ready", ready
        first = await _loomi_health(ports["loomi"])
        assert first == {"ok": True, "v": 1}
    finally:
        for _, writer in socks:
            writer.transport.abort()
        for t in locals().get("reads", []):
            t.cancel()
    assert "out of system resource" not in srv.stderr() and "Too many open files" not in srv.stderr()


async def _loomi_health(port: int) -> dict:
    async with http_from("127.0.0.1") as http:
        async with http.get(f"http://127.0.0.1:{port}/health") as r:
            return orjson.loads(await r.read())


def test_weak_environment_secrets_are_refused_at_start(bridges):
    for var, value in (("PHEBY_SECRET", "short-secret-1"), ("LVMH_TOKEN", "lvmhtoken-abc")):
        srv = bridges(f"weak-{var}", start=False, env={var: value})
        rc = srv.run_to_exit()
        err = srv.stderr().strip()
        assert rc != 0
        assert len(err.splitlines()) == 1 and var in err and value not in err, err
        assert "16" in err
    ok = bridges("strong", env={"PHEBY_SECRET": "x" * 16, "LVMH_TOKEN": "y" * 16})  # exactly 16 is enough
    assert ok.alive


async def test_the_security_section_sets_the_rate_and_the_cap(bridges):
    srv = bridges("config", config={"security": {"wrong_attempts_per_second": 5, "unauthenticated_per_address": 4}})
    url = f"http://127.0.0.1:{srv.ports['lvmh']}/api/sessions"

    async def attempt(http, i: int) -> str:
        async with http.get(url, headers={"Authorization": f"Bearer wrong-{i}"}) as r:
            await r.read()
            return "verdict" if r.status == 401 else ("refused" if r.status == 429 else f"status {r.status}")

    async with http_from("127.0.0.95") as http:
        t0, results = await fire(12, lambda i: attempt(http, i))
    kinds = [o for _, o in results]
    assert kinds.count("verdict") == 4 and kinds.count("refused") == 8, kinds  # the cap: 4 judged at once
    assert answered_within(t0, results, 0.5) <= rate_bound(0.5, rate=5, slack=1)  # 5 per second
    async with http_from("127.0.0.95") as http:
        async def passes() -> bool:
            async with http.get(url, headers={"Authorization": f"Bearer {LVMH_TOKEN}"}) as r:
                return r.status == 200
        await until(passes, 10, "the right token")
    bad = bridges("badconfig", start=False, config={"security": {"wrong_attempts_per_second": 0}})
    assert bad.run_to_exit() == 2 and "wrong_attempts_per_second" in bad.stderr()
