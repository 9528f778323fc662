"""The replay window keeps the event's shared tail, not a frame per device: the same frames, byte for byte.

``replay.Numbering`` keeps each event once per device as ``(seq, tail)`` (the node's body without its
``{``, one object shared by every device's window) and splices a frame only for a device with a
connection when ``live_only`` (one node numbers its offline devices too). What a device is sent and
what it is replayed must not change: the window's frames are the frames sent, and an offline device's
replay is what it would have been sent.
"""

from __future__ import annotations

from typing import Any, Optional

from bridge_core.model.seqalloc import SeqReservation
from loomi_adapter import codec
from loomi_adapter.replay import Numbering, SeqLog


class Device:
    def __init__(self, device_id: str, conn: Any = None):
        self.device_id = device_id
        self.log = SeqLog(size=4)
        self.seqs = SeqReservation(1 << 40, 1 << 40)
        self.offset: Optional[int] = None
        self.skip_to = -1
        self.conn = conn


def tails(i: int) -> list[bytes]:
    return [b[1:] for b in (codec.body("notification", {"text": f"n{i}"}, ts=1.0),)]


def test_the_window_replays_the_frames_sent_and_an_offline_device_gets_its_frames_only_on_replay():
    on, off = Device("on", conn=object()), Device("off")
    numbering = Numbering({"on": on, "off": off}, reserve=lambda d: None, live_only=True)
    sent: list[tuple[str, bytes]] = []
    for i in range(6):
        if i == 3:
            numbering.next_seq(on)  # a reply takes a seq between two events (not kept)
        _, _, out = numbering.record(tails(i), i)
        sent += [(d.device_id, f) for d, f in out]
    assert [d for d, _ in sent] == ["on"] * 6  # no frame is made for the device offline
    on_frames = [f for _, f in sent]
    assert on.log.window == [(int(f[7:f.index(b",")]), f) for f in on_frames[-4:]]
    assert [s for s, _ in on.log.window] == [3, 5, 6, 7] and on.log.floor == 2
    # the offline device's replay: its frames as a connected one would have had them, marked replayed
    want = [codec.stamp_tail(s, tails(i)[0]) for i, s in zip(range(2, 6), range(3, 7))]
    assert off.log.window == list(zip(range(3, 7), want))
    assert off.log.resume(2).frames == [codec.mark_replayed(f) for f in want]
    # the same numbering making every device's frame: the same bytes
    a, b = Device("a", conn=object()), Device("b")
    every = Numbering({"a": a, "b": b}, reserve=lambda d: None)
    made = {}
    for i in range(6):
        for d, f in every.record(tails(i), i)[2]:
            made.setdefault(d.device_id, []).append(f)
    assert made["b"][-4:] == want and b.log.window == off.log.window


def test_a_window_mixing_kept_frames_and_tails_gives_frames():
    log = SeqLog(size=4)
    frame = codec.stamp(codec.body("notification", {"text": "restored"}, ts=1.0), 1)
    log.keep(1, frame)  # a frame, as a restart's rows or a claim give it
    tail = tails(2)[0]
    log.seq = 2
    log.kept.append((2, tail))  # a tail, as Numbering keeps it
    assert log.window == [(1, frame), (2, codec.stamp_tail(2, tail))]
