"""Fenced ownership of a per-client sequence across nodes (the rule and its SQL; docs/scale-out.md,
"Fenced ownership").

A sequence the cluster numbers for one client (a Loomi device, a pi session; an lvmh browser's
seqs are its session's and need no owner of their own: docs/scale-out.md) is numbered by one node at
a time, its *owner*, under an *epoch*: a fencing token kept in the shared store (ZooKeeper-style
fencing tokens, Kafka's producer epochs). The epoch lives in a column of the client's row
(``Owners``: its table, key and epoch column):

- **claim**: one conditional write, ``epoch -> epoch + 1`` where the epoch is still the one read,
  committed *before* the new owner reads the sequence's state (two claims never both win);
- **guard**: every transaction of an owner that makes one of its seqs durable (a seq block, replay
  rows, a reply's record) first locks the rows of the clients it numbers with an update that
  changes nothing and reads their epochs back, in the same transaction. A claim committed before
  makes the guard see the new epoch; a claim started after waits for the guard's transaction to end
  (the row lock), and the state it then reads holds everything that transaction wrote. A key whose
  epoch moved on, or whose row is gone (revoked), is *lost*: the transaction writes nothing for it,
  and the node drops whatever it queued for that client (no frame behind the refused write leaves:
  the durability barrier) and closes its socket without a seq-bearing frame;
- so an owner never sends a seq that its successor also gives: whatever it sent was committed under
  a guard that passed before the claim, and the claim's read sees it.

The decision itself (``lost``) is pure; ``claim`` and ``guard`` run in a write of the store's
writer thread (a function of its connection), in the SQL both engines share.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional

import attrs

GUARD_CHUNK = 500  # keys per guard statement (a statement's parameters stay well under every engine's limit)


@attrs.frozen
class Owners:
    """Where a kind of client keeps its epoch: ``table`` keyed by ``key``, its epoch in ``epoch``."""

    table: str
    key: str
    epoch: str = "epoch"

    def claim_sql(self) -> str:
        return f"UPDATE {self.table} SET {self.epoch}=? WHERE {self.key}=? AND {self.epoch}=?"

    def guard_sql(self, n: int) -> str:
        marks = ",".join("?" * n)
        return (f"UPDATE {self.table} SET {self.epoch}={self.epoch} WHERE {self.key} IN ({marks}) "
                f"RETURNING {self.key}, {self.epoch}")


def lost(held: Mapping[Any, int], stored: Iterable[tuple[Any, int]]) -> set:
    """The keys ``held`` (key -> the epoch this node numbers it in) that this node no longer owns:
    the store has another epoch for them (a later claim) or no row (revoked). The fencing rule."""
    now = dict(stored)
    return {k for k, e in held.items() if now.get(k) != e}


def claim(c: Any, owners: Owners, key: Any, seen: int) -> Optional[int]:
    """In a write: take ``key`` from epoch ``seen``; the new epoch, or None when another claim (or a
    revoke) came first."""
    epoch = seen + 1
    cur = c.execute(owners.claim_sql(), (epoch, key, seen))
    return epoch if cur.rowcount == 1 else None


def guard(c: Any, owners: Owners, held: Mapping[Any, int]) -> set:
    """In a write, before anything it writes for the keys ``held``: lock their rows and return the
    keys lost (``lost``); the write must then write nothing for those."""
    keys = sorted(held)  # one order on every node (an index scan then locks the rows in it)
    stored: list[tuple[Any, int]] = []
    for i in range(0, len(keys), GUARD_CHUNK):
        part = keys[i:i + GUARD_CHUNK]
        stored += c.execute(owners.guard_sql(len(part)), part).fetchall()
    return lost(held, stored)
