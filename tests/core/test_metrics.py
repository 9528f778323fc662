"""The Prometheus endpoint (bridge_core/kit/metrics.py, docs/operations.md): scraped over a real socket
while a run waits for its approval and after, parsed with prometheus_client's own parser; who may
read it (loopback Host, the [metrics] token) and what the configuration refuses."""

from __future__ import annotations

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bridge_core.model.errors import ConfigError
from tests.conftest import LVMH_TOKEN, make_config
from tests.loomi.helpers import pair, resume
from tests.pheby.client import PhebyClient

TOKEN = "metrics-scrape-token-5d1e9a7c3b"
REQUIRED = ("agent_bridge_connections", "agent_bridge_runs_total", "agent_bridge_approvals_pending",
            "agent_bridge_frames_sent_total", "agent_bridge_replay_events_total",
            "agent_bridge_push_deliveries_total", "agent_bridge_build_info")  # fmt: skip


async def fetch(port: int, headers: dict | None = None, path: str = "/metrics") -> tuple[int, dict, str]:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}{path}", headers=headers or {}) as r:
            return r.status, dict(r.headers), await r.text()


def parse(text: str) -> dict:
    """{(sample name, sorted labels): value} of a text-format page."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def scrape(port: int, headers: dict | None = None) -> dict:
    status, hdrs, text = await fetch(port, headers)
    assert status == 200, text
    assert hdrs["Content-Type"].startswith("text/plain; version=0.0.4")
    return parse(text)


def v(m: dict, name: str, **labels: str) -> float:
    return m[(name, tuple(sorted(labels.items())))]


def names(m: dict) -> set:
    return {name for name, _ in m}


async def test_a_scrape_during_an_approval_and_after(service_factory):
    svc = await service_factory(metrics_port=0)
    port = svc.metrics_port
    before = await scrape(port)
    assert set(REQUIRED) <= names(before)
    assert "agent_bridge_bus_lag_seconds" not in names(before)  # one node: no bus
    assert v(before, "agent_bridge_push_deliveries_total", channel="webpush", result="ok") == 0
    assert all(v(before, "agent_bridge_connections", front_end=fe) == 0 for fe in ("pheby", "loomi", "lvmh"))
    c = await PhebyClient.connect(svc.ports["pheby"])
    phone, creds = await pair(svc)
    try:
        cid = await c.create()
        await c.send({"type": "chat.send", "conversation_id": cid, "text": "/approve ls", "request_id": "r1"})
        req = await c.recv_type("approval.request")
        waiting = await scrape(port)
        assert v(waiting, "agent_bridge_connections", front_end="pheby") >= 1
        assert v(waiting, "agent_bridge_connections", front_end="loomi") == 1
        assert v(waiting, "agent_bridge_approvals_pending") == 1
        assert 0 <= v(waiting, "agent_bridge_approvals_oldest_age_seconds") < 60
        assert v(waiting, "agent_bridge_runs_active") == 1
        assert v(waiting, "agent_bridge_frames_sent_total", front_end="pheby") > 0
        assert v(waiting, "agent_bridge_runs_total", status="completed") == 0
        await c.send({"type": "approval.respond", "approval_id": req["approval_id"], "choice": "once", "request_id": "r2"})
        await c.collect_until("run.finished")
        after = await scrape(port)
        assert v(after, "agent_bridge_approvals_pending") == 0
        assert v(after, "agent_bridge_approvals_oldest_age_seconds") == 0
        assert v(after, "agent_bridge_runs_active") == 0
        assert v(after, "agent_bridge_runs_total", status="completed") == 1
        for fe in ("pheby", "loomi"):  # every frame written is counted where the outbox writes it
            assert v(after, "agent_bridge_frames_sent_total", front_end=fe) > v(waiting, "agent_bridge_frames_sent_total",
                                                                                 front_end=fe)  # fmt: skip
        assert v(after, "agent_bridge_replay_events_total", front_end="loomi") == 0
        # a phone catching up is replayed what it missed; a browser reading ?after= is resent the stored events
        await phone.close()
        phone, ok = await resume(svc, creds, last_seq=1)
        assert ok["type"] == "hello.ok"
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{svc.ports['lvmh']}/api/sessions/{cid}/events?after=0",
                                headers={"Authorization": f"Bearer {LVMH_TOKEN}"}) as r:  # fmt: skip
                resent = len(await r.json())
        replayed = await scrape(port)
        assert v(replayed, "agent_bridge_replay_events_total", front_end="loomi") > 0
        assert v(replayed, "agent_bridge_replay_events_total", front_end="lvmh") == resent > 0
    finally:
        await c.close()
        await phone.close()


async def test_a_wrong_credential_is_counted_by_front_end(service_factory):
    svc = await service_factory(adapters=("pheby",), metrics_port=0)
    bad = await PhebyClient.connect(svc.ports["pheby"], hello=False)
    await bad.send({"type": "hello", "secret": "not-the-secret-at-all", "protocol_version": 1})
    assert (await bad.recv())["error"]["code"] == "unauthorized"
    await bad.close()
    m = await scrape(svc.metrics_port)
    assert v(m, "agent_bridge_auth_failures_total", front_end="pheby") == 1
    assert v(m, "agent_bridge_connections", front_end="pheby") == 0  # an unauthenticated socket is not counted


async def test_a_page_cannot_read_it_through_dns_rebinding(service_factory):
    """On loopback without a token a request must name a loopback Host: a site rebinding its own name
    to 127.0.0.1 reads nothing; Prometheus scraping 127.0.0.1 or localhost does."""
    svc = await service_factory(adapters=("pheby",), metrics_port=0)
    port = svc.metrics_port
    status, _, text = await fetch(port, {"Host": "evil.example:8699"})
    assert status == 403 and "agent_bridge" not in text
    assert (await fetch(port, {"Host": f"localhost:{port}"}))[0] == 200
    assert (await fetch(port))[0] == 200
    assert (await fetch(port, path="/"))[0] == 404  # nothing else is served


async def test_off_loopback_a_scrape_needs_the_token(service_factory, tmp_path):
    conf = tmp_path / "metrics.toml"
    conf.write_text(f'[metrics]\ntoken = "{TOKEN}"\n')
    svc = await service_factory(adapters=("pheby",), metrics_port=0, metrics_host="0.0.0.0", config=str(conf),
                                env={"LOOMI_ALLOW_INSECURE_BIND": "true"})  # fmt: skip
    port = svc.metrics_port
    status, hdrs, text = await fetch(port)
    assert status == 401 and hdrs["WWW-Authenticate"].startswith("Bearer") and "agent_bridge" not in text
    for wrong in (f"Bearer {TOKEN[:-1]}x", f"Basic {TOKEN}", "Bearer "):
        status, _, text = await fetch(port, {"Authorization": wrong})
        assert status == 401 and "agent_bridge" not in text
    assert svc.metrics.limiter.wrong_total == 1  # a wrong token waited for its slot; none at all is a plain 401
    m = await scrape(port, {"Authorization": f"Bearer {TOKEN}"})
    assert set(REQUIRED) <= names(m)
    status, _, text = await fetch(port, {"Authorization": f"Bearer {TOKEN}", "Host": "evil.example"})
    assert status == 200 and TOKEN not in text  # the token is the credential here, whatever the Host


async def test_off_loopback_with_tls_it_serves_the_front_ends_certificate(service_factory, tmp_path):
    import ssl

    from tests.remote.certs import make_cert

    cert = make_cert(str(tmp_path / "tls"))
    conf = tmp_path / "metrics.toml"
    conf.write_text(f'[metrics]\ntoken = "{TOKEN}"\n')
    svc = await service_factory(adapters=("pheby",), metrics_port=0, metrics_host="0.0.0.0", config=str(conf),
                                tls_cert=cert.cert, tls_key=cert.key)  # fmt: skip
    ctx = ssl.create_default_context(cafile=cert.cert)
    url = f"https://127.0.0.1:{svc.metrics_port}/metrics"
    async with aiohttp.ClientSession() as http:
        async with http.get(url, ssl=ctx, headers={"Authorization": f"Bearer {TOKEN}"}) as r:
            assert r.status == 200 and "agent_bridge_connections" in await r.text()
        async with http.get(url, ssl=ctx) as r:
            assert r.status == 401
        with pytest.raises(aiohttp.ClientError):  # no plain HTTP beside it: the token never crosses in the clear
            async with http.get(f"http://127.0.0.1:{svc.metrics_port}/metrics",
                                headers={"Authorization": f"Bearer {TOKEN}"}) as r:  # fmt: skip
                await r.read()


async def test_a_token_on_loopback_is_required_too(service_factory, tmp_path):
    conf = tmp_path / "metrics.toml"
    conf.write_text(f'[metrics]\ntoken = "{TOKEN}"\nport = 0\n')
    svc = await service_factory(adapters=("pheby",), config=str(conf), metrics_port=None)
    assert (await fetch(svc.metrics_port))[0] == 401
    await scrape(svc.metrics_port, {"Authorization": f"Bearer {TOKEN}"})


def test_the_configuration_refuses_an_exposed_endpoint(tmp_path):
    with pytest.raises(ConfigError) as exc:
        make_config(tmp_path / "a", metrics_host="0.0.0.0", metrics_port=0)
    assert "token" in exc.value.message
    conf = tmp_path / "metrics.toml"
    conf.write_text(f'[metrics]\ntoken = "{TOKEN}"\n')
    with pytest.raises(ConfigError) as exc:  # a Bearer credential in the clear needs the insecure-bind opt-in
        make_config(tmp_path / "b", metrics_host="192.0.2.7", metrics_port=0, config=str(conf))
    assert "TLS" in exc.value.message and TOKEN not in exc.value.message
    conf.write_text('[metrics]\ntoken = "short"\n')
    with pytest.raises(ConfigError) as exc:
        make_config(tmp_path / "c", metrics_port=0, config=str(conf))
    assert "16" in exc.value.message and '"short"' not in exc.value.message
    for bad in ("-1", "65536", "eight", "1.5"):
        with pytest.raises(ConfigError):
            make_config(tmp_path / "d", metrics_port=bad)
    conf.write_text("[metrics]\nprot = 9000\n")
    with pytest.raises(ConfigError):
        make_config(tmp_path / "e", metrics_port=None, config=str(conf))


def test_the_port_comes_from_flag_environment_file_default(tmp_path):
    conf = tmp_path / "metrics.toml"
    conf.write_text('[metrics]\nport = 9101\n')
    assert make_config(tmp_path / "a", metrics_port=None).metrics.port == 8699
    assert make_config(tmp_path / "b", metrics_port=None, config=str(conf)).metrics.port == 9101
    env = {"AGENT_BRIDGE_METRICS_PORT": "9102"}
    assert make_config(tmp_path / "c", metrics_port=None, config=str(conf), env=env).metrics.port == 9102
    assert make_config(tmp_path / "d", metrics_port="9103", config=str(conf), env=env).metrics.port == 9103
    assert make_config(tmp_path / "e", metrics_port="off", env=env).metrics.port is None
    conf.write_text('[metrics]\nport = "off"\n')
    assert make_config(tmp_path / "f", metrics_port=None, config=str(conf)).metrics.port is None


async def test_off_serves_nothing_and_lists_nothing(service_factory, tmp_path):
    import json
    import os

    svc = await service_factory(adapters=("pheby",))  # the suite's default: off
    assert svc.metrics is None
    with open(os.path.join(svc.cfg.run_dir, "ports.json")) as f:
        assert set(json.load(f)) == {"pheby"}
    svc2 = await service_factory(adapters=("pheby",), metrics_port=0, data_dir=tmp_path / "two")
    with open(os.path.join(svc2.cfg.run_dir, "ports.json")) as f:
        assert json.load(f) == {"pheby": svc2.ports["pheby"], "metrics": svc2.metrics_port}


def test_the_oldest_pending_approval_is_the_age_to_alert_on():
    """What ``approvals_oldest_age_seconds`` reads: the conversations' pending approvals (an approval
    asked 15 minutes ago, on whichever node asked it), not a count that a new approval would hide."""
    import collections
    import time
    from types import SimpleNamespace

    from prometheus_client import generate_latest

    from bridge_core.kit.metrics import bridge_registry

    now = time.time()
    conv = SimpleNamespace(approvals={"a1": SimpleNamespace(ts=now - 900), "a2": SimpleNamespace(ts=now - 5)},
                           clarifications={}, run=object())  # fmt: skip
    bridge = SimpleNamespace(conversations={"c1": conv}, runs_ended=collections.Counter(failed=2), cluster=None,
                             store=SimpleNamespace(failed=OSError("disk full"), commits=3))  # fmt: skip
    m = parse(generate_latest(bridge_registry(bridge, {}, None, "n1")).decode())
    assert v(m, "agent_bridge_approvals_pending") == 2
    assert 900 <= v(m, "agent_bridge_approvals_oldest_age_seconds") < 960
    assert v(m, "agent_bridge_runs_total", status="failed") == 2
    assert v(m, "agent_bridge_runs_total", status="completed") == 0
    assert v(m, "agent_bridge_store_write_failing") == 1


LAZY_NODE = """
import asyncio, json, pathlib, sys
import aiohttp
from bridge_core.bridge.demo import DemoAgent
from cli.config import build_config
from cli.serve import Service

