"""``handoff replay``: re-process an approved, bounded set of records, resumably.

plan -> approve (a named revision) -> run -> (stop -> resume) -> completed.

The runner is the consumer's own processor (guard, ordering, quarantine) on
a connection logged in as the consumer's service, reading the manifest's
positions from Kafka with a consumer of its own (nothing is committed to the
consumer's group). Each record's outcome and the checkpoint are written in
the same transaction as the handler's work, so a stop or a crash between
records loses nothing and a resume applies nothing twice; the guard turns a
record met again into a duplicate. Capabilities the manifest does not list
(effects, workflow starts) are recorded as skipped, never performed.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from confluent_kafka import KafkaError, TopicPartition
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from handoff.consumers.app import Consumer
from handoff.consumers.decoding import Decoder, reader_schema
from handoff.consumers.runtime import message_item
from handoff.consumers.settings import ConsumerSettings
from handoff.consumers.units import Item, Processor
from handoff.consumers.verdicts import Verdict
from handoff.consumers.wrappers import Unit
from handoff.core import guards_sql as guards
from handoff.core.db import translated
from handoff.core.errors import ConfigurationError, InvalidRequest, ReplayRefused
from handoff.core.kafka import reader
from handoff.core.settings import HandoffSettings
from handoff.core.tx import HandoffTx
from handoff.operate import replay_sql as q
from handoff.operate.manifest import Manifest

log = logging.getLogger("handoff.replay")

# A record's outcome in the replay's accounts, from the consumer's verdict.
OUTCOME_OF = {Verdict.APPLY: "completed", Verdict.DUPLICATE: "duplicate",
              Verdict.STALE: "duplicate", Verdict.PARK: "unresolved", Verdict.GAP: "unresolved",
              Verdict.WAITING: "unresolved", Verdict.QUARANTINED: "quarantined",
              Verdict.GONE: "duplicate"}  # fmt: skip
DETAIL_OF = {Verdict.STALE: "older than the consumer's position",
             Verdict.PARK: "behind a quarantined event",
             Verdict.GAP: "waiting for an earlier version",
             Verdict.WAITING: "waiting for an earlier version",
             Verdict.DUPLICATE: "the guard had taken it"}  # fmt: skip
STOP_POLL_S = 0.2  # a stop is seen within this, plus the record in hand


@dataclass
class Plan:
    name: str
    manifest: Manifest
    row: dict[str, Any]

    @property
    def status(self) -> str:
        return str(self.row["status"])


def load(conn: psycopg.Connection[Any], name: str) -> Plan:
    with translated(), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(q.PLAN, {"name": name}).fetchone()
    if row is None:
        raise InvalidRequest(f"no replay plan named {name!r} (handoff replay plan {name} …)")
    return Plan(name, Manifest.model_validate(row["manifest"]), row)


def _audit(conn: psycopg.Connection[Any], name: str, actor: str, action: str,
           revision: str | None, detail: str | None = None) -> None:  # fmt: skip
    conn.execute(q.AUDIT, {"name": name, "actor": actor, "action": action,
                           "revision": revision, "detail": detail})  # fmt: skip


def handler_revision(app: Consumer) -> dict[str, str]:
    return {event_type: h.version for event_type, h in sorted(app.handlers.items())}


def save(conn: psycopg.Connection[Any], name: str, manifest: Manifest, actor: str) -> str:
    """Store a plan (or a new revision of one not started); answers its status."""
    with translated(), conn.transaction():
        row = conn.execute(
            q.SAVE,
            {"name": name, "tenant": manifest.tenant, "consumer": manifest.consumer,
             "manifest": Jsonb(manifest.model_dump(mode="json")),
             "revision": manifest.revision},
        ).fetchone()  # fmt: skip
        if row is None:
            raise ReplayRefused(f"plan {name} has started; plan the rest under a new name")
        _audit(conn, name, actor, "planned", manifest.revision,
               f"{manifest.records} record(s) in {len(manifest.ranges)} range(s)")  # fmt: skip
    return str(row[0])


def approve(conn: psycopg.Connection[Any], name: str, revision: str, actor: str) -> None:
    """Approve exactly ``revision``: the one the approver read."""
    with translated(), conn.transaction():
        plan = load(conn, name)
        if plan.manifest.revision != revision:
            raise ReplayRefused(
                f"plan {name} is at revision {plan.manifest.revision}, not {revision}: "
                "read it again (handoff replay show) and approve what you read"
            )
        if conn.execute(q.APPROVE, {"name": name, "revision": revision, "by": actor}).rowcount != 1:
            raise ReplayRefused(
                f"plan {name} is {plan.status}; only a plan not yet run is approved"
            )
        _audit(conn, name, actor, "approved", revision)


def request_stop(conn: psycopg.Connection[Any], name: str, actor: str) -> None:
    with translated(), conn.transaction():
        if conn.execute(q.REQUEST_STOP, {"name": name}).rowcount != 1:
            raise ReplayRefused(f"plan {name} is {load(conn, name).status}, not running")
        _audit(conn, name, actor, "stop requested", None)


@dataclass
class Status:
    plan: Plan
    outcomes: dict[str, int]
    skipped: dict[str, int]
    missing_ids: list[str]
    audit: list[dict[str, Any]] = field(default_factory=list)

    @property
    def accounted(self) -> int:
        return sum(self.outcomes.values())

    @property
    def reconciled(self) -> bool:
        """Every authorised record met has one outcome; an id plan found all its ids."""
        done = self.plan.status == "completed"
        return done and not self.missing_ids


def status(conn: psycopg.Connection[Any], name: str) -> Status:
    plan = load(conn, name)
    with translated(), conn.cursor(row_factory=dict_row) as cur:
        key = {"name": name, "tenant": plan.manifest.tenant, "consumer": plan.manifest.consumer}
        outcomes = {r["outcome"]: r["n"] for r in cur.execute(q.OUTCOMES, key)}
        skipped = {r["capability"]: r["n"] for r in cur.execute(q.SKIPPED, {"name": name})}
        missing: list[str] = []
        if plan.manifest.event_ids is not None and plan.status == "completed":
            wanted = sorted(set(plan.manifest.event_ids) - set(plan.manifest.excluded))
            missing = [r["id"] for r in cur.execute(
                q.MISSING_IDS, {"name": name, "ids": Jsonb(wanted)})]  # fmt: skip
        audit = cur.execute(q.AUDIT_TRAIL, {"name": name}).fetchall()
    return Status(plan, outcomes, skipped, missing, audit)


# -- the runner ---------------------------------------------------------------------------


class _Allowed:
    """The manifest's capabilities for the units of a replay (core/tx.Capabilities)."""

    def __init__(self, plan: str, allowed: list[str]) -> None:
        self.plan, self.allowed = plan, set(allowed)

    def allows(self, capability: str) -> bool:
        return capability in self.allowed

    def skipped(self, tx: HandoffTx, event_id: str, capability: str) -> None:
        tx.execute(q.SKIP, {"name": self.plan, "event_id": event_id, "capability": capability})
        log.info("replay %s: %s asked for %s; not allowed, skipped", self.plan, event_id,
                 capability)  # fmt: skip


