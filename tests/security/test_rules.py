"""The pure rules of bridge_core.kit.security: slots for wrong guesses, the unauthenticated pool, Host
parsing, the bearer parser, secret strength and the descriptor limit."""

from __future__ import annotations

import resource

from bridge_core.kit.security import (
    MIN_SECRET_LENGTH,
    UnauthPool,
    WrongSlots,
    bearer_token,
    host_is_loopback,
    normalize_address,
    raise_nofile_limit,
    weak_secret_reason,
)


def test_wrong_slots_answer_one_at_once_then_rate_per_second():
    slots = WrongSlots(rate=20.0)
    delays = [slots.delay("a", 100.0) for _ in range(41)]
    assert delays[0] == 0.0
    assert abs(delays[40] - 2.0) < 1e-9  # 41 answers take 2 s: 1 + 20 per second
    assert slots.delay("b", 100.0) == 0.0  # another address is not affected
    assert slots.delay("a", 200.0) == 0.0  # once the backlog has passed, the next is answered at once


def test_wrong_slots_memory_is_bounded_under_an_address_flood():
    slots = WrongSlots(rate=20.0, max_addresses=1000)
    for i in range(100_000):
        slots.delay(f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}", 1.0 + i * 1e-6)
    assert len(slots) <= 1000


def test_unauth_pool_caps_per_address_and_in_all():
    pool = UnauthPool(cap=2, total_cap=3)
    assert pool.enter("a") and pool.enter("a") and not pool.enter("a")
    assert pool.enter("b") and not pool.enter("c")  # the total is reached
    pool.leave("a")
    assert pool.enter("c") and pool.count("a") == 1 and pool.refused == 2
    for addr in ("a", "b", "c", "a"):  # one leave too many is ignored
        pool.leave(addr)
    assert pool.total == 0 and pool.count("a") == 0


def test_host_header_must_name_loopback():
    for ok in ("127.0.0.1", "127.0.0.1:8621", "localhost", "LocalHost:1", "[::1]", "[::1]:8621"):
        assert host_is_loopback(ok), ok
    for bad in (None, "", "rebind.evil.example", "rebind.evil.example:8621", "127.0.0.2", "0.0.0.0", "::1",
                "[::1]x", "127.0.0.1:x", "127.0.0.1.evil.example", "localhost.evil.example:80", "[::ffff:127.0.0.1]"):
        assert not host_is_loopback(bad), bad


def test_addresses_and_bearer():
    assert normalize_address("::ffff:127.0.0.1") == "127.0.0.1" and normalize_address("::1") == "::1"

    class Req:
        def __init__(self, value):
            self.headers = {} if value is None else {"Authorization": value}

    assert bearer_token(Req("Bearer abc")) == "abc" and bearer_token(Req("bearer  abc ")) == "abc"
    for none in (None, "", "Bearer", "Bearer   ", "Basic abc", "abc"):
        assert bearer_token(Req(none)) is None, none
    assert bearer_token(Req("ApiKey k"), ("bearer", "apikey")) == "k"


def test_weak_secret_reason_names_the_variable_never_the_value():
    reason = weak_secret_reason("PHEBY_SECRET", "tooshort")
    assert reason and "PHEBY_SECRET" in reason and "tooshort" not in reason and str(MIN_SECRET_LENGTH) in reason
    assert weak_secret_reason("LVMH_TOKEN", "x" * MIN_SECRET_LENGTH) is None
    assert weak_secret_reason("LVMH_TOKEN", None) is None and weak_secret_reason("LVMH_TOKEN", "") is None


def test_raise_nofile_limit_reaches_the_hard_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    got = raise_nofile_limit()
    assert got == resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= soft
    if hard != resource.RLIM_INFINITY:
        assert got == hard
