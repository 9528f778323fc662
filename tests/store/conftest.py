"""The store contract suite runs every test on both engines: SQLite (the default) and PostgreSQL.

One private PostgreSQL server per test module (tests/engines.py), one fresh database per
test. Without PostgreSQL here the PostgreSQL half skips as a missing peer (tests/peers.py).
"""

from __future__ import annotations

import pytest

from tests.engines import Postgres, pg_missing

ENGINES = ("sqlite", "postgresql")


@pytest.fixture(scope="module")
def postgres():
    reason = pg_missing()
    if reason:
        pytest.skip(reason)
    pg = Postgres().start()
    yield pg
    pg.stop()


@pytest.fixture(params=ENGINES)
def engine(request):
    return request.param


@pytest.fixture
def store_url(engine, request, tmp_path):
    """A URL naming an empty store of ``engine`` (None: SQLite in the data dir)."""
    if engine == "sqlite":
        return None
    return request.getfixturevalue("postgres").new_database()


@pytest.fixture
def open_store(store_url, tmp_path):
    """``open_store(data_dir=None)``: an opened store on the test's store (SQLite in ``data_dir``);
    closed after the test. Two calls on PostgreSQL are two nodes on one database."""
    from bridge_core.scale.engines import open_store as make

    opened = []

    def open_(data_dir=None):
        s = make(store_url, str(data_dir or tmp_path / "data")).open()
        opened.append(s)
        return s

    yield open_
    for s in opened:
        s.close()
