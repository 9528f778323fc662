"""The rows of ``cluster_runs`` (bridge_core/scale/cluster.py ``MIGRATIONS``): which node runs which run, and the
one running run a conversation may have (docs/scale-out.md "Several live nodes", "One run per conversation")."""

from __future__ import annotations

from typing import Any, Optional


def run_started(c: Any, run_id: str, cid: str, node: str) -> None:
    """The row of a run this node started (claimed already when a send started it; a run a pi
    plugin began itself was not: its node is the only one hosting the session, and any other
    running row of the conversation is one whose end is still on its way)."""
    c.execute("UPDATE cluster_runs SET state='done' WHERE conversation_id=? AND state='running' AND run_id!=?",
              (cid, run_id))  # fmt: skip
    c.execute("INSERT OR REPLACE INTO cluster_runs(run_id, conversation_id, node_id, state) VALUES(?,?,?,'running')",
              (run_id, cid, node))  # fmt: skip


def taken(c: Any, me: str, owner: str, only: Optional[list] = None) -> list:
    """``owner``'s running claims (a dead node's, or a restart's lost ones: adopt.py), or those of them among
    ``only``, moved to ``me`` and marked done: this node closes their runs now, and a node taking one over
    (``move_run``) finds it ended. (run_id, conversation_id) of those won: whoever commits first gets the rows."""
    among, args = ("", ()) if only is None else (f" AND run_id IN ({','.join('?' * len(only))})", tuple(only))
    return c.execute("UPDATE cluster_runs SET node_id=?, state='done' WHERE node_id=? AND state='running'" + among +
                     " RETURNING run_id, conversation_id", (me, owner, *args)).fetchall()  # fmt: skip


def holds_conversation(c: Any, run_id: str, cid: str, node: str) -> bool:
    """``run_id`` claimed for ``node`` as ``cid``'s running run (a row inserted unless it has one): does it
    hold the conversation? The unique index on a conversation's running row lets one run in."""
    c.execute("INSERT OR IGNORE INTO cluster_runs(run_id, conversation_id, node_id, state) "
              "VALUES(?,?,?,'running')", (run_id, cid, node))  # fmt: skip
    row = c.execute("SELECT run_id FROM cluster_runs WHERE conversation_id=? AND state='running'",
                    (cid,)).fetchone()  # fmt: skip
    return row is not None and row[0] == run_id
