"""Engines for the several-nodes tests: one private redis-server per module, flushed per test."""

from __future__ import annotations

import pytest

from tests.engines import Redis, redis_missing


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
