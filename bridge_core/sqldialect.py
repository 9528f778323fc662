"""The PostgreSQL dialect hook (pure: no I/O; docs/scale-out.md "One schema, two dialects").

Every component writes its migrations and statements once, in the SQL both engines
share, with SQLite's ``?`` placeholders. The PostgreSQL store runs them through the
functions below; the SQLite store runs them as written. What differs:

- placeholders: ``?`` becomes ``%s`` (and a literal ``%`` becomes ``%%``);
- ``INSERT OR IGNORE`` becomes ``INSERT ... ON CONFLICT DO NOTHING``;
- ``INSERT OR REPLACE`` becomes an upsert on the table's primary key that sets every
  named column (and, where the table has one, a fresh ``rowid``, as SQLite's replace does);
- in migrations: ``REAL`` is ``DOUBLE PRECISION`` (PostgreSQL's REAL is 4 bytes),
  ``INTEGER`` is ``BIGINT``, ``BLOB`` is ``BYTEA``; a table SQLite gives an implicit rowid
  gets a ``rowid BIGSERIAL`` column (``ORDER BY rowid`` keeps insertion order), and
  ``WITHOUT ROWID`` is dropped.
"""

from __future__ import annotations

import functools
import re
from typing import Optional, Sequence

_WORD_TYPES = (
    (re.compile(r"\bINTEGER\s+PRIMARY\s+KEY\b", re.I), "BIGINT PRIMARY KEY"),
    (re.compile(r"\bREAL\b", re.I), "DOUBLE PRECISION"),
    (re.compile(r"\bINTEGER\b", re.I), "BIGINT"),
    (re.compile(r"\bBLOB\b", re.I), "BYTEA"),
)
_CREATE_TABLE = re.compile(r"^\s*CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)\s*\(", re.I)
_WITHOUT_ROWID = re.compile(r"\)\s*WITHOUT\s+ROWID\s*$", re.I)
_INTEGER_PK = re.compile(r"\bINTEGER\s+PRIMARY\s+KEY\b", re.I)
_OR_IGNORE = re.compile(r"^\s*INSERT\s+OR\s+IGNORE\s+INTO\b", re.I)
_OR_REPLACE = re.compile(r"^\s*INSERT\s+OR\s+REPLACE\s+INTO\s+(\w+)\s*\(([^)]*)\)", re.I)


def placeholders(sql: str) -> str:
    """``?`` outside quoted text becomes ``%s``; every ``%`` is doubled (psycopg's escape)."""
    out: list[str] = []
    quote: Optional[str] = None
    for ch in sql:
        if quote is not None:
            if ch == quote:
                quote = None
        elif ch in ("'", '"'):
            quote = ch
        elif ch == "?":
            out.append("%s")
            continue
        out.append("%%" if ch == "%" else ch)
    return "".join(out)


@functools.lru_cache(maxsize=4096)
def statement(sql: str) -> tuple[str, Optional[str], tuple[str, ...]]:
    """A statement for PostgreSQL: ``(sql, table, columns)``.

    ``table`` is set for an ``INSERT OR REPLACE``: its conflict clause needs the table's
    primary key, which only the database knows; finish it with :func:`replace_clause`.
    """
    m = _OR_REPLACE.match(sql)
    if m:
        cols = tuple(c.strip().lower() for c in m.group(2).split(",") if c.strip())
        body = "INSERT INTO" + sql[sql.upper().index("INTO") + 4:]
        return placeholders(body.rstrip().rstrip(";")), m.group(1).lower(), cols
    if _OR_IGNORE.match(sql):
        body = "INSERT INTO" + sql[sql.upper().index("INTO") + 4:]
        return placeholders(body.rstrip().rstrip(";")) + " ON CONFLICT DO NOTHING", None, ()
    return placeholders(sql), None, ()


def replace_clause(columns: Sequence[str], primary_key: Sequence[str], has_rowid: bool) -> str:
    """The ``ON CONFLICT`` clause that makes an insert behave as SQLite's ``INSERT OR REPLACE``."""
    sets = [f"{c}=EXCLUDED.{c}" for c in columns if c not in primary_key]
    if has_rowid:
        sets.append("rowid=DEFAULT")
    if not sets:
        return f" ON CONFLICT ({', '.join(primary_key)}) DO NOTHING"
    return f" ON CONFLICT ({', '.join(primary_key)}) DO UPDATE SET {', '.join(sets)}"


def migration(stmt: str) -> str:
    """One migration statement (no trailing ``;``) for PostgreSQL."""
    m = _CREATE_TABLE.match(stmt)
    if m:
        without_rowid = bool(_WITHOUT_ROWID.search(stmt))
        body = _WITHOUT_ROWID.sub(")", stmt) if without_rowid else stmt
        implicit_rowid = not without_rowid and not _INTEGER_PK.search(body)
        for pattern, repl in _WORD_TYPES:
            body = pattern.sub(repl, body)
        if implicit_rowid:  # last, so that SELECT * keeps SQLite's columns in SQLite's order
            body = body.rstrip()
            body = body[:-1].rstrip() + ",\n    rowid BIGSERIAL\n)"
        return body
    if re.match(r"^\s*ALTER\s+TABLE\b", stmt, re.I):
        for pattern, repl in _WORD_TYPES:
            stmt = pattern.sub(repl, stmt)
    return stmt
