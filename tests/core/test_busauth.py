"""The signed bus entries' pure rules (bridge_core/scale/busauth.py): the cluster key, the MAC over the
whole entry, the checks' verdicts and counters, the log once a minute per reason, and the
cluster key's configuration (``AGENT_BRIDGE_CLUSTER_KEY`` / ``[bus] key``). The same rules over a
real Redis: tests/scale/test_bus_auth.py and tests/scale/test_forged_entries.py."""

from __future__ import annotations

import collections
import logging

import pytest

from bridge_core.scale.busauth import LEARN_BACK, LiveNodes, Signer, Verifier, derive_key, fingerprint
from bridge_core.kit.config import bus_key_from
from bridge_core.model.errors import ConfigError

P, L = "pheby-secret-0123456789", "lvmh-token-0123456789"
STREAM = "agent-bridge:inbox:b"
NOW_MS = 1_800_000_000_000


def _entry(signer: Signer, payload: bytes = b'{"t":"req"}', stream: str = STREAM) -> dict:
    h, m = signer.sign(stream, payload)
    return {b"h": h, b"b": payload, b"m": m}


def _signer(key: bytes, node: str = "a", epoch: str = "e1", ms: int = NOW_MS) -> Signer:
    return Signer(key, node, epoch, clock=lambda: ms / 1000)


def test_the_cluster_key_comes_from_both_secrets_or_the_explicit_key_and_only_a_fingerprint_shows():
    key = derive_key(P, L)
    assert len(key) == 32 and key == derive_key(P, L)
    assert len({key, derive_key(P + "x", L), derive_key(P, L + "x"), derive_key(P[:-1], P[-1] + L)}) == 4
    explicit = derive_key(P, L, "an explicit cluster key, long")
    assert explicit != key
    assert derive_key("x" * 16, "y" * 16, "an explicit cluster key, long") == explicit  # the secrets play no part
    fp = fingerprint(key)
    assert len(fp) == 8 and fp not in key.hex() and fp != fingerprint(explicit)
    with pytest.raises(ValueError):
        derive_key("", L)


def test_a_genuine_entry_passes_once_and_every_change_to_it_is_dropped_by_reason():
    key = derive_key(P, L)
    v = Verifier(key)
    signer = _signer(key)
    first = _entry(signer)
    assert v.check(STREAM, f"{NOW_MS}-0".encode(), first) == ("a", "e1")
    assert v.check(STREAM, f"{NOW_MS}-1".encode(), first) is None  # the same entry again
    tampered = {**_entry(signer), b"b": b'{"t":"req","x":1}'}
    assert v.check(STREAM, f"{NOW_MS}-2".encode(), tampered) is None
    renamed = _entry(signer)
    renamed[b"h"] = renamed[b"h"].replace(b'"a"', b'"c"')
    assert v.check(STREAM, f"{NOW_MS}-3".encode(), renamed) is None
    assert v.check("agent-bridge:inbox:c", f"{NOW_MS}-4".encode(), _entry(signer)) is None  # moved
    assert v.check(STREAM, b"0-5", {b"c": b'{"from":"ghost"}'}) is None
    assert v.check(STREAM, f"{NOW_MS}-6".encode(), _entry(_signer(b"x" * 32))) is None  # another key
    assert v.check(STREAM, f"{NOW_MS + 10_001}-0".encode(), _entry(signer)) is None  # 10 s after it was signed
    assert v.check(STREAM, f"{NOW_MS - 5_001}-0".encode(), _entry(signer)) is None  # signed 5 s ahead of Redis
    later = _entry(signer)
    assert v.check(STREAM, f"{NOW_MS + 10_000}-1".encode(), later) == ("a", "e1")  # within the window
    assert v.check(STREAM, f"{NOW_MS + 10_000}-2".encode(), _entry(_signer(key, epoch="e2"))) == ("a", "e2")
    assert v.dropped == collections.Counter(replayed=1, bad_mac=3, wrong_stream=1, unsigned=1, stale=1, early=1)


def test_an_entry_held_back_after_a_later_one_of_its_sender_is_dropped():
    key = derive_key(P, L)
    v, signer = Verifier(key), _signer(key)
    held, later = _entry(signer), _entry(signer)
    assert v.check(STREAM, f"{NOW_MS}-0".encode(), later) == ("a", "e1")
    assert v.check(STREAM, f"{NOW_MS}-1".encode(), held) is None
    assert v.dropped == collections.Counter(replayed=1)
    assert LEARN_BACK == 15.0  # what a starting node reads back: the window and the clock allowance


def test_drops_are_logged_once_a_minute_per_reason_without_the_secrets(caplog):
    key = derive_key(P, L)
    t = [0.0]
    v = Verifier(key, clock=lambda: t[0])
    with caplog.at_level(logging.WARNING, logger="agent_bridge.bus"):
        for i in range(5):
            v.check(STREAM, b"1-0", {b"c": b'{"from":"ghost\\nINFO fake line"}'})
            v.check(STREAM, b"1-0", _entry(_signer(b"x" * 32), stream=STREAM))
        t[0] = 61.0
        v.check(STREAM, b"1-0", {b"node": b"ghost"})
    lines = caplog.text.splitlines()
    assert len(lines) == 3 and v.dropped == collections.Counter(unsigned=6, bad_mac=5)
    assert "claiming to be from 'ghost\\nINFO fake line'" in lines[0] and "(1 unsigned so far)" in lines[0]
    assert "(1 bad_mac so far)" in lines[1] and "(6 unsigned so far)" in lines[2]
    for secret in (P, L, key.hex()):
        assert secret not in caplog.text


def test_a_node_counts_as_live_while_its_epoch_was_confirmed_lately():
    live = LiveNodes(grace=6.0)
    assert not live.known("b", "e1", 0.0)
    live.confirm("b", "e1", 10.0)
    assert live.known("b", "e1", 16.0) and not live.known("b", "e1", 16.1) and not live.known("b", "e0", 10.0)
    assert live.may_ask("b", 20.0) and not live.may_ask("b", 20.2) and live.may_ask("b", 20.5)


def test_the_cluster_key_set_in_the_environment_or_the_file_never_echoed():
    assert bus_key_from({}, None) == ""
    assert bus_key_from({}, "from the config file, long") == "from the config file, long"
    assert bus_key_from({"AGENT_BRIDGE_CLUSTER_KEY": "from the environment, long"}, "file") == \
        "from the environment, long"  # fmt: skip
    for env, toml, name in (({"AGENT_BRIDGE_CLUSTER_KEY": "short-secret"}, None, "AGENT_BRIDGE_CLUSTER_KEY"),
                            ({}, "short-secret", "bus.key"), ({}, 12345678901234567, "bus.key")):  # fmt: skip
        with pytest.raises(ConfigError) as err:
            bus_key_from(env, toml)
        assert err.value.message.startswith(name) and "short-secret" not in err.value.message
