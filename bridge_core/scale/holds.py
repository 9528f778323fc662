"""What a node answers for besides its runs, inherited by one survivor when it dies.

Several nodes only (docs/scale-out.md "A pi run left open when its node dies"). A front end
may have a duty that must outlive the node that had it: e.g. closing the lvmh side of a pi
run whose plugin left and never came back (lvmh_adapter/cutshort.py). A hold is a row
``(kind, key, node_id)`` of ``cluster_holds`` (the cluster's table, cluster.py MIGRATIONS):

- ``hold(kind, key)``: this node answers for it now (the last one to take it wins);
- ``release(kind, key)``: it lets go (only if it still holds it);
- ``letting_go(kind, key)``: the same inside a write of the caller's, which goes on only if
  this node still held it, so a duty is done once even when another node takes it meanwhile;
- when a node dies, the cluster's sweep claims its holds in the same transaction as its runs
  (``claim``: whoever commits first gets them) and hands each to its kind's heir on that
  survivor (``on_inherit(kind, fn)``: ``fn(key, dead_node)``), which then holds it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from ..bridge.store import BaseStore

log = logging.getLogger("agent_bridge.cluster")

MIGRATION = """
    CREATE TABLE cluster_holds(kind TEXT NOT NULL, key TEXT NOT NULL, node_id TEXT NOT NULL, PRIMARY KEY(kind, key));
    CREATE INDEX cluster_holds_node ON cluster_holds(node_id);
"""
HOLDERS_SQL = "SELECT node_id FROM cluster_holds"  # nodes holding something (the sweep looks at them too)


class Holds:
    def __init__(self, store: "BaseStore", node_id: str):
        self.store = store
        self.node_id = node_id
        self._heirs: dict[str, Callable[[str, str], None]] = {}

    def on_inherit(self, kind: str, fn: Callable[[str, str], None]) -> None:
        """``fn(key, dead_node)`` on the survivor that inherited a dead node's hold of ``kind``."""
        self._heirs[kind] = fn

    async def hold(self, kind: str, key: str) -> None:
        """This node answers for ``(kind, key)`` from now (committed when this returns)."""
        await self.store.write(lambda c: c.execute(
            "INSERT OR REPLACE INTO cluster_holds(kind, key, node_id) VALUES(?,?,?)", (kind, key, self.node_id)))

    def release(self, kind: str, key: str) -> None:
        self.store.execute_later("DELETE FROM cluster_holds WHERE kind=? AND key=? AND node_id=?",
                                 (kind, key, self.node_id))  # fmt: skip

    def letting_go(self, kind: str, key: str) -> Callable[[Any], bool]:
        """For a write of the caller's: let go of ``(kind, key)``; True when this node held it (the
        write then goes on), False when another node took it (the write does nothing more)."""
        me = self.node_id

        def go(c: Any) -> bool:
            return c.execute("DELETE FROM cluster_holds WHERE kind=? AND key=? AND node_id=? RETURNING key",
                             (kind, key, me)).fetchone() is not None  # fmt: skip

        return go

    def mine(self, kind: str) -> set:
        """The keys of ``kind`` this node holds (after a restart under its own name: its old ones)."""
        rows = self.store.query("SELECT key FROM cluster_holds WHERE kind=? AND node_id=?", (kind, self.node_id))
        return {key for (key,) in rows}

    def claim(self, c: Any, dead: str) -> list:
        """In the sweep's transaction: a dead node's holds, now this node's."""
        return c.execute("UPDATE cluster_holds SET node_id=? WHERE node_id=? RETURNING kind, key",
                         (self.node_id, dead)).fetchall()  # fmt: skip

    def inherited(self, rows: list, dead: str) -> None:
        for kind, key in rows:
            heir = self._heirs.get(kind)
            if heir is None:
                self.release(kind, key)
                continue
            try:
                heir(key, dead)
            except Exception:
                log.exception("cluster: inheriting a %s hold of node %s failed", kind, dead)