async def main():
    env = {"PHEBY_SECRET": "lazy-pheby-secret-0123456789abcdef", "LVMH_TOKEN": "lazy-lvmh-token-0123456789abcdef"}
    cfg = build_config({"data_dir": sys.argv[1], "adapters": "pheby,loomi,lvmh", "pheby_port": 0, "loomi_port": 0,
                        "lvmh_port": 0, "metrics_port": 0}, env)
    svc = Service(cfg, DemoAgent())
    await svc.start()
    seen = {"started": "prometheus_client" in sys.modules}
    url = f"http://127.0.0.1:{svc.metrics_port}/metrics"
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(url, headers={"Host": "evil.example"}) as r:
                seen["refused"] = [r.status, "prometheus_client" in sys.modules]
            for key in ("first", "second"):
                async with http.get(url) as r:
                    seen[key] = [r.status, await r.text(), "prometheus_client" in sys.modules]
    finally:
        await svc.stop()
    print(json.dumps(seen))

asyncio.run(main())
"""


async def test_a_node_nobody_scrapes_does_not_hold_the_library(tmp_path):
    """prometheus_client (about 2.6 MB of a node) is imported at the first scrape that is let in, not at
    start: a node started with its endpoint on, never scraped, holds none of it; a refused request
    (DNS rebinding) imports nothing; the first scrape answers every family, and so does the next one."""
    import asyncio
    import json
    import os
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", LAZY_NODE, str(tmp_path / "data"), cwd=root, env=dict(os.environ, PYTHONPATH=root),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-2000:]
    seen = json.loads(out.decode().strip().splitlines()[-1])
    assert seen["started"] is False
    assert seen["refused"] == [403, False]
    for key in ("first", "second"):
        status, text, loaded = seen[key]
        assert status == 200 and loaded is True
        assert set(REQUIRED) <= names(parse(text))
        assert "agent_bridge_process_resident_memory_bytes" in names(parse(text))
