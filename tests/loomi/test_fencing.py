"""The fencing rule of a device's epoch (bridge_core/scale/fencing.py, loomi_adapter/cluster.py;
docs/scale-out.md "Fenced ownership"), without a server.

- the rule itself (pure): which keys a node lost;
- every interleaving of an old owner's batches (guard and commit, then the frames sent) with a new
  owner's claim (fence, read the history, number from there): no seq is ever sent by both. The same
  model with the claim's old order (read, then take the epoch) and no guard finds the duplicate;
- the registry's batches on a real SQLite connection: for a device whose epoch moved on, its spans,
  its reply seqs and its seq blocks are refused, and the node is told (``on_lost``) in the write.
"""

from __future__ import annotations

import itertools
import sqlite3

from bridge_core.scale import fencing
from loomi_adapter.cluster import DEVICES, ClusterRegistry
from loomi_adapter.devices import MIGRATIONS, Device
from loomi_adapter.replay import SeqLog

# --- the rule ------------------------------------------------------------------------------------------


def test_a_key_is_lost_when_its_epoch_moved_on_or_its_row_is_gone():
    held = {"kept": 3, "claimed": 3, "revoked": 1}
    assert fencing.lost(held, [("kept", 3), ("claimed", 4)]) == {"claimed", "revoked"}
    assert fencing.lost({}, [("kept", 3)]) == set()
    assert fencing.lost({"kept": 3}, [("kept", 3), ("other", 9)]) == set()


def test_claim_and_guard_in_the_shared_sql():
    c = sqlite3.connect(":memory:")
    c.execute("CREATE TABLE owners(k TEXT PRIMARY KEY, epoch INTEGER NOT NULL)")
    c.executemany("INSERT INTO owners VALUES(?, ?)", [("a", 0), ("b", 5)])
    owners = fencing.Owners("owners", "k")
    assert fencing.claim(c, owners, "a", 0) == 1
    assert fencing.claim(c, owners, "a", 0) is None  # a second claim from the same epoch loses
    assert fencing.guard(c, owners, {"a": 1, "b": 5}) == set()
    assert fencing.guard(c, owners, {"a": 0, "b": 5, "gone": 1}) == {"a", "gone"}


# --- every interleaving ----------------------------------------------------------------------------------

BATCHES = 3  # the old owner's batches, each numbering one seq


def _interleavings(a: list, b: list):
    """Every merge of ``a`` and ``b`` keeping each one's order."""
    n = len(a) + len(b)
    for where in itertools.combinations(range(n), len(b)):
        out, ia, ib = [], iter(a), iter(b)
        for i in range(n):
            out.append(next(ib) if i in where else next(ia))
        yield out


def _run(steps: list, fenced: bool) -> list[int]:
    """The seqs the phone receives, in order. A batch's guard and commit is one step: a claim waits for
    a transaction holding the device's row (the guard's lock), and vice versa."""
    store = {"epoch": 1, "committed": []}
    a_epoch = 1
    ok: dict[int, bool] = {}
    h = None
    phone: list[int] = []
    for step in steps:
        kind, i = step
        if kind == "commit":  # the old owner's batch i: seq i
            passed = not fenced or not fencing.lost({"d": a_epoch}, [("d", store["epoch"])])
            if passed:
                store["committed"].append(i)
            ok[i] = passed
        elif kind == "send":  # its frame leaves once its batch committed (the durability barrier)
            if ok[i]:
                phone.append(i)
        elif kind == "fence":
            store["epoch"] += 1
        elif kind == "read":  # the history: every seq committed
            h = max(store["committed"], default=0)
        elif kind == "number":  # the new owner numbers the next events from the history's seq
            phone += [h + 1, h + 2]
    return phone


def test_no_interleaving_of_an_old_owner_and_a_claim_sends_a_seq_twice():
    old_owner = [step for i in range(1, BATCHES + 1) for step in (("commit", i), ("send", i))]
    claim = [("fence", 0), ("read", 0), ("number", 0)]
    runs = 0
    for steps in _interleavings(old_owner, claim):
        got = _run(steps, fenced=True)
        assert len(got) == len(set(got)), (steps, got)
        runs += 1
    assert runs == 84  # C(9, 3): every one was checked


