"""The PostgreSQL dialect hook (pure: no I/O; docs/scale-out.md "One schema, two dialects").

Every component writes its migrations and statements once, in the SQL both engines
share, with SQLite's ``?`` placeholders. The PostgreSQL store runs them through the
functions below; the SQLite store runs them as written. What differs:

- placeholders: ``?`` becomes ``%s`` (and a literal ``%`` becomes ``%%``);
- SQLite's scalar ``MAX(a, b)`` / ``MIN(a, b)`` become ``GREATEST`` / ``LEAST``
  (the one-argument aggregates stay);
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


def placeholders(sql: str) -> tuple[str, Optional[tuple[int, ...]]]:
    """``?`` (and SQLite's numbered ``?N``) outside quoted text become ``%s``; every ``%`` is doubled
    (psycopg's escape). With numbered ones, also the order to take the parameters in (0-based)."""
    out: list[str] = []
    order: list[int] = []
    numbered = False
    quote: Optional[str] = None
    i, n, nxt = 0, len(sql), 0
    while i < n:
        ch = sql[i]
        if quote is not None:
            if ch == quote:
                quote = None
        elif ch in ("'", '"'):
            quote = ch
        elif ch == "?":
            j = i + 1
            while j < n and sql[j].isdigit():
                j += 1
            if j > i + 1:
                numbered = True
                order.append(int(sql[i + 1:j]) - 1)
            else:
                order.append(nxt)
            nxt = order[-1] + 1
            out.append("%s")
            i = j
            continue
        out.append("%%" if ch == "%" else ch)
        i += 1
    return "".join(out), (tuple(order) if numbered else None)


_MINMAX = re.compile(r"\b(MAX|MIN)\s*\(", re.I)


def scalar_minmax(sql: str) -> str:
    """``MAX(a, b)`` (two or more arguments: SQLite's scalar form) as ``GREATEST(a, b)``; ``MIN`` as ``LEAST``."""
    out, pos = [], 0
    for m in _MINMAX.finditer(sql):
        if m.start() < pos:
            continue
        depth, i, comma = 1, m.end(), False
        while i < len(sql) and depth:
            ch = sql[i]
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            elif ch == "," and depth == 1:
                comma = True
            i += 1
        if comma:
            out.append(sql[pos:m.start()])
            out.append("GREATEST(" if m.group(1).upper() == "MAX" else "LEAST(")
            pos = m.end()
    out.append(sql[pos:])
    return "".join(out)


@functools.lru_cache(maxsize=4096)
def statement(sql: str) -> tuple[str, Optional[tuple[int, ...]], Optional[str], tuple[str, ...]]:
    """A statement for PostgreSQL: ``(sql, parameter order, table, columns)``.

    The order is None unless the statement numbers its parameters (``?1``): then it says which
    parameter each ``%s`` takes. ``table`` is set for an ``INSERT OR REPLACE``: its conflict
    clause needs the table's primary key, which only the database knows; finish it with
    :func:`replace_clause`.
    """
    sql = scalar_minmax(sql).rstrip().rstrip(";")
    m = _OR_REPLACE.match(sql)
    if m:
        cols = tuple(c.strip().lower() for c in m.group(2).split(",") if c.strip())
        text, order = placeholders("INSERT INTO" + sql[sql.upper().index("INTO") + 4:])
        return text, order, m.group(1).lower(), cols
    if _OR_IGNORE.match(sql):
        text, order = placeholders("INSERT INTO" + sql[sql.upper().index("INTO") + 4:])
        return text + " ON CONFLICT DO NOTHING", order, None, ()
    text, order = placeholders(sql)
    return text, order, None, ()


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
