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

How the statements travel (writes deferred and batched, BEGIN and COMMIT
sent with their neighbours, client-side binding) is ``core/wire.py``'s.

Isolation is READ COMMITTED, PostgreSQL's default: the emit function's
checks are conditions of its UPDATE (handoff/sql/contract.sql), and a consumer's
guard is a primary key, so no unit needs a stronger level to be correct.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from datetime import UTC, datetime
from typing import Any, Literal, LiteralString, Protocol, TypeVar, overload

import psycopg
from psycopg import pq

from handoff.core import effects
from handoff.core import emit_sql as q
from handoff.core.calls import Calls
from handoff.core.db import by_tenant, raise_if_lost, translated
from handoff.core.emitter import Request, emit_with, params
from handoff.core.errors import (
    ConfigurationError,
    DatabaseUnavailable,
    TransientConflict,
    UnitRolledBack,
)
from handoff.core.models import (
    HandoffRequest,
    Receipt,
    Rejection,
    validated,
)
from handoff.core.retry import CONFLICTS, RetryPolicy
from handoff.core.wire import Statement, Wire

T = TypeVar("T")


class TxStatus(enum.Enum):
    ACTIVE = "active"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled back"


class Spans(Protocol):
    """Opens a span (telemetry/tracing.py's ``span``, bound by the caller)."""

    def __call__(self, name: str, attributes: dict[str, Any]) -> AbstractContextManager[Any]: ...


class Capabilities(Protocol):
    """Which external capabilities a unit may use (a replay's manifest lists them)."""

    def allows(self, capability: str) -> bool: ...

    def skipped(self, tx: HandoffTx, event_id: str, capability: str) -> None:
        """Record, in ``tx``, that ``event_id`` asked for ``capability`` and was refused."""


class Handled(Protocol):
    """The event a handler was given (``consumers.Event``), as ``hand_on`` reads it."""

    @property
    def event_id(self) -> str: ...

    @property
    def document_id(self) -> str: ...

    @property
    def run_id(self) -> int: ...

    @property
    def version(self) -> int: ...

    @property
    def correlation_id(self) -> str | None: ...

    def next_event_id(self, step: str) -> str: ...


