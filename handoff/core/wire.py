"""How a unit of work's statements reach PostgreSQL: few messages, little client work.

A unit (``core/tx.py``) says what to run; this module decides when and how it goes.

- **Writes are deferred.** A write whose result is not needed (``write``) waits
  and goes with the unit's other writes: the same statement's rows as one
  ``executemany``, an ``append``'s rows of one table as one INSERT of a JSON
  array. A consumer batch of N events whose handlers each write one row costs
  one round trip, not N. They are sent before the next statement whose result
  is read, so a read of the caller's own still sees them, and before COMMIT.
- **BEGIN and COMMIT ride with their neighbours.** On an autocommit connection
  the unit sends them itself, each in one simple-protocol message with the
  statements next to it, parameters bound by the client: BEGIN with the unit's
  first statement, COMMIT with its deferred writes. A unit that reads one
  result (a consumer's verdict-first guard) is two round trips, one that only
  writes (a consumer's claimed unit) one. psycopg's pipeline mode, used before,
  cost three (the pipeline's closing Sync is a round trip of its own) and
  0.4 ms of client CPU a unit against 0.25 ms (measured: guard, one row,
  commit). Statements after the first use the extended protocol, prepared as
  usual.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, LiteralString

import orjson
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from handoff.core.db import translated
from handoff.core.emit_sql import SET_TRACE
from handoff.core.errors import NotQueueable

Statement = tuple[str, Any]  # a query and its parameters
# A deferred write: a statement and its rows, or ((table, columns), rows) to append.
Deferred = tuple[LiteralString | tuple[str, tuple[str, ...]], list[Any]]


class Wire:
    """The statements of one unit on ``conn``, sent as few messages as they can be.

    ``trace``: a traceparent for the unit's rows (core/emit_sql.py SET_TRACE), set in
    the message that carries BEGIN, so a traced unit costs no round trip more.
    ``queued``: nothing is sent; the unit's statements are collected (``statements``)
    to be sent ahead (core/unit_queue.py), and whatever would use the connection now
    raises ``NotQueueable`` before it does.
    """

    def __init__(
        self, conn: psycopg.Connection[Any], trace: str | None = None, *, queued: bool = False
    ) -> None:
        self.conn = conn
        self.queued = queued
        # False until BEGIN is sent, on an autocommit connection.
        self.begun = not conn.autocommit
        self._writes: list[Deferred] = []
        self._begin: list[str | Statement] = ["BEGIN"]
        if trace is not None:
            setting: Statement = (SET_TRACE, {"traceparent": trace})
            if self.begun:  # the caller's transaction
                with translated():
                    conn.execute(*setting)
            self._begin.append(setting)

    def execute(self, query: LiteralString, params: Any) -> psycopg.Cursor[Any]:
        """``query`` now, after the deferred writes (its result may depend on them)."""
        self._sending()
        if self.begun:
            self._flush()
        return self.now(query, params)

    def now(self, query: LiteralString, params: Any) -> psycopg.Cursor[Any]:
        """``query`` now, the deferred writes left for later; before BEGIN, one message
        with BEGIN and them."""
        self._sending()
        if not self.begun:
            return self._simple([*self._begin, *self._bound(), (query, params)])
        with translated():
            return self.conn.execute(query, params)

    def begin(self) -> None:
        """BEGIN now (with the deferred writes), for a call that uses the connection itself."""
        self._sending()
        if not self.begun:
            self._simple([*self._begin, *self._bound()])

    def flush(self) -> None:
        """Send the deferred writes now (with BEGIN, if the unit sends its own)."""
        self._sending()
        if self.begun:
            self._flush()
        else:
            self.begin()

    def write(self, query: LiteralString, params: Any) -> None:
        if self._writes and self._writes[-1][0] == query:
            self._writes[-1][1].append(params)
        else:
            self._writes.append((query, [params]))

    def append(self, table: str, columns: tuple[str, ...], row: tuple[Any, ...]) -> None:
        key = (table, columns)
        if self._writes and self._writes[-1][0] == key:
            self._writes[-1][1].append(row)
        else:
            self._writes.append((key, [row]))

    def commit(self) -> None:
        """The deferred writes and COMMIT (with BEGIN, if nothing was sent yet)."""
        self._sending()
        if self.conn.autocommit:
            writes = self._bound()
            if self.begun or writes:  # else nothing was sent: nothing to commit
                self._simple([*([] if self.begun else self._begin), *writes, "COMMIT"])
        else:
            self._flush()
            with translated():
                self.conn.commit()

    def statements(self) -> list[Statement]:
        """A queued unit's statements, to be sent as one transaction; none left deferred."""
        return self._bound()

    def _sending(self) -> None:
        if self.queued:
            raise NotQueueable("this unit is being queued; it cannot use the connection now")

    def discard(self) -> None:
        """Forget the deferred writes (the unit rolls back)."""
        self._writes = []

    def _bound(self) -> list[Statement]:
        """The deferred writes, as (query, params) to bind; none left deferred."""
        writes, self._writes = self._writes, []
        statements: list[Statement] = []
        for what, rows in writes:
            if isinstance(what, tuple):
                statements.append((_insert_rows_sql(*what), (_rows_json(what[1], rows),)))
            else:
                statements.extend((what, row) for row in rows)
        return statements

    def _simple(self, statements: list[str | Statement]) -> psycopg.Cursor[Any]:
        """``statements`` (text, or (query, params) bound here) in one message.

        Answers the cursor on the last statement's result.
        """
        cur: psycopg.ClientCursor[Any] = psycopg.ClientCursor(self.conn)
        text = "; ".join(s if isinstance(s, str) else cur.mogrify(*s) for s in statements)
        with translated():
            cur.execute(text.encode())  # composed above, values bound by mogrify
        self.begun = True
        while cur.nextset():
            pass
        return cur

    def _flush(self) -> None:
        writes, self._writes = self._writes, []
        with translated():
            for what, rows in writes:
                if isinstance(what, tuple):
                    # One statement, so it can go in one message with the commit
                    # (COPY cannot).
                    self.conn.execute(_insert_rows_sql(*what), (_rows_json(what[1], rows),))
                    continue
                with self.conn.cursor() as cur:
                    cur.executemany(what, rows)


@lru_cache(maxsize=256)
def _insert_rows_sql(table: str, columns: tuple[str, ...]) -> str:
    """Composed once per table and columns: a consumer appends on its hot path."""
    name = sql.Identifier(*table.split("."))
    cols = sql.SQL(", ").join(map(sql.Identifier, columns))
    return (
        sql.SQL("INSERT INTO {t} ({c}) SELECT {c} FROM jsonb_populate_recordset(NULL::{t}, %s)")
        .format(t=name, c=cols)
        .as_string()
    )


def _rows_json(columns: tuple[str, ...], rows: list[Any]) -> Jsonb:
    return Jsonb([dict(zip(columns, row, strict=True)) for row in rows], json_text)


def json_text(value: Any) -> str:
    """orjson's JSON as text, for ``Jsonb(value, json_text)`` (the stdlib's is slower)."""
    return orjson.dumps(value).decode()
