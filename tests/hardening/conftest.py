"""Hardening suite: the bridge as a separate process, attacked over loopback sockets.

Every test here is marked ``hardening`` (``-m hardening`` runs only these,
``-m "not hardening"`` skips them). ``HARDENING_SCALE`` multiplies the flood
and soak sizes (default 1: the whole suite in a few minutes on two cores).
At the end of the session a summary of the figures is printed.
"""

from __future__ import annotations

import json
import os

import pytest

from .proc import process_factory, raise_fd_limit
from .summary import SUMMARY

HERE = os.path.dirname(os.path.abspath(__file__))


def pytest_collection_modifyitems(config, items):
    for item in items:
        if str(item.fspath).startswith(HERE):
            item.add_marker(pytest.mark.hardening)


def pytest_sessionstart(session):
    SUMMARY.fd_limit = raise_fd_limit()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if SUMMARY.empty():
        return
    terminalreporter.write_sep("=", "hardening summary")
    for line in SUMMARY.lines():
        terminalreporter.write_line(line)
    out = os.environ.get("HARDENING_SUMMARY_JSON")
    if out:
        with open(out, "w") as f:
            json.dump(SUMMARY.as_dict(), f, indent=1)


@pytest.fixture
def bridge_factory(tmp_path):
    """Start bridge processes in tmp_path; each is stopped (SIGTERM) after the test."""
    make, stop_all = process_factory(str(tmp_path))
    yield make
    stop_all()
