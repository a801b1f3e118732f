"""Executors: perform committed effect intents against their providers.

An executor never holds a database transaction open across a provider call
(the playbook's rule): it claims an intent with a lease and commits, marks
it submitted and commits, calls the provider with no transaction open, and
records the answer in a new transaction, together with the effect's
``on_outcome`` (often the next handoff). The claim counter fences a late
executor: one whose lease was taken over records nothing.

What a failure proves decides what comes next (core/errors.py):

- nothing reached the provider: back to "intended", retried after a backoff;
- the answer was lost (timeout, dropped connection, 5xx): "unknown"; before
  any retry the provider is asked for the operation by its idempotency key,
  and what it says is recorded (reconciled), or, if it never arrived, the
  same request goes again with the same key;
- a lookup that cannot answer leaves the intent unknown; after
  ``max_lookups`` it is handed to its owner (unresolved), listed by
  ``handoff effects list --unresolved`` and settled by ``handoff effects resolve``.

Several executors, in one process or many, share the work by claims
(``FOR UPDATE SKIP LOCKED``); a killed one's intents come back when its
lease runs out, as submitted, so the next one looks them up first.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, LiteralString, TypeVar

import psycopg
from opentelemetry.trace import SpanKind
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb

from handoff.consumers import metrics
from handoff.consumers.app import Consumer, Effect, Outcome
from handoff.consumers.claims import ClaimPool
from handoff.consumers.providers import Answer
from handoff.consumers.records import RecordGroup
from handoff.consumers.settings import EffectSettings
from handoff.core import db
from handoff.core import effects_sql as ledger
from handoff.core import guards_sql as guards
from handoff.core.errors import (
    ConfigurationError,
    DatabaseUnavailable,
    OutcomeUnknown,
    ProviderError,
    ProviderNotReached,
    ProviderOutcomeUnknown,
    ProviderRefused,
)
from handoff.core.outage import Outage
from handoff.core.tx import HandoffTx, call, transact
from handoff.core.worker_listen import WorkerListeners
from handoff.telemetry import logs, tracing

T = TypeVar("T")

log = logging.getLogger("handoff.effects")

WAKE = "LISTEN handoff_effects"
WORKERS_REFRESH_S = 30.0  # on Citus: how often the list of workers to listen on is read
MEASURE_S = 5.0  # how often the open intents are counted (the effects' gauges)


@dataclass(frozen=True)
class Claimed:
    id: int
    effect: str
    idempotency_key: str
    request: dict[str, Any]
    document_id: str
    run_id: int
    event_id: str
    claim: int
    attempts: int
    lookups: int
    needs_lookup: bool
    submitted: bool  # marked submitted by the claim itself (never sent before)
    recovered: str | None  # the executor whose lease ran out, if any
    traceparent: str | None = None  # the intending unit's trace (read with tracing on)


class Executor:
    """One worker: claims one intent at a time on its own connection."""

    def __init__(
        self,
        app: Consumer,
        conn: psycopg.Connection[Any],
        config: EffectSettings,
        *,
        worker: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
        pool: ClaimPool[Claimed] | None = None,
        records: RecordGroup[dict[str, Any]] | None = None,
    ) -> None:
        self.app, self.conn, self.config = app, conn, config
        # Shared with the other executors of the process (claims.py, records.py).
        self.pool, self.records = pool, records
        self.worker = worker or f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"
        # Learnt once: every ledger call names it (on Citus: handed whole to its worker).
        with db.translated(), conn.transaction():
            row = conn.execute(guards.WHOAMI).fetchone()
        self.tenant: str | None = row[0] if row else None
        self.policy = config.retry_policy()
        self._sleep = sleep

    # -- the loop ------------------------------------------------------------------

    def step(self) -> int:
        """Claim and perform what is due now; the number of intents taken."""
        if self.pool is None:
            claimed = self.claim(1)
        else:
            taken = self.pool.take(self.claim)
            claimed = [] if taken is None else [taken]
        for c in claimed:
            self.perform(c)
        return len(claimed)

    def claim(self, limit: int) -> list[Claimed]:
        """Up to ``limit`` intents due now, claimed for this executor (and marked submitted
        when never sent: one transaction fewer per effect)."""
        claim = {"worker": self.worker, "lease_s": self.config.lease_s, "limit": limit,
                 "submit": True}  # fmt: skip
        claimed = [Claimed(*row) for row in self._call(ledger.CLAIM, ledger.CLAIM_FOR, claim)]
        if claimed and tracing.enabled():
            claimed = self._traced(claimed)
        return claimed

    def release(self, c: Claimed) -> None:
        """Hand back an intent claimed but never sent (a stopping process's pool), as it
        was before the claim, due now: its attempt is not spent, and one the claim marked
        submitted is sent by the next executor without a lookup."""
        params = {"id": c.id, "claim": c.claim, "marked": c.submitted,
                  "detail": "handed back unsent: the executors stopped"}  # fmt: skip
        if not self._call(ledger.RELEASE, ledger.RELEASE_FOR, params)[0][0]:
            self._count(c, "fenced")

    def _traced(self, claimed: list[Claimed]) -> list[Claimed]:
        """The intents with the trace context of the units that intended them."""
        ids = {"ids": [c.id for c in claimed]}
        found = dict(call(self.conn, ledger.TRACES, ids))
        return [replace(c, traceparent=found.get(c.id)) for c in claimed]

    def drain(self, limit: int = 1_000_000) -> int:
        """Perform until nothing is due (tests and ``handoff rehearse``)."""
        done = 0
        while done < limit and self.step():
            done += 1
        return done

    # -- one intent --------------------------------------------------------------------

    def perform(self, c: Claimed) -> None:
        with logs.bound(
            consumer=self.app.name, tenant=self.tenant, documentId=c.document_id,
            eventId=c.event_id, effect=c.effect, intentId=c.id,
        ), tracing.span(
            f"perform {c.effect}",
            parent=c.traceparent,
            kind=SpanKind.CLIENT,
            attributes={"handoff.intent": c.id, "handoff.effect": c.effect,
                        "handoff.document": c.document_id, "handoff.attempts": c.attempts},
        ):  # fmt: skip
            # A provider continues the trace with trace_context.caller_headers() (providers.py).
            self._perform(c)

    def _perform(self, c: Claimed) -> None:
        effect = self.app.effects.get(c.effect)
        if effect is None:
            self._record(
                c,
                "intended",
                reconciliation="unresolved",
                error=f"{self.app.name} declares no effect named {c.effect} (a bad release?)",
            )
            return
        if c.needs_lookup and not self._look_up(effect, c):
            return
        if not c.submitted and not self._resubmitting(c):
            return
        self._submit(effect, c)

    def _resubmitting(self, c: Claimed) -> bool:
        """After a lookup found nothing: send again, unless the attempts are spent."""
        if c.attempts >= self.config.max_attempts:
            # Here the provider has been asked (or was never reached): it does
            # not hold the operation, so the intent is "intended" again.
            self._count(c, "unresolved")
            self._record(
                c,
                "intended",
                reconciliation="unresolved",
                error=f"no final answer after {c.attempts} attempts: over to {self.app.name}",
            )
            return False
        return self._submitting(c)

    def _look_up(self, effect: Effect, c: Claimed) -> bool:
        """Ask the provider what became of an earlier submission; True: submit (again)."""
        started = time.perf_counter()
        try:
            found = effect.provider.status(c.idempotency_key)
        except ProviderError as exc:
            self._count(c, "lookup_failed")
            give_up = c.lookups + 1 >= self.config.max_lookups
            if give_up:
                self._count(c, "unresolved")
            self._record(
                c,
                "unknown",
                reconciliation="unresolved" if give_up else "pending",
                error=f"status lookup {c.lookups + 1} failed: {exc}",
                retry_in_s=self.policy.delay(c.lookups + 1),
                lookup_failed=True,
            )
            return False
        finally:
            self._time(c, "lookup", started)
        if found is None:
            # It never arrived: the same request, with the same key, goes again.
            self._count(c, "absent")
            return True
        self._count(c, "reconciled")
        self._finish(c, found, reconciled=True)
        return False

    def _submitting(self, c: Claimed) -> bool:
        rows = self._call(ledger.SUBMITTING, ledger.SUBMITTING_FOR, {"id": c.id, "claim": c.claim})
        ok = bool(rows[0][0])
        if not ok:
            self._count(c, "fenced")
        return ok

    def _submit(self, effect: Effect, c: Claimed) -> None:
        started = time.perf_counter()
        try:
            answer = effect.provider.submit(c.idempotency_key, c.request)
            for hook in self.app.after_submit_hooks:
                hook(c.id)
        except ProviderNotReached as exc:
            self._count(c, "not_reached")
            self._record(
                c,
                "intended",
                error=f"not sent: {exc}",
                retry_in_s=self.policy.delay(c.attempts + 1),
            )
            return
        except ProviderOutcomeUnknown as exc:
            self._count(c, "unknown")
            log.warning("%s: intent %d: outcome unknown: %s", self.app.name, c.id, exc)
            self._record(
                c,
                "unknown",
                reconciliation="pending",
                error=f"outcome unknown: {exc}",
                retry_in_s=self.policy.delay(c.attempts + 1),
            )
            return
        except ProviderRefused as exc:
            answer = Answer(False, None, exc.body if isinstance(exc.body, dict) else {})
            self._finish(c, answer, reconciled=False, error=str(exc))
            return
        finally:
            self._time(c, "submit", started)
        self._finish(c, answer, reconciled=False)

    def _finish(
        self, c: Claimed, answer: Answer, *, reconciled: bool, error: str | None = None
    ) -> None:
        """Record the final answer and run ``on_outcome`` in the same transaction."""
        state = "succeeded" if answer.succeeded else "failed"
        effect = self.app.effects[c.effect]
        outcome = Outcome(
            intent_id=c.id,
            effect=c.effect,
            idempotency_key=c.idempotency_key,
            event_id=c.event_id,
            document_id=c.document_id,
            run_id=c.run_id,
            request=c.request,
            succeeded=answer.succeeded,
            reference=answer.reference,
            body=answer.body,
            reconciled=reconciled,
        )

        record = self._record_params(
            c,
            state,
            # After a lookup (this one, or one that found nothing and sent
            # again), the earlier unknown outcome is settled.
            reconciliation="reconciled" if reconciled or c.needs_lookup else None,
            provider_ref=answer.reference,
            outcome=answer.body,
            error=error,
            detail="found by a status lookup" if reconciled else None,
        )
        outcome_fn = effect.outcome_fn

        def work(tx: HandoffTx) -> bool:
            row = tx.execute(*tx.by_tenant(ledger.RECORD, ledger.RECORD_FOR, record)).fetchone()
            if not (row and row[0]):
                return False
            assert outcome_fn is not None
            rejected = len(tx.rejections)
            traced = {"handoff.succeeded": answer.succeeded}
            with tracing.span(f"outcome {c.effect}", attributes=traced) as span:
                if span is not None:
                    tx.spans = tracing.emit_span
                outcome_fn(outcome, tx)
            if len(tx.rejections) > rejected:
                tx.rejections[rejected].raise_()
            return True

        if outcome_fn is None and self.records is not None:
            # The record alone, with the other executors' answers: not waited for.
            self.records.record_later(record, self.record_many, self._record_one,
                                      partial(self._settled, c, state))  # fmt: skip
            return
        try:
            if outcome_fn is None:  # the record alone: one statement
                recorded = self._recorded(record)
            else:
                # Inside the perform span: the outcome's emit continues the intent's trace.
                recorded = self._transact(work, trace=tracing.current_traceparent())
        except DatabaseUnavailable:
            raise
        except Exception as exc:
            # The provider's answer must not be lost because what follows it
            # failed: it is recorded, and the intent goes to its owner.
            log.error("%s: intent %d: on_outcome failed: %s", self.app.name, c.id, exc)
            self._count(c, "unresolved")
            self._record(
                c,
                state,
                reconciliation="unresolved",
                provider_ref=answer.reference,
                outcome=answer.body,
                error=f"{state} at the provider, but on_outcome failed: {exc}",
            )
            return
        self._count(c, state if recorded else "fenced")

    # -- records -------------------------------------------------------------------

    def _settled(self, c: Claimed, state: str, result: bool | BaseException) -> None:
        """How an answer recorded later went (records.py ``record_later``): counted; one
        that could not be recorded stays submitted, and once its lease runs out the next
        executor asks the provider for it by its key and records that (never sent twice)."""
        if isinstance(result, BaseException):
            self._count(c, "unrecorded")
            log.warning("%s: intent %d: its answer (%s) was not recorded (%s); it is looked up "
                        "once its lease runs out", self.app.name, c.id, state, result)  # fmt: skip
            return
        self._count(c, state if result else "fenced")

    @staticmethod
    def _record_params(
        c: Claimed,
        state: str,
        *,
        reconciliation: str | None = None,
        provider_ref: str | None = None,
        outcome: dict[str, Any] | None = None,
        error: str | None = None,
        retry_in_s: float = 0.0,
        lookup_failed: bool = False,
        detail: str | None = None,
    ) -> dict[str, Any]:
        """effect_record's parameters (handoff/sql/effects.sql)."""
        return {
            "id": c.id,
            "claim": c.claim,
            "state": state,
            "reconciliation": reconciliation,
            "provider_ref": provider_ref,
            "outcome": Jsonb(outcome) if outcome is not None else None,
            "error": error,
            "retry_in_s": retry_in_s,
            "lookup_failed": lookup_failed,
            "detail": detail or error,
        }

    def _record(self, c: Claimed, state: str, **fields: Any) -> None:
        if not self._recorded(self._record_params(c, state, **fields)):
            self._count(c, "fenced")

    def _recorded(self, record: dict[str, Any]) -> bool:
        """effect_record alone; False: fenced out. With the process's record group, sent
        together with the other executors' answers (records.py)."""
        if self.records is None:
            return self._record_one(record)
        return self.records.record(record, self.record_many, self._record_one)

    def _record_one(self, record: dict[str, Any]) -> bool:
        return bool(self._call(ledger.RECORD, ledger.RECORD_FOR, record)[0][0])

    def record_many(self, records: list[dict[str, Any]]) -> list[bool]:
        """Several answers in one statement and one transaction (in the order of their
        intents, so that two batches never wait for each other's rows)."""
        order = sorted(range(len(records)), key=lambda n: records[n]["id"])
        columns = {name: [records[n][name] for n in order] for name in ledger.RECORD_COLUMNS}
        recorded = [False] * len(records)
        for position, done in call(self.conn, ledger.RECORD_MANY, columns):
            recorded[order[position]] = bool(done)
        return recorded

    def _call(
        self, plain: LiteralString, named: LiteralString, params: dict[str, Any]
    ) -> list[tuple[Any, ...]]:
        """One ledger function, a unit by itself (core/tx.py call), named for the tenant
        when known: on Citus handed whole to the tenant's worker."""
        return call(self.conn, *db.by_tenant(plain, named, params, self.tenant))

    def _transact(self, work: Callable[[HandoffTx], T], trace: str | None = None) -> T:
        return transact(self.conn, work, tenant=self.tenant, trace=trace)

    def _count(self, c: Claimed, result: str) -> None:
        metrics.EFFECTS.labels(self.app.name, c.effect, result).inc()

    def _time(self, c: Claimed, call: str, started: float) -> None:
        metrics.PROVIDER_SECONDS.labels(self.app.name, c.effect, call).observe(
            time.perf_counter() - started
        )


def connect(
    database_url: str, app: Consumer, *, autocommit: bool = False
) -> psycopg.Connection[Any]:
    """A session of the app's own role (its failures translated: core/db.connect)."""
    cred = app.credential
    info = make_conninfo(database_url, user=cred.role, password=cred.secret)
    return db.connect(info, autocommit=autocommit)


class Executors:
    """``n`` executor threads in this process, woken by new intents (LISTEN/NOTIFY)."""

    def __init__(self, app: Consumer, database_url: str, config: EffectSettings) -> None:
        if not app.effects:
            raise ConfigurationError(
                f"{app.name} declares no effects (app.effect(...)): nothing to execute"
            )
        self.app, self.database_url, self.config = app, database_url, config
        self._stop = threading.Event()
        self._wake = threading.Condition()
        self._threads: list[threading.Thread] = []
        self.database_down = Outage(log, f"{app.name}: the database (effect executors)")
        self._pool: ClaimPool[Claimed] | None = None
        self._records: RecordGroup[dict[str, Any]] | None = None

    def start(self, n: int | None = None) -> None:
        count = self.config.executors if n is None else n
        metrics.prepare_effects(self.app.name, list(self.app.effects))
        if count > 1:
            self._pool = ClaimPool(self.config.ahead(count))
            self._records = RecordGroup()
        for index in range(count):
            thread = threading.Thread(
                target=self._worker, args=(index,), name=f"executor-{index}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        if count:
            threading.Thread(target=self._listen, name="executor-wake", daemon=True).start()
        log.info("%s: %d executor(s) started", self.app.name, count)

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(deadline - time.monotonic(), 0))
        for effect in self.app.effects.values():
            effect.close()

    def _listen(self) -> None:
        while not self._stop.is_set():
            workers: WorkerListeners | None = None
            try:
                with (
                    connect(self.database_url, self.app, autocommit=True) as conn,
                    db.translated(sent=False),
                ):
                    conn.execute(WAKE)
                    if db.on_citus(conn):
                        # An intent notifies on its tenant's worker: listen there too.
                        own = make_conninfo(self.database_url, user=self.app.credential.role,
                                            password=self.app.credential.secret)  # fmt: skip
                        workers = WorkerListeners(own, WAKE, "effect wake-ups")
                    self._wait_for_intents(conn, workers)
            except DatabaseUnavailable as exc:  # the executors poll meanwhile
                self.database_down.failed(f"wake-ups lost ({exc}); polling")
                self._stop.wait(self.config.poll_s)
            finally:
                if workers is not None:
                    workers.close()

    def _wait_for_intents(
        self, conn: psycopg.Connection[Any], workers: WorkerListeners | None
    ) -> None:
        next_refresh = next_measure = 0.0
        while not self._stop.is_set():
            if time.monotonic() >= next_measure:
                self._measure_open(conn)
                next_measure = time.monotonic() + MEASURE_S
            if workers is None:
                heard = any(True for _ in conn.notifies(timeout=self.config.poll_s, stop_after=1))
            else:
                if time.monotonic() >= next_refresh:  # workers come and go (a rebalance)
                    workers.refresh(conn)
                    next_refresh = time.monotonic() + WORKERS_REFRESH_S
                heard = workers.wait(conn, self.config.poll_s)
            if heard:
                with self._wake:
                    self._wake.notify_all()

    def _measure_open(self, conn: psycopg.Connection[Any]) -> None:
        """The open intents, by state, into the gauges (every state, zeros included).

        Best effort: a failed count (a database not yet upgraded to effect_pending, a
        statement timeout) leaves the gauges as they were and the wake-ups going.
        """
        try:
            rows = conn.execute(ledger.PENDING).fetchall()
        except psycopg.OperationalError:
            raise  # the connection is gone: _listen reconnects
        except psycopg.Error as exc:
            log.warning("%s: open effect intents not counted: %s", self.app.name, exc)
            return
        found = {state: (n, oldest) for state, n, oldest in rows}
        name = self.app.name
        for state in ledger.OPEN_STATES:
            n, oldest = found.get(state, (0, 0.0))
            metrics.EFFECTS_OPEN.labels(name, state).set(n)
            metrics.EFFECTS_OLDEST_OPEN.labels(name, state).set(oldest)
        n, oldest = found.get("unresolved", (0, 0.0))
        metrics.EFFECTS_UNRESOLVED.labels(name).set(n)
        metrics.EFFECTS_OLDEST_OPEN.labels(name, "unresolved").set(oldest)

    def _grouped(self, conn: psycopg.Connection[Any]) -> RecordGroup[dict[str, Any]] | None:
        """The process's record group, on one PostgreSQL. On Citus each record stays a
        call of its own, handed whole to the tenant's worker (effect_record_for)."""
        if self._records is None or db.on_citus(conn):
            return None
        return self._records

    def _hand_back(self, executor: Executor) -> None:
        """On a graceful stop: the pool's intents, claimed and never sent, due again now
        (else they would wait for their leases to run out)."""
        left = self._pool.drain() if self._pool is not None else []
        for c in left:
            executor.release(c)
        if left:
            log.info("%s: %d claimed intent(s) handed back unsent", self.app.name, len(left))

    def _worker(self, index: int) -> None:
        host = f"{socket.gethostname()}:{os.getpid()}"
        while not self._stop.is_set():
            try:
                with connect(self.database_url, self.app, autocommit=True) as conn:
                    self.database_down.ok()
                    executor = Executor(
                        self.app, conn, self.config, worker=f"{host}/{index}",
                        pool=self._pool, records=self._grouped(conn),
                    )  # fmt: skip
                    while not self._stop.is_set():
                        if executor.step():
                            continue
                        with self._wake:
                            self._wake.wait(self.config.poll_s)
                    self._hand_back(executor)
            except (DatabaseUnavailable, OutcomeUnknown) as exc:
                # A restart of PostgreSQL: one line for the outage, none per executor or
                # attempt; what was in flight is the next claim's (its lease runs out).
                self.database_down.failed(f"executor {index}: {exc}; reconnecting")
                self._stop.wait(1.0)
            except Exception:
                log.exception("%s: executor %d failed; restarting it", self.app.name, index)
                self._stop.wait(1.0)
