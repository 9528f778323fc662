"""Fixtures for the Hermes tests: one real Hermes gateway for the whole e2e module."""

from __future__ import annotations

import pytest

from tests.peers import missing_peer

from .gateway import Gateway, unavailable_reason


@pytest.fixture(scope="session")
def hermes_gateway(tmp_path_factory):
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(missing_peer("Hermes", reason))
    gw = Gateway(str(tmp_path_factory.mktemp("hermes-e2e")))
    try:
        gw.start()
    except Exception:
        gw.stop()
        raise
    yield gw
    gw.stop()