class HandoffTx(Calls[Receipt | Rejection]):
    """One open unit on a connection logged in as a service's own role."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        tenant: str | None = None,
        trace: str | None = None,
        *,
        queued: bool = False,
    ) -> None:
        self.conn = conn
        # The service's tenant, when the caller knows it (a consumer does): every call
        # then names it, and on Citus each is handed to the tenant's worker, keeping the
        # unit on one connection to one node (handoff/sql/by_tenant.sql).
        self.tenant = tenant
        # ``trace``: the W3C traceparent of the span this unit runs in, when there is a
        # sampled one; the rows the unit writes carry it (telemetry/tracing.py).
        # ``queued``: nothing is sent; ``statements`` answers what the unit would send, to
        # go ahead of its turn (core/unit_queue.py). A read raises NotQueueable.
        self._wire = Wire(conn, trace, queued=queued)
        # None: every effect and workflow start this consumer declares. A
        # replay sets the manifest's list: anything else is recorded as
        # skipped and never reaches an executor.
        self.capabilities: Capabilities | None = None
        # Opens a span around each emit of the unit (a consumer sets it when tracing is
        # on; telemetry/tracing.py): a name and attributes in, a context manager out.
        self.spans: Spans | None = None
        self.status = TxStatus.ACTIVE
        self.receipts: list[Receipt] = []
        self.rejections: list[Rejection] = []

    def by_tenant(
        self, plain: LiteralString, named: LiteralString, params: dict[str, Any]
    ) -> tuple[LiteralString, dict[str, Any]]:
        """``named`` with this unit's tenant when it is known, else ``plain`` (core/db.py)."""
        return by_tenant(plain, named, params, self.tenant)

    def _active(self) -> None:
        if self.status is not TxStatus.ACTIVE:
            raise ConfigurationError(f"this unit of work is already {self.status.value}")

    def execute(self, query: LiteralString, params: Any = None) -> psycopg.Cursor[Any]:
        """Run a statement of the caller's own (a local effect) in this unit, now."""
        self._active()
        return self._wire.execute(query, params)

    def write(self, query: LiteralString, params: Any) -> None:
        """A write whose result is not needed: sent with the unit's other writes.

        Writes of the same statement are sent together (``executemany``, one
        round trip) before the next ``execute`` or the commit, so a read of the
        caller's own still sees them.
        """
        self._active()
        self._wire.write(query, params)

    def append(self, table: str, columns: tuple[str, ...], row: tuple[Any, ...]) -> None:
        """Add a row to ``table`` (``schema.table``), sent with the unit's other appends.

        The cheapest local effect there is (an inbox or an audit row): the
        rows of one table go as one INSERT of a JSON array, whatever their
        number, typed by the table's own row type. Values must be JSON
        serialisable (datetimes are; bytes are not: use ``write`` for those).
        """
        self._active()
        self._wire.append(table, columns, row)

    def flush(self) -> None:
        """Send the deferred writes now (with BEGIN, if the unit sends its own)."""
        self._active()
        self._wire.flush()

    def _send(self, request: Request, document_id: str | None = None) -> Receipt | Rejection:
        self._active()
        # No flush first: the emit function reads only Handoff's own tables,
        # which a service's writes cannot touch, so deferred writes may go
        # after it; they still go before the commit.
        # Before BEGIN: BEGIN, the deferred writes (a consumer's claim) and the
        # emit go in one message.
        with self._span(request.event_type, document_id or getattr(request, "document_id", None)):
            result = emit_with(self._wire.now, request, document_id, self.tenant)
        if isinstance(result, Receipt):
            self.receipts.append(result)
        else:
            self.rejections.append(result)
        return result

    @overload
    def hand_on(
        self,
        event: Handled,
        event_type: str,
        *,
        to: str | None,
        status: str,
        step: str | None = None,
        due_at: datetime | None = None,
        data: dict[str, Any] | None = None,
        wait: Literal[True] = True,
    ) -> Receipt | Rejection: ...

    @overload
    def hand_on(
        self,
        event: Handled,
        event_type: str,
        *,
        to: str | None,
        status: str,
        step: str | None = None,
        due_at: datetime | None = None,
        data: dict[str, Any] | None = None,
        wait: Literal[False],
    ) -> None: ...

    def hand_on(
        self,
        event: Handled,
        event_type: str,
        *,
        to: str | None,
        status: str,
        step: str | None = None,
        due_at: datetime | None = None,
        data: dict[str, Any] | None = None,
        wait: bool = True,
    ) -> Receipt | Rejection | None:
        """Move ``event``'s document on from the version it announced: to ``to``, or
        finished when ``to`` is None (with a terminal ``status``).

        What the runtime knows is filled in, as eventsourcing's ``collect_events``
        does: the event id (stable across redeliveries: from ``event`` and
        ``step``, the event type unless given), the document, run and expected
        version, the correlation (kept) and the causation (``event``). ``emit``
        stays for the general case.

        ``wait=False``: the answer is not waited for. The handoff goes with the
        unit's other writes (at batch 1, the claim, the handoff, the effects and
        COMMIT are one message), so a batch of N events costs no round trip per
        event; a refusal fails the unit at its commit with the error a refused
        handoff raises, and the runtime treats it as it treats that error.
        Answers None: for a handler that does not read the receipt.
        """
        fields: dict[str, Any] = {
            "event_id": event.next_event_id(step or event_type),
            "event_type": event_type,
            "document_id": event.document_id,
            "run_id": event.run_id,
            "next_owner": to,
            "status": status,
            "expected_version": event.version,
            "due_at": due_at,
            "data": data,
            "correlation_id": event.correlation_id,
            "causation_id": event.event_id,
        }
        if wait:
            return self.emit(**fields)
        self._active()
        with self._span(event_type, event.document_id):
            self._wire.write(*self.by_tenant(
                q.EMIT_DIRECT_OR_RAISE, q.EMIT_DIRECT_OR_RAISE_FOR,
                params(validated(HandoffRequest, **fields)),
            ))  # fmt: skip
        return None

    def _span(self, event_type: str, document_id: str | None) -> AbstractContextManager[Any]:
        if self.spans is None:
            return nullcontext()
        return self.spans(
            f"emit {event_type}",
            {"handoff.event_type": event_type, "handoff.document": document_id},
        )

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
        if self._refused(event_id, effect):
            return effects.Intent(0, "", "skipped", False, event_id, business_key)
        return effects.intend(
            self.conn,
            event_id=event_id,
            effect=effect,
            document_id=document_id,
            run_id=run_id,
            request=request,
            business_key=business_key,
            tenant=self.tenant,
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
        if self._refused(event_id, f"workflow:{workflow}"):
            return effects.WorkflowRun(execution_name, datetime.now(UTC), False)
        return effects.start_workflow(
            self.conn,
            workflow=workflow,
            execution_name=execution_name,
            document_id=document_id,
            run_id=run_id,
            event_id=event_id,
            input=input,
            tenant=self.tenant,
        )

    def _refused(self, event_id: str, capability: str) -> bool:
        """True, and recorded as skipped, when a replay's manifest does not list
        ``capability``; else the unit is begun for the ledger's function."""
        self._active()
        if self.capabilities is not None and not self.capabilities.allows(capability):
            self.capabilities.skipped(self, event_id, capability)
            return True
        # No flush, as for emit: the ledger's functions read only Handoff's tables.
        self._wire.begin()
        return False

    def statements(self) -> list[Statement]:
        """A queued unit's statements (its deferred writes), to be sent as one transaction."""
        return self._wire.statements()

    def commit(self) -> None:
        """Commit now. A lost connection here means the outcome is unknown."""
        self._active()
        if self.conn.info.transaction_status is pq.TransactionStatus.INERROR:
            # PostgreSQL answers this COMMIT with ROLLBACK, not an error: a
            # consumer would take its event as done with nothing kept.
            raise UnitRolledBack(
                "a statement of this unit failed and the unit went on; nothing of it was kept"
            )
        self._wire.commit()
        self.status = TxStatus.COMMITTED

    def rollback(self) -> None:
        self._wire.discard()
        if self.status is TxStatus.ACTIVE:
            self.status = TxStatus.ROLLED_BACK
            if not (self.conn.closed or self._wire.queued):  # a queued unit sent nothing
                self.conn.rollback()


@contextmanager
def handoff_tx(
    conn: psycopg.Connection[Any], tenant: str | None = None, trace: str | None = None
) -> Iterator[HandoffTx]:
    """A unit of work on ``conn`` (none open); rolls back unless committed.

    On an autocommit connection the unit sends BEGIN and COMMIT itself (see above).
    ``trace``: a traceparent its rows carry.
    """
    if conn.broken or conn.closed:
        # The database went away under an earlier unit (a restart): no bug of the
        # caller's, and the caller's reconnect is the cure.
        raise DatabaseUnavailable("the database connection is gone; reconnect")
    if conn.info.transaction_status is not pq.TransactionStatus.IDLE:
        raise ConfigurationError("handoff_tx needs a connection with no transaction open")
    tx = HandoffTx(conn, tenant, trace)
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
    tenant: str | None = None,
    trace: str | None = None,
) -> T:
    """Run ``work`` in a unit (of the service's ``tenant``, when known) and commit it; retry
    the whole unit on conflicts. ``trace``: a traceparent the unit's rows carry."""

    def once() -> T:
        # translated() around the whole unit, not only each statement: in
        # pipeline mode a statement's error (a lock timeout) surfaces when its
        # result is read, which may be outside the statement's own call.
        with handoff_tx(conn, tenant, trace) as tx, translated():
            result = work(tx)
            if tx.status is TxStatus.ACTIVE:
                tx.commit()
            return result

    return _retried(conn, once, policy)