def test_the_model_finds_the_duplicate_without_the_fence():
    old_owner = [step for i in range(1, BATCHES + 1) for step in (("commit", i), ("send", i))]
    claim = [("read", 0), ("fence", 0), ("number", 0)]  # the claim's order before: read, then take
    bad = [s for s in _interleavings(old_owner, claim) if len(set(got := _run(s, fenced=False))) < len(got)]
    assert bad  # e.g. read, then the old owner commits and sends seq 1, which the new owner gives again


# --- the registry's batches on a store ----------------------------------------------------------------


class EagerStore:
    """A store whose writer runs every queued write the moment it is queued, on one SQLite connection."""

    shared = True
    local_dir = None

    def __init__(self) -> None:
        self.conn = sqlite3.connect(":memory:", isolation_level=None)
        for script in MIGRATIONS:
            self.conn.executescript(script)
        self.ticket = self.processed = self.submitted = 0

    def write_later(self, fn, *, barrier: bool = True) -> None:
        self.ticket = self.submitted = self.submitted + 1
        fn(self.conn)
        self.processed = self.ticket

    def execute_later(self, sql: str, params=(), *, barrier: bool = True) -> None:
        self.write_later(lambda c: c.execute(sql, params), barrier=barrier)

    def hold_from(self, number: int) -> None:
        pass

    def rows(self, sql: str, params=()) -> list[tuple]:
        return self.conn.execute(sql, params).fetchall()


def _registry(stored_epoch: int) -> tuple[EagerStore, ClusterRegistry, Device, list]:
    store = EagerStore()
    store.conn.execute("INSERT INTO loomi_devices(device_id, credential_hash, paired_at, seq_reserved, epoch) "
                       "VALUES('d1', 'h', 0, 100, ?)", (stored_epoch,))
    store.conn.execute("INSERT INTO loomi_epochs(device_id, epoch, start_n, base_seq) VALUES('d1', 1, 0, 0)")
    reg = ClusterRegistry(store, "n1")
    lost: list = []
    reg.on_lost = lost.append
    d = Device("d1", "h", reserved=100, block=8, log_=SeqLog())
    d.epoch = 1  # this node numbers it in epoch 1
    reg.attached["d1"] = d
    reg._held = {"d1": (1, d)}
    return store, reg, d, lost


def test_the_owners_rows_are_written():
    store, reg, d, lost = _registry(stored_epoch=1)
    reg.record([b'"type":"run.delta","n":1}'], 7)
    assert store.rows("SELECT epoch, from_m FROM loomi_spans WHERE device_id='d1'") == [(1, 1)]
    d.skip_to = 99  # a reply while events it had are skipped: its seq goes on the epoch's row
    s = reg.next_seq(d)
    assert store.rows("SELECT reply_seq FROM loomi_epochs WHERE device_id='d1' AND epoch=1") == [(s,)]
    store.execute_later(*reg._reserve_sql(d, 500))
    assert store.rows("SELECT seq_reserved FROM loomi_devices") == [(500,)]
    assert lost == []


def test_a_node_whose_device_was_claimed_elsewhere_writes_nothing_for_it_and_is_told():
    store, reg, d, lost = _registry(stored_epoch=2)  # another node claimed it: epoch 2
    reg.record([b'"type":"run.delta","n":1}'], 7)
    assert store.rows("SELECT m, n FROM loomi_frames") == [(1, 7)]  # the node's own frames: not the device's
    assert store.rows("SELECT * FROM loomi_spans") == []
    assert lost == [d]
    d.skip_to = 99
    reg.next_seq(d)
    assert store.rows("SELECT reply_seq FROM loomi_epochs WHERE device_id='d1' AND epoch=1") == [(0,)]
    store.execute_later(*reg._reserve_sql(d, 500))
    assert store.rows("SELECT seq_reserved FROM loomi_devices") == [(100,)]


def test_a_revoked_device_is_lost_too():
    store, reg, d, lost = _registry(stored_epoch=1)
    store.conn.execute("DELETE FROM loomi_devices")
    reg.record([b'"type":"run.delta","n":1}'], 7)
    assert store.rows("SELECT * FROM loomi_spans") == [] and lost == [d]


def test_the_owner_table_of_loomi():
    assert DEVICES.claim_sql() == "UPDATE loomi_devices SET epoch=? WHERE device_id=? AND epoch=?"
