"""The lvmh session registry (lvmh_adapter/registry.py) on its own: seq books and ownership, no sockets."""

from __future__ import annotations

from types import SimpleNamespace

from lvmh_adapter.registry import SEQ_BLOCK, Claim, SessionRecord, SessionRegistry


def _row(sid, source, last_seq, reserved, info=None, last_event_at=None):
    return SimpleNamespace(id=sid, source=source, info=info or {}, last_seq=last_seq, reserved=reserved,
                           last_event_at=last_event_at)


def _conn(credential, closed=False):
    return SimpleNamespace(principal=SimpleNamespace(credential=credential), ws=SimpleNamespace(closed=closed),
                           replaced=False)


def test_a_bridge_conversation_numbers_on_and_reserves_a_block_ahead():
    rec = SessionRecord("c1", "bridge", {}, high=0)
    assert rec.next_bridge_seq() == (1, 1 + SEQ_BLOCK)  # the first seq: record a block
    for want in range(2, SEQ_BLOCK // 2 + 2):
        assert rec.next_bridge_seq() == (want, None)  # covered
    seq, reserve = rec.next_bridge_seq()
    assert seq == SEQ_BLOCK // 2 + 2 and reserve == seq + SEQ_BLOCK  # half a block left: the next one


def test_plugin_events_are_new_once_and_resends_are_not():
    rec = SessionRecord("s1", "plugin", {}, high=3)
    assert rec.plugin_event(3, 100) is False  # already stored before
    assert rec.plugin_event(4, 100) is True and rec.high == 4 and rec.top == 4 and rec.last_event_at == 100
    assert rec.plugin_event(4, 200) is False
    assert rec.plugin_event(5, 50) is True and rec.last_event_at == 100  # never moves back in time


def test_plugin_deltas_move_top_and_record_a_reservation_past_it():
    rec = SessionRecord("s1", "plugin", {}, high=4)
    assert rec.plugin_delta(4) == (False, None)  # not above what is stored
    assert rec.plugin_delta(5) == (True, 5 + SEQ_BLOCK)
    assert rec.top == 5 and rec.high == 4  # deltas are never stored: high stays
    assert rec.plugin_delta(6) == (True, None)  # covered by the reservation
    assert rec.plugin_delta(6) == (True, None)  # the same delta again is shown (not above top: no new reservation)
    assert rec.plugin_delta(5 + SEQ_BLOCK + 1) == (True, 5 + SEQ_BLOCK + 1 + SEQ_BLOCK)


def test_the_daemon_numbers_its_closing_events_above_every_seq_the_plugin_used():
    rec = SessionRecord("s1", "plugin", {}, high=10)
    rec.plugin_delta(14)
    assert list(rec.daemon_seqs(3)) == [15, 16, 17]
    assert rec.high == rec.top == 17
    assert list(rec.daemon_seqs(0)) == [] and rec.high == 17


def test_welcome_moves_high_up_only():
    rec = SessionRecord("s1", "plugin", {}, high=5)
    rec.welcomed(3)
    assert rec.high == 5
    rec.welcomed(9)
    assert rec.high == 9


def test_restore_after_a_restart():
    reg = SessionRegistry()
    reg.restore([_row("c1", "bridge", 7, 1007, {"name": "x"}), _row("s1", "pi", 4, 1020, {"raw": 1}, 99)],
                lambda raw, sid: {"clean": sid})
    bridge, plugin = reg.get("c1"), reg.get("s1")
    assert (bridge.source, bridge.high, bridge.info) == ("bridge", 1007, {"name": "x"})  # numbering goes on above
    assert bridge.next_bridge_seq() == (1008, 1008 + SEQ_BLOCK)
    assert (plugin.source, plugin.high, plugin.top, plugin.reserved) == ("plugin", 4, 1020, 1020)
    assert plugin.info == {"clean": "s1"} and plugin.last_event_at == 99
    assert list(plugin.daemon_seqs(1)) == [1021]  # never a seq an unstored delta may have used


def test_add_and_pop():
    reg = SessionRegistry()
    rec = reg.add("s2", "plugin", {}, 12)
    assert reg.records == {"s2": rec} and rec.high == rec.top == rec.reserved == 12
    assert reg.pop("s2") is rec and reg.pop("s2") is None


def test_ownership_same_credential_replaces_another_is_refused_while_live():
    rec = SessionRecord("s1", "plugin", {})
    a = _conn("k1")
    assert rec.claim(a) == (Claim.OURS, None)
    rec.conn = a
    assert rec.claim(a) == (Claim.OURS, None)
    assert rec.claim(_conn("k2")) == (Claim.TAKEN, None) and rec.conn is a and not a.replaced
    b = _conn("k1")
    assert rec.claim(b) == (Claim.REPLACE, a) and a.replaced and rec.conn is None
    rec.conn = b
    b.ws.closed = True  # a closed socket of another credential no longer holds the session
    c = _conn("k2")
    assert rec.claim(c) == (Claim.REPLACE, b)