def _retried(conn: psycopg.Connection[Any], once: Callable[[], T], policy: RetryPolicy) -> T:
    """``once()`` until it commits, retried whole on conflicts."""
    try:
        return policy.run(once, retry_on=(TransientConflict,))
    except DatabaseUnavailable:
        raise
    except Exception as exc:
        # Whatever the unit met, a broken session is the database's failure, not the
        # work's: the caller reconnects and takes the work again.
        raise_if_lost(conn, exc)
        raise


def call(
    conn: psycopg.Connection[Any],
    query: LiteralString,
    params: Any,
    *,
    policy: RetryPolicy = CONFLICTS,
) -> list[tuple[Any, ...]]:
    """One statement that is a whole unit (a SQL function that does all of it): its rows.

    On an autocommit connection it is PostgreSQL's implicit transaction: one message, no
    BEGIN or COMMIT of its own to send, and the statement prepared after a few calls. On
    another connection, a unit as ``transact`` runs it. Retried whole on conflicts.
    """
    if not conn.autocommit:
        return transact(conn, lambda tx: tx.execute(query, params).fetchall(), policy=policy)

    def once() -> list[tuple[Any, ...]]:
        if conn.broken or conn.closed:
            raise DatabaseUnavailable("the database connection is gone; reconnect")
        with translated():
            return conn.execute(query, params).fetchall()

    return _retried(conn, once, policy)