def _key(item: Item) -> str:
    if item.event is not None:
        return item.event.event_id
    p = item.position
    return f"{p.topic}:{p.partition}:{p.offset}"


class _Recording:
    """Replay's wrapper of the consumer's unit (consumers/wrappers.py): inside the unit's
    transaction it limits the handlers to the manifest's capabilities, and records each
    record's outcome and the checkpoint, so they commit with the handler's work."""

    def __init__(self, plan: str, allowed: _Allowed) -> None:
        self.plan, self.allowed = plan, allowed
        self.stop_seen = False

    def __call__(self, unit: Unit) -> Unit:
        def recorded(tx: HandoffTx, items: list[Item], reconcile: bool) -> list[Verdict]:
            tx.capabilities = self.allowed
            verdicts = unit(tx, items, reconcile)
            rows = [_row(item, OUTCOME_OF.get(v, "unresolved"), DETAIL_OF.get(v))
                    for item, v in zip(items, verdicts, strict=True)]  # fmt: skip
            checkpoint = {str(i.position.partition): i.position.offset + 1 for i in items}
            found = tx.execute(
                q.RECORD,
                {"name": self.plan, "items": Jsonb(rows), "checkpoint": Jsonb(checkpoint)},
            ).fetchone()
            self.stop_seen = bool(found and found[0])
            return verdicts

        return recorded


def _row(item: Item, outcome: str, detail: str | None) -> dict[str, Any]:
    p = item.position
    return {"key": _key(item), "partition": p.partition, "offset": p.offset,
            "outcome": outcome, "detail": detail}  # fmt: skip


