from __future__ import annotations

import pytest

from tests.lvmh.helpers import Api


@pytest.fixture
async def lvmh(service_factory):
    """A bridge with the demo agent and only the lvmh front end."""
    return await service_factory(adapters=("lvmh",))


@pytest.fixture
async def api(lvmh):
    client = Api(lvmh.ports["lvmh"])
    yield client
    await client.close()


@pytest.fixture
async def plugins(lvmh):
    """Factory of fake plugins on the lvmh port, closed after the test."""
    from tests.lvmh.helpers import FakePlugin

    made = []

    def make(sid: str, **kw):
        p = FakePlugin(lvmh.ports["lvmh"], sid, **kw)
        made.append(p)
        return p

    yield make
    for p in made:
        await p.close()


@pytest.fixture
async def browsers(lvmh):
    from tests.lvmh.helpers import Browser

    made = []

    async def make(**kw):
        b = await Browser(lvmh.ports["lvmh"], **kw).open()
        made.append(b)
        return b

    yield make
    for b in made:
        await b.close()
