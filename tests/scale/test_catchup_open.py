"""An open gap (catchup.OPEN): Redis lost its keys and no entry showed the node its gap (seed 4107). Pure."""

from __future__ import annotations

import orjson

from bridge_core.scale import catchup


def _fields(n: int, *events: dict) -> dict:
    return {b"n": str(n).encode(), b"b": orjson.dumps([["e", e] for e in events])}


def test_an_open_gap_takes_every_entry_above_what_was_delivered_and_no_answers_highest_number():
    gap = catchup.Gap("r1", 10, catchup.OPEN)
    assert gap.open
    gap.add("n1", [[11, [["e", {"i": 11}]]], [12, [["e", {"i": 12}], ["e", {"i": 13}]]]], seen=1048600)
    assert [n for n, _, _ in gap.recovered()] == [11, 12]
    assert gap.lost() == []  # a node's highest number may be past the loss's jump: never taken for events gone
    assert gap.known()[0] == 13  # numbering goes on above the highest number found


def test_an_open_gap_ends_at_the_first_entry_read_meanwhile():
    gap = catchup.Gap("r1", 10, catchup.OPEN)
    gap.add("n1", [[11, [["e", {}]]], [1048577, [["e", {}]]]])
    gap.held.append(("n1", {b"n": b"1048577", b"b": b'[["r", {}]]'}))  # a relay alone shows nothing
    gap.held.append(("n1", _fields(1048577, {})))
    gap.shown()
    assert not gap.open and gap.hi == 1048577
    assert [n for n, _, _ in gap.recovered()] == [11]  # what was read meanwhile is delivered from there, once


def test_a_closed_gap_is_not_moved():
    gap = catchup.Gap("r1", 10, 20)
    gap.held.append(("n1", _fields(30, {})))
    gap.shown()
    assert gap.hi == 20
