import pytest


@pytest.fixture
async def loomi(service_factory):
    """A running service with only the Loomi front end."""
    return await service_factory(adapters=("loomi",))