@dataclass
class RunResult:
    status: str
    reason: str | None
    counts: dict[str, int]


class Replayer:
    """Runs one approved plan with the consumer app it was planned for."""

    def __init__(
        self,
        settings: HandoffSettings,
        app: Consumer,
        name: str,
        *,
        say: Callable[[str], None] = lambda _: None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings, self.app, self.name, self.say, self._sleep = settings, app, name, say, sleep
        self.counts: dict[str, int] = {}

    def _check(self, plan: Plan, tenant: str) -> None:
        m = plan.manifest
        if plan.row["approved_revision"] != m.revision:
            raise ReplayRefused(
                f"plan {plan.name} revision {m.revision} is not approved "
                f"(approved: {plan.row['approved_revision'] or 'none'}); "
                f"handoff replay approve {plan.name} --revision {m.revision}"
            )
        if self.app.name != m.consumer or tenant != m.tenant:
            raise ReplayRefused(
                f"plan {plan.name} is for consumer {m.consumer} of tenant {m.tenant}, "
                f"not {self.app.name} of {tenant}"
            )
        running = handler_revision(self.app)
        if running != m.handler_revision:
            raise ReplayRefused(
                f"plan {plan.name} was approved for handler revision {m.handler_revision}; "
                f"this app has {running}: plan again and have it approved"
            )

    def run(self, *, resume: bool = False) -> RunResult:
        cred = self.app.credential
        info = make_conninfo(self.settings.database_url, user=cred.role, password=cred.secret)
        with (
            psycopg.connect(self.settings.database_url, autocommit=True) as admin,
            psycopg.connect(info, autocommit=True) as conn,  # units BEGIN themselves
            psycopg.connect(info, autocommit=True) as reads,
        ):
            found = reads.execute(guards.WHOAMI).fetchone()
            assert found is not None
            plan = load(admin, self.name)
            self._check(plan, found[0])
            starts = ["stopped"] if resume else ["approved"]
            started = admin.execute(
                q.START, {"name": self.name, "from": starts,
                          "runner": f"{socket.gethostname()}:{os.getpid()}"},
            ).fetchone()  # fmt: skip
            if started is None:
                hint = "resume it" if plan.status == "stopped" else "it must be approved"
                raise ReplayRefused(f"plan {self.name} is {plan.status}; {hint}")
            _audit(admin, self.name, cred.role, "resumed" if resume else "started",
                   plan.manifest.revision)  # fmt: skip
            try:
                status, reason = self._loop(plan.manifest, started[0], conn, reads, found[0])
            except BaseException as exc:
                admin.execute(q.FINISH, {"name": self.name, "status": "stopped",
                                         "reason": f"failed: {exc}"})  # fmt: skip
                raise
            admin.execute(q.FINISH, {"name": self.name, "status": status, "reason": reason})
            _audit(admin, self.name, cred.role, status, plan.manifest.revision, reason)
        return RunResult(status, reason, dict(self.counts))

    def _loop(
        self,
        m: Manifest,
        checkpoint: dict[str, int],
        conn: psycopg.Connection[Any],
        reads: psycopg.Connection[Any],
        tenant: str,
    ) -> tuple[str, str | None]:
        config = ConsumerSettings()
        recording = _Recording(self.name, _Allowed(self.name, m.allowed_capabilities))
        # Every verdict is recorded, so each is read first: no speculative claims.
        processor = Processor(self.app, conn, config, speculate=False, unit_wrappers=[recording],
                              tenant=tenant)  # fmt: skip
        decoder = Decoder(self.settings.schema_registry_url, reader_schema(None))
        ends = {r.partition: r.end for r in m.ranges}
        nexts = {r.partition: max(r.start, int(checkpoint.get(str(r.partition), r.start)))
                 for r in m.ranges}  # fmt: skip
        pending = {p for p in ends if nexts[p] <= ends[p]}
        wanted = set(m.event_ids) if m.event_ids is not None else None
        excluded = set(m.excluded)
        kafka = reader(self.settings.kafka_bootstrap, f"handoff-replay-{self.name}", eof=True)
        kafka.assign([TopicPartition(m.topic, p, nexts[p]) for p in sorted(pending)])
        interval = 1.0 / m.rate
        next_at = time.monotonic()
        last_poll = 0.0
        skipped_since_save: dict[str, int] = {}
        try:
            while pending:
                now = time.monotonic()
                if recording.stop_seen or (
                    now - last_poll >= STOP_POLL_S and self._stopping(reads)
                ):
                    self._save(conn, skipped_since_save)
                    return "stopped", "stop requested"
                if now - last_poll >= STOP_POLL_S:
                    last_poll = now
                msg = kafka.poll(STOP_POLL_S)
                if msg is None:
                    continue
                problem = msg.error()
                if problem is not None:
                    if problem.code() == KafkaError._PARTITION_EOF:
                        # Past the range's end with nothing more to read (its last
                        # offsets may be transaction markers, never delivered).
                        eof = msg.partition() or 0
                        if (msg.offset() or 0) > ends.get(eof, -1):
                            pending.discard(eof)
                        continue
                    raise ConfigurationError(f"replay {self.name}: Kafka: {problem}")
                partition, offset = msg.partition() or 0, msg.offset() or 0
                if partition not in pending:
                    continue
                if offset > ends[partition]:
                    pending.discard(partition)
                    kafka.pause([TopicPartition(m.topic, partition)])
                    continue
                item = message_item(msg, self.app, tenant, decoder, lambda _: False)
                key = _key(item) if item is not None else None
                in_scope = item is not None and (wanted is None or key in wanted)
                if not in_scope:
                    skipped_since_save[str(partition)] = offset + 1
                    if offset == ends[partition]:
                        pending.discard(partition)
                    if offset % 500 == 0:
                        self._save(conn, skipped_since_save)
                    continue
                assert item is not None
                # Paced: records at the manifest's rate, whatever the backlog.
                delay = next_at - time.monotonic()
                if delay > 0:
                    self._sleep(delay)
                next_at = max(next_at, time.monotonic()) + interval
                if key in excluded:
                    outcome = "excluded"
                    self._record_alone(conn, item, outcome, "excluded by the manifest")
                else:
                    verdict = processor.run_one(item)
                    outcome = OUTCOME_OF.get(verdict, "unresolved")
                    if verdict in (Verdict.QUARANTINED, Verdict.WAITING):
                        # Their own transactions (quarantine, set-aside): recorded after.
                        self._record_alone(conn, item, outcome, DETAIL_OF.get(verdict))
                self.counts[outcome] = self.counts.get(outcome, 0) + 1
                skipped_since_save.pop(str(partition), None)
                if offset == ends[partition]:
                    pending.discard(partition)
                reason = self._stop_condition(m)
                if reason:
                    self._save(conn, skipped_since_save)
                    return "stopped", reason
                done = sum(self.counts.values())
                if done % 100 == 0:
                    self.say(f"replay {self.name}: {done} record(s): {self.counts}")
            self._save(conn, skipped_since_save)
            return "completed", None
        finally:
            kafka.close()
            decoder.close()

    def _stopping(self, reads: psycopg.Connection[Any]) -> bool:
        row = reads.execute(q.STOPPING, {"name": self.name}).fetchone()
        return bool(row and row[0])

    def _stop_condition(self, m: Manifest) -> str | None:
        quarantined = self.counts.get("quarantined", 0)
        unresolved = self.counts.get("unresolved", 0)
        if m.stop_when_quarantined and quarantined >= m.stop_when_quarantined:
            return f"stop condition: {quarantined} record(s) quarantined"
        if m.stop_when_unresolved and unresolved >= m.stop_when_unresolved:
            return f"stop condition: {unresolved} record(s) unresolved"
        return None

    def _record_alone(
        self, conn: psycopg.Connection[Any], item: Item, outcome: str, detail: str | None
    ) -> None:
        p = item.position
        params = {
            "name": self.name,
            "items": Jsonb([_row(item, outcome, detail)]),
            "checkpoint": Jsonb({str(p.partition): p.offset + 1}),
        }
        with translated(), conn.transaction():
            conn.execute(q.RECORD, params)

    def _save(self, conn: psycopg.Connection[Any], checkpoint: dict[str, int]) -> None:
        """Move the checkpoint past records that were out of scope."""
        if not checkpoint:
            return
        with translated(), conn.transaction():
            conn.execute(q.RECORD, {"name": self.name, "items": Jsonb([]),
                                    "checkpoint": Jsonb(dict(checkpoint))})  # fmt: skip
        checkpoint.clear()


def when(value: datetime | None) -> str:
    return value.isoformat(timespec="seconds") if value else "-"
