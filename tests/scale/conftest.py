"""Engines for the several-nodes tests: one private redis-server and one private PostgreSQL per
module; Redis flushed and a fresh database per test."""

from __future__ import annotations

import pytest

from bridge_core.bridge.sqlite import Store
from bridge_core.scale.pgstore import PostgresStore
from tests.engines import Postgres, Redis, pg_missing, redis_missing
from tests.hardening.proc import BridgeProcess
from tests.scale.claims import with_tables


@pytest.fixture(scope="module")
def redis_server():
    reason = redis_missing()
    if reason:
        pytest.skip(reason)
    r = Redis().start()
    yield r
    r.stop()


@pytest.fixture
def redis_url(redis_server):
    redis_server.flush()
    return redis_server.url


@pytest.fixture(scope="module")
def postgres():
    reason = pg_missing()
    if reason:
        pytest.skip(reason)
    pg = Postgres().start()
    yield pg
    pg.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    """An opened store with Loomi's and the cluster's tables, on each engine, for the numbering rules tested
    on real rows and claims (tests/scale/claims.py)."""
    if request.param == "sqlite":
        s = Store(str(tmp_path / "core.db")).open()
    else:
        s = PostgresStore(request.getfixturevalue("postgres").new_database()).open()
    with_tables(s)
    yield s
    s.close()


@pytest.fixture
def engines(postgres, redis_url):
    """(store URL, bus URL): a fresh database and a flushed Redis, for the nodes of one test."""
    return postgres.new_database(), redis_url


@pytest.fixture
def serve_nodes(engines, tmp_path):
    """``serve_nodes(*names, adapters=..., config=None, env=None)``: `agent-bridge serve` nodes of one
    bridge on this test's store and bus, started one after the other (stopped at the end of the test)."""
    store, bus = engines
    started: list[BridgeProcess] = []

    def start(*names: str, adapters: str, config: dict | None = None, env: dict | None = None) -> list[BridgeProcess]:
        out = []
        for name in names:
            proc = BridgeProcess(str(tmp_path / name), adapters=adapters, config=config, env=env,
                                 extra_args=["--store", store, "--bus", bus, "--node-id", name])  # fmt: skip
            started.append(proc)
            proc.start()
            out.append(proc)
        return out

    yield start
    for proc in started:
        proc.stop()


@pytest.fixture
async def clients():
    """Spec clients (tests/conformance) a test makes, each closed after it: ``clients(Browser(...))``."""
    made: list = []

    def keep(client):
        made.append(client)
        return client

    yield keep
    for c in made:
        await c.close()
