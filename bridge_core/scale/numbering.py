"""The cluster-wide number never goes back (docs/scale-out.md "The cluster-wide number").

Every event the bus delivers has its number ``n``, the same on every node; front ends derive
cursors and seqs from it. Redis keeps the counter, and may lose it (a restart without
persistence): a reservation above every ``n`` given is kept in the store (``cluster_number``,
renewed a block ahead as in ``model/seqalloc.SeqReservation``), and the bus raises its
counter above it when Redis lost it (redisbus.py).
"""

from __future__ import annotations

from typing import Any

from ..model.seqalloc import SeqReservation
from .bus import Bus

NUMBER_BLOCK = 1 << 20  # numbers reserved ahead; renewed half a block before they run out
# the reservation's own migrations: the table is the cluster's, not the core's
NUMBER_MIGRATIONS = [
    """
    CREATE TABLE cluster_number(id INTEGER PRIMARY KEY, used INTEGER NOT NULL, mark INTEGER NOT NULL);
    INSERT INTO cluster_number(id, used, mark) VALUES(1, 0, 0);
    """,
]
_NUMBER_SQL = "UPDATE cluster_number SET used=MAX(used, ?), mark=MAX(mark, ?) WHERE id=1"


class ClusterNumber:
    """The store's reservation above every ``n`` given, and the bus's floor kept above it."""

    def __init__(self, store: Any, bus: Bus):
        self.store = store
        self.bus = bus
        self.reservation = SeqReservation(NUMBER_BLOCK)  # ``n`` past its ``limit``: ``renew``

    async def hold(self) -> None:
        """Before the bus starts: what the store knows of ``n`` (a number given, and the reservation
        above all), for the bus to raise its counter if Redis lost it."""
        store = self.store
        await store.amigrate("cluster_number", NUMBER_MIGRATIONS)
        row = store.query_one("SELECT used, mark FROM cluster_number WHERE id=1")
        used, mark = (int(row[0]), int(row[1])) if row is not None else (0, 0)
        self.bus.seen = max(self.bus.seen, used)
        self.bus.floor = max(self.bus.floor, mark)
        self.reservation.set(self.bus.floor)

    async def reserve(self) -> None:
        """After the bus started (its counter raised if it had to be): the reservation renewed if due,
        awaited before this node publishes anything."""
        seen = self.bus.seen
        mark = self.reservation.need(seen) or self.reservation.reserved
        await self.store.write(lambda c: c.execute(_NUMBER_SQL, (seen, mark)))
        self.bus.floor = max(self.bus.floor, mark)

    def renew(self, n: int) -> None:
        """``n`` came within half a block of the reservation: the next one, recorded now. Every node
        sees every ``n`` and renews it alike (the store keeps the highest); the bus uses it at once."""
        mark = self.reservation.need(n)
        if mark is None:
            return
        self.bus.floor = max(self.bus.floor, mark)
        self.store.execute_later(_NUMBER_SQL, (n, mark))

    def note_used(self) -> None:
        """A clean stop: the store learns how far ``n`` went (a counter behind it is then seen as lost)."""
        if self.bus.seen > 0:
            self.store.execute_later(_NUMBER_SQL, (self.bus.seen, self.reservation.reserved))
