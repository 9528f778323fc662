"""A fresh server's first request of each type does not wait for cattrs to write its parser.

cattrs writes and compiles a class's structure function at its first use
(0.5-1 ms). The front ends make them when they start (``wire.prepare_hooks``,
docs/architecture.md, "One command, socket to agent"); these tests watch
Python's ``compile`` audit event while a fresh server answers its first
``hello`` and its first message over a real socket: cattrs names the code it
generates ``<cattrs generated ...>``, and none may be compiled then.
"""

from __future__ import annotations

import sys

import pytest

from bridge_core.model.wire import prepare_hooks, strict_converter
from loomi_adapter import codec as loomi_codec
from pheby_adapter import codec as pheby_codec
from tests.loomi.helpers import pair
from tests.pheby.client import PhebyClient

_watch: list = []  # the compiles seen while a list is in it (an audit hook cannot be removed)
_hooked = False


def _audit(event: str, args: tuple) -> None:
    if event == "compile" and _watch:
        name = args[1] if len(args) > 1 else ""
        if "cattrs" in str(name):
            _watch[0].append(str(name))


@pytest.fixture
def compiled():
    """The names of the cattrs functions compiled while the test runs."""
    global _hooked
    if not _hooked:
        sys.addaudithook(_audit)
        _hooked = True
    seen: list[str] = []
    _watch.append(seen)
    yield seen
    _watch.clear()


async def test_loomi_first_hello_and_send_compile_nothing(service_factory, monkeypatch, compiled):
    # a converter that has parsed nothing yet, as in a fresh process (other tests used the module's)
    monkeypatch.setattr(loomi_codec, "CONVERTER", loomi_codec.make_converter())
    svc = await service_factory(adapters=("loomi",))
    compiled.clear()  # the front end's start made them
    c, _ = await pair(svc)
    await c.send("session.send", {"text": "hi there", "request_id": "r1"})
    frames = await c.recv_until(lambda f: f["type"] == "run.completed")
    assert any(f["type"] == "ack" and f["payload"]["ok"] for f in frames)
    assert compiled == []
    await c.close()


async def test_pheby_first_hello_and_send_compile_nothing(service_factory, monkeypatch, compiled):
    monkeypatch.setattr(pheby_codec, "_conv", strict_converter())
    svc = await service_factory(adapters=("pheby",))
    compiled.clear()
    c = await PhebyClient.connect(svc.ports["pheby"])
    cid = await c.create()
    await c.send({"type": "chat.send", "conversation_id": cid, "text": "hello there", "request_id": "r6"})
    frames = await c.collect_until("run.finished")
    assert frames[0]["type"] == "run.accepted"
    assert compiled == []
    await c.close()


def test_the_watch_sees_a_parser_being_written(compiled):
    """The audit event is how cattrs' code generation shows: a converter's first parse of a class."""
    conv = strict_converter()
    prepare_hooks(conv, [pheby_codec.Ping])
    assert any("Ping" in name for name in compiled)
