"""The nemesis suite's bridges: three `agent-bridge serve` nodes on one private PostgreSQL and one
private Redis (tests/engines.py, the engines of tests/scale), and the embedded default, each
started once per module and healed after every test (every node running, none stopped, no
spinner). Each test's clients, conversations and history are its own."""

from __future__ import annotations

import pytest

from tests.engines import Postgres
from tests.scale.conftest import postgres, redis_server  # noqa: F401  (the module's engines)

from .world import CLUSTER, EMBEDDED, World


@pytest.fixture(scope="module")
def three_nodes(postgres, redis_server, tmp_path_factory):  # noqa: F811
    world = World(str(tmp_path_factory.mktemp("nemesis-cluster")), CLUSTER, pg=postgres, redis=redis_server).boot()
    yield world
    world.shutdown()


@pytest.fixture
def other_three_nodes(postgres, redis_server, tmp_path):  # noqa: F811
    """Three more nodes for one test whose damage would outlive it, on a PostgreSQL server and a Redis
    database of their own: the module's nodes go on beside them untouched."""
    pg = Postgres().start()
    try:
        world = World(str(tmp_path / "cluster"), CLUSTER, pg=pg, redis=redis_server, bus_db=1).boot()
        yield world
        world.shutdown()
    finally:
        pg.stop()


@pytest.fixture(scope="module")
def embedded_node(tmp_path_factory):
    world = World(str(tmp_path_factory.mktemp("nemesis-embedded")), EMBEDDED).boot()
    yield world
    world.shutdown()


@pytest.fixture
async def cluster(three_nodes):
    yield three_nodes
    await three_nodes.heal()


@pytest.fixture
async def embedded(embedded_node):
    yield embedded_node
    await embedded_node.heal()
