"""A history page and a search read the ``events`` primary key, on SQLite and PostgreSQL alike.

lvmh's ``events`` table is keyed ``(sessionId, seq)`` (lvmh_adapter/persistence.py): a
``WITHOUT ROWID`` table on SQLite (the table is that key's B-tree), a primary key index on
PostgreSQL. The page query (lvmh_adapter/history.py ``PAGE_SQL``) and the search's chunk query
(``SCAN_SQL``) must be range reads of it, newest first, with no scan of the table and no sort,
so that a page costs the same at any length of conversation. The plans are read on a table of
40 sessions of 500 events and a long one of 5,000, analysed, as the planner sees a used daemon's.
"""

from __future__ import annotations

from lvmh_adapter.history import LATEST, PAGE_SQL, SCAN_SQL, SEARCH_TYPES
from lvmh_adapter.persistence import MIGRATIONS

SESSIONS = 40
EVENTS = 500


def _filled(open_store):
    s = open_store()
    s.migrate("lvmh", MIGRATIONS)
    rows = [(f"session-{k:02d}", seq, seq, "message_end" if seq % 3 else "tool_execution_end", '{"x": 1}')
            for k in range(SESSIONS) for seq in range(1, EVENTS + 1)]
    rows += [("long", seq, seq, "message_end" if seq % 3 else "tool_execution_end", '{"x": 1}') for seq in range(1, 5001)]
    s.submit(lambda c: c.executemany(
        "INSERT OR IGNORE INTO events(sessionId, seq, ts, type, payload) VALUES(?,?,?,?,?)", rows)).result(60)
    s.submit(lambda c: c.execute("ANALYZE")).result(60)
    return s


def _plan(s, engine: str, sql: str, params: tuple) -> str:
    if engine == "sqlite":
        return "\n".join(str(r[-1]) for r in s.query("EXPLAIN QUERY PLAN " + sql, params))
    return "\n".join(r[0] for r in s.query("EXPLAIN " + sql, params))


def _uses_the_key(plan: str, engine: str, long: bool) -> None:
    """SQLite reads the key's range backward, whatever the length. PostgreSQL reads only the session's
    range of the key too; a short session it may read whole and sort (a few hundred rows, its
    planner's choice), a long one it reads backward and stops at the limit: the case that matters."""
    if engine == "sqlite":
        assert "USING PRIMARY KEY (sessionId=? AND seq<?)" in plan, plan
        assert "SCAN" not in plan and "TEMP B-TREE" not in plan, plan  # no full scan, no sort
    else:
        assert "events_pkey" in plan and "Seq Scan" not in plan, plan
        assert "Index Cond: ((sessionid = " in plan, plan
        if long:
            assert "Index Scan Backward using events_pkey on events" in plan and "Sort" not in plan, plan


def test_a_history_page_reads_the_primary_key(open_store, engine):
    s = _filled(open_store)
    for sid, before in (("session-07", LATEST), ("session-07", 250), ("session-07", 2), ("long", LATEST), ("long", 3000)):
        _uses_the_key(_plan(s, engine, PAGE_SQL, (sid, before, 201)), engine, sid == "long")
    # and answers the newest page below `before`
    rows = s.query(PAGE_SQL, ("session-07", 250, 3))
    assert [r[0] for r in rows] == ['{"x": 1}'] * 3


def test_a_search_chunk_reads_the_primary_key(open_store, engine):
    s = _filled(open_store)
    for sid, before in (("long", LATEST), ("long", 2500), ("session-07", 250)):
        _uses_the_key(_plan(s, engine, SCAN_SQL, (sid, before, *SEARCH_TYPES, 100 if sid != "long" else 1000)), engine,
                      sid == "long")
    rows = s.query(SCAN_SQL, ("session-07", 10, *SEARCH_TYPES, 4))
    assert [r[0] for r in rows] == [9, 8, 7, 6]
