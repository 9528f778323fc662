"""A Loomi device's request memory (loomi_adapter/idempotency.py) on its own: no sockets, no loop."""

from __future__ import annotations

from loomi_adapter.idempotency import Entry, RequestCache

KEY = ("chat.send", "req-1")


def test_a_new_request_runs_and_a_repeat_in_flight_waits_on_its_waiter():
    c = RequestCache()
    assert c.lookup(KEY) is None
    waiter = object()
    c.start(KEY, waiter)
    assert c.lookup(KEY) == Entry(False, waiter)


def test_a_success_is_given_to_every_repeat():
    c = RequestCache()
    waiter = object()
    c.start(KEY, waiter)
    c.succeeded(KEY, waiter, {"message_id": "m1"})
    assert c.lookup(KEY) == Entry(True, {"message_id": "m1"})
    c.failed(KEY, waiter)  # a late report of the same run changes nothing
    assert c.lookup(KEY) == Entry(True, {"message_id": "m1"})


def test_a_failure_is_forgotten_so_a_retry_runs_again():
    c = RequestCache()
    waiter = object()
    c.start(KEY, waiter)
    c.failed(KEY, waiter)
    assert c.lookup(KEY) is None and len(c) == 0


def test_keys_are_per_type_and_request_id():
    c = RequestCache()
    c.start(("chat.send", "r"), 1)
    assert c.lookup(("task.cancel", "r")) is None


def test_only_the_newest_keys_are_kept_and_a_forgotten_run_reports_into_nothing():
    c = RequestCache(keep=3)
    waiters = [object() for _ in range(4)]
    for i, w in enumerate(waiters):
        c.start(("t", i), w)
    assert len(c) == 3 and c.lookup(("t", 0)) is None
    c.succeeded(("t", 0), waiters[0], "late")  # pushed out while running: not brought back
    assert c.lookup(("t", 0)) is None
    assert c.lookup(("t", 3)) == Entry(False, waiters[3])


def test_a_report_from_a_replaced_run_does_not_touch_the_new_one():
    c = RequestCache()
    first, second = object(), object()
    c.start(KEY, first)
    c.failed(KEY, first)
    c.start(KEY, second)  # the retry
    c.succeeded(KEY, first, "stale")
    c.failed(KEY, first)
    assert c.lookup(KEY) == Entry(False, second)
