"""Fixtures for the Hermes tests: one real Hermes gateway for the whole e2e module.

The unit tests import the plugin under its installed name, ``agent_bridge_cli`` (``cli/``,
docs/hermes.md). An editable install points that name at the checkout it was installed
from, which need not be this one: this conftest loads it from this checkout's ``cli/`` first,
so the tests here always test the code beside them (the e2e gateway does the same with its
``PYTHONPATH``, ``gateway.checkout_path``).
"""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

from tests.peers import missing_peer

from .gateway import ROOT, Gateway, unavailable_reason

CLI = os.path.join(ROOT, "cli")


def _this_checkouts_cli() -> None:
    loaded = sys.modules.get("agent_bridge_cli")
    if loaded is not None:
        where = os.path.dirname(os.path.realpath(loaded.__file__ or ""))
        if where != os.path.realpath(CLI):
            raise RuntimeError(f"agent_bridge_cli was imported from {where}, not this checkout's {CLI}")
        return
    spec = importlib.util.spec_from_file_location(
        "agent_bridge_cli", os.path.join(CLI, "__init__.py"), submodule_search_locations=[CLI]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["agent_bridge_cli"] = module
    spec.loader.exec_module(module)


_this_checkouts_cli()


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
