"""Engines for the several-nodes tests: one private redis-server and one private PostgreSQL per
module; Redis flushed and a fresh database per test."""

from __future__ import annotations

import pytest

from tests.engines import Postgres, Redis, pg_missing, redis_missing


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


@pytest.fixture
def engines(postgres, redis_url):
    """(store URL, bus URL): a fresh database and a flushed Redis, for the nodes of one test."""
    return postgres.new_database(), redis_url
