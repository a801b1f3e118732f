"""The unit of work: one PostgreSQL transaction that rolls back unless committed.

    with handoff_tx(conn) as tx:
        tx.execute("INSERT INTO review.notes ...", (...,))      # a local effect
        result = tx.emit(event_id=..., event_type="approved", ...)
        if isinstance(result, Rejection):
            ...                                                 # decide; or result.raise_()
        tx.commit()

Inside a unit ``emit`` answers a ``Receipt`` or a ``Rejection`` and never
raises for a refusal: the rejection row is part of the unit and commits
with it (DESIGN.md "Transactions"). Only ``HandoffClient`` raises.

A serialization failure or deadlock aborts the whole transaction, so it is
the unit that is retried, not the statement: ``transact(conn, work)`` runs
``work(tx)`` in a fresh unit until it commits, under the one backoff policy
of ``core/retry.py``. ``work`` must therefore do nothing outside the
database that it would regret doing twice.

On an autocommit connection the unit sends BEGIN and COMMIT itself, each
in one simple-protocol message with its neighbours (parameters bound by
the client): BEGIN with the unit's first statement, COMMIT with its
deferred writes. A unit that reads one statement's result (a consumer's
verdict-first guard) is then two round trips and little client work, one
that only writes (a consumer's claimed unit) one; psycopg's pipeline mode,
used before, cost three round trips (the pipeline's own closing Sync) and
0.4 ms of client CPU a unit against 0.25 ms (measured, guard + one row +
commit). Statements a
handler runs after the first use the extended protocol, prepared as usual.

Isolation is READ COMMITTED, PostgreSQL's default: the emit function's
checks are conditions of its UPDATE (see migration 0001), and a consumer's
guard is a primary key, so no unit needs a stronger level to be correct.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, LiteralString, Protocol, TypeVar

import orjson
import psycopg
from psycopg import pq, sql
from psycopg.types.json import Jsonb

from handoff.core import effects
from handoff.core.calls import Calls
from handoff.core.db import translated
from handoff.core.emitter import Request, emit_with
from handoff.core.errors import (
    ConfigurationError,
    DatabaseUnavailable,
    TransientConflict,
    UnitRolledBack,
)
from handoff.core.models import (
    Receipt,
    Rejection,
)
from handoff.core.retry import CONFLICTS, RetryPolicy

T = TypeVar("T")
Statement = tuple[str, Any]  # a query and its parameters


class TxStatus(enum.Enum):
    ACTIVE = "active"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled back"


class Capabilities(Protocol):
    """Which external capabilities a unit may use (a replay's manifest lists them)."""

    def allows(self, capability: str) -> bool: ...

    def skipped(self, tx: HandoffTx, event_id: str, capability: str) -> None:
        """Record, in ``tx``, that ``event_id`` asked for ``capability`` and was refused."""


class HandoffTx(Calls[Receipt | Rejection]):
    """One open unit on a connection logged in as a service's own role."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        # False until BEGIN is sent, on an autocommit connection (see above).
        self._begun = not conn.autocommit
        # None: every effect and workflow start this consumer declares. A
        # replay sets the manifest's list: anything else is recorded as
        # skipped and never reaches an executor.
        self.capabilities: Capabilities | None = None
        self.status = TxStatus.ACTIVE
        self.receipts: list[Receipt] = []
        self.rejections: list[Rejection] = []
        # Deferred writes in program order: (statement, rows) or ((table, columns), rows).
        self._writes: list[tuple[LiteralString | tuple[str, tuple[str, ...]], list[Any]]] = []

    def _active(self) -> None:
        if self.status is not TxStatus.ACTIVE:
            raise ConfigurationError(f"this unit of work is already {self.status.value}")

    def execute(self, query: LiteralString, params: Any = None) -> psycopg.Cursor[Any]:
        """Run a statement of the caller's own (a local effect) in this unit, now."""
        self._active()
        if self._begun:
            self._flush()
        return self._now(query, params)

    def _now(self, query: LiteralString, params: Any) -> psycopg.Cursor[Any]:
        """``query`` now, the deferred writes left for later; before BEGIN, one message
        with BEGIN and them."""
        if not self._begun:
            return self._simple(["BEGIN", *self._mogrified(), (query, params)])
        with translated():
            return self.conn.execute(query, params)

    def _begin(self) -> None:
        """BEGIN now (with the deferred writes), for a call that uses the connection itself."""
        if not self._begun:
            self._simple(["BEGIN", *self._mogrified()])

    def flush(self) -> None:
        """Send the deferred writes now (with BEGIN, if the unit sends its own)."""
        self._active()
        if self._begun:
            self._flush()
        else:
            self._begin()

    def _mogrified(self) -> list[Statement]:
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
        self._begun = True
        while cur.nextset():
            pass
        return cur

    def write(self, query: LiteralString, params: Any) -> None:
        """A write whose result is not needed: sent with the unit's other writes.

        Writes of the same statement are sent together (``executemany``,
        one round trip) before the next ``execute`` or the commit, so a read
        of the caller's own still sees them. A consumer batch of N events
        whose handlers each write one row costs one round trip, not N.
        """
        self._active()
        if self._writes and self._writes[-1][0] == query:
            self._writes[-1][1].append(params)
        else:
            self._writes.append((query, [params]))

    def append(self, table: str, columns: tuple[str, ...], row: tuple[Any, ...]) -> None:
        """Add a row to ``table`` (``schema.table``), sent with the unit's other appends.

        The cheapest local effect there is (an inbox or an audit row): the
        rows of one table go as one INSERT of a JSON array, whatever their
        number, typed by the table's own row type. Values must be JSON
        serialisable (datetimes are; bytes are not: use ``write`` for those).
        """
        self._active()
        key = (table, columns)
        if self._writes and self._writes[-1][0] == key:
            self._writes[-1][1].append(row)
        else:
            self._writes.append((key, [row]))

    def _flush(self) -> None:
        writes, self._writes = self._writes, []
        with translated():
            for what, rows in writes:
                if isinstance(what, tuple):
                    self._insert_rows(*what, rows)
                    continue
                with self.conn.cursor() as cur:
                    cur.executemany(what, rows)

    def _insert_rows(self, table: str, columns: tuple[str, ...], rows: list[Any]) -> None:
        # One statement, so it goes in one message with the commit (COPY cannot).
        self.conn.execute(_insert_rows_sql(table, columns), (_rows_json(columns, rows),))

    def _send(self, request: Request, document_id: str | None = None) -> Receipt | Rejection:
        self._active()
        # No flush first: the emit function reads only Handoff's own tables,
        # which a service's writes cannot touch, so deferred writes may go
        # after it; they still go before the commit.
        # Before BEGIN: BEGIN, the deferred writes (a consumer's claim) and the
        # emit go in one message.
        result = emit_with(self._now, request, document_id)
        if isinstance(result, Receipt):
            self.receipts.append(result)
        else:
            self.rejections.append(result)
        return result

    def intend(
        self,
        *,
        event_id: str,
        effect: str,
        document_id: str,
        run_id: int,
        request: dict[str, Any],
        business_key: str | None = None,
    ) -> effects.Intent:
        """Record an external effect to perform after this unit commits (the effect ledger).

        The intent commits with the unit or not at all, so no executor can
        act on work that rolled back. Its provider idempotency key comes from
        (tenant, consumer, ``event_id``, ``effect``): stable across attempts.
        ``business_key`` names the business operation (one payment per
        invoice and run): a second event asking for it gets the first intent
        back (``created`` False) and authorises nothing new.
        """
        self._active()
        if self.capabilities is not None and not self.capabilities.allows(effect):
            self.capabilities.skipped(self, event_id, effect)
            return effects.Intent(0, "", "skipped", False, event_id, business_key)
        # No flush, as for emit: the function reads only Handoff's tables.
        self._begin()
        return effects.intend(
            self.conn,
            event_id=event_id,
            effect=effect,
            document_id=document_id,
            run_id=run_id,
            request=request,
            business_key=business_key,
        )

    def start_workflow(
        self,
        *,
        workflow: str,
        execution_name: str,
        document_id: str,
        run_id: int,
        event_id: str,
        input: dict[str, Any],
    ) -> effects.WorkflowRun:
        """Start a workflow run named ``execution_name``, or find the one started before."""
        self._active()
        capability = f"workflow:{workflow}"
        if self.capabilities is not None and not self.capabilities.allows(capability):
            self.capabilities.skipped(self, event_id, capability)
            return effects.WorkflowRun(execution_name, datetime.now(UTC), False)
        self._begin()
        return effects.start_workflow(
            self.conn,
            workflow=workflow,
            execution_name=execution_name,
            document_id=document_id,
            run_id=run_id,
            event_id=event_id,
            input=input,
        )

    def commit(self) -> None:
        """Commit now. A lost connection here means the outcome is unknown."""
        self._active()
        if self.conn.info.transaction_status is pq.TransactionStatus.INERROR:
            # PostgreSQL answers this COMMIT with ROLLBACK, not an error: a
            # consumer would take its event as done with nothing kept.
            raise UnitRolledBack(
                "a statement of this unit failed and the unit went on; nothing of it was kept"
            )
        if self.conn.autocommit:
            writes = self._mogrified()
            if self._begun or writes:  # else nothing was sent: nothing to commit
                self._simple([*([] if self._begun else ["BEGIN"]), *writes, "COMMIT"])
        else:
            self._flush()
            with translated():
                self.conn.commit()
        self.status = TxStatus.COMMITTED

    def rollback(self) -> None:
        self._writes = []
        if self.status is TxStatus.ACTIVE:
            self.status = TxStatus.ROLLED_BACK
            if not self.conn.closed:
                self.conn.rollback()


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


@contextmanager
def handoff_tx(conn: psycopg.Connection[Any]) -> Iterator[HandoffTx]:
    """A unit of work on ``conn`` (none open); rolls back unless committed.

    On an autocommit connection the unit sends BEGIN and COMMIT itself (see above).
    """
    if conn.broken or conn.closed:
        # The database went away under an earlier unit (a restart): no bug of the
        # caller's, and the caller's reconnect is the cure.
        raise DatabaseUnavailable("the database connection is gone; reconnect")
    if conn.info.transaction_status is not pq.TransactionStatus.IDLE:
        raise ConfigurationError("handoff_tx needs a connection with no transaction open")
    tx = HandoffTx(conn)
    try:
        yield tx
    finally:
        # A broken connection has nothing left to undo.
        with suppress(psycopg.Error):
            tx.rollback()


def transact(
    conn: psycopg.Connection[Any],
    work: Callable[[HandoffTx], T],
    *,
    policy: RetryPolicy = CONFLICTS,
) -> T:
    """Run ``work`` in a unit and commit it; retry the whole unit on conflicts."""

    def once() -> T:
        # translated() around the whole unit, not only each statement: in
        # pipeline mode a statement's error (a lock timeout) surfaces when its
        # result is read, which may be outside the statement's own call.
        with handoff_tx(conn) as tx, translated():
            result = work(tx)
            if tx.status is TxStatus.ACTIVE:
                tx.commit()
            return result

    return policy.run(once, retry_on=(TransientConflict,))
