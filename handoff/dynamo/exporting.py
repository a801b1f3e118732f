"""``handoff export dynamodb``: port PostgreSQL's documents into a table of the AWS design.

The reverse of ``handoff import dynamodb``. Each family is read in keyset
pages and written as the items the DynamoDB store itself writes
(``dynamo/items.py``), 25 per ``BatchWriteItem``, by a few writer threads.
A page's position is saved (in the import's progress table) only once all
its items are written, so a stopped export resumes after its last whole
page; every write is a put of the same item, so repeating a page is
harmless.

- **Services and credentials**: each service's credential item carries the
  secret's hash that PostgreSQL keeps, so the services' existing credentials
  work against the table. A revoked service keeps its registration (it may
  still own work) but gets no credential item.
- **Documents**: states, and each run's history as EVENT items whose payload
  is the relay's envelope. The envelope carries the state's data at that
  version; PostgreSQL's history keeps each change's own data, so the export
  merges them in order per run, as the emit function does (``old || new``).
- **Receipts** keep their fingerprints: both stores fingerprint a request
  alike (core/fingerprint.py), so an identical retry is still recognised.
- **Counts**: each owner's total in shard 0, the other shards zeroed.

Export from a quiet system (writers stopped), as for any port: changes
accepted meanwhile may be missing. The table's stream sees every EVENT item
written; a stream reader started on it republishes them, and consumers'
guards absorb what they applied before.

Then it verifies, per tenant, the owners' counts read back through the
store and a sample of documents (state and history) against PostgreSQL.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from handoff.core.db import translated
from handoff.core.errors import Unavailable
from handoff.core.retry import RetryPolicy
from handoff.core.store import PostgresStore
from handoff.dynamo import export_sql as q
from handoff.dynamo import import_sql
from handoff.dynamo import items as it
from handoff.dynamo import schema as k
from handoff.dynamo.store import ITEM_LIMIT, DynamoStore

PAGE = 1000
# Unprocessed items of a BatchWriteItem mean throttling: back off longer than
# for a conflict, and for longer (the CLI then says to run the export again).
UNPROCESSED = RetryPolicy(attempts=20, base_s=0.05, max_s=2.0, budget_s=120.0)
BATCH = 25  # items per BatchWriteItem
SAMPLE = 50  # documents read back from the table after the export
FAMILIES = ("services", "documents", "receipts", "counts", "rejections")


def _compact(value: Any) -> str:
    # The standard library, not orjson: a client's data may hold integers past 64 bits.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _stamp(at: Any) -> str | None:
    return None if at is None else k.stamp(at)


@dataclass
class Exported:
    items: int = 0
    services: int = 0
    states: int = 0
    events: int = 0
    receipts: int = 0
    rejections: int = 0
    resumed: bool = False
    tenants: set[str] = field(default_factory=set)
    sample: list[tuple[str, str, int]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def keep(self, run: tuple[str, str, int]) -> None:
        """Reservoir sampling: every run exported is equally likely to be read back."""
        if len(self.sample) < SAMPLE:
            self.sample.append(run)
        elif (i := random.randrange(self.states)) < SAMPLE:
            self.sample[i] = run


class _Writer:
    """BatchWriteItem from a few threads; unprocessed items are sent again with backoff."""

    def __init__(self, dynamodb: Any, table: str, writers: int) -> None:
        self.db, self.table = dynamodb, table
        self.pool = ThreadPoolExecutor(writers, thread_name_prefix="export")

    def write(self, found: Iterable[dict[str, Any]]) -> int:
        """Write the items; return when all are in the table."""
        batch: list[dict[str, Any]] = []
        futures: list[Future[None]] = []
        written = 0
        for item in found:
            batch.append({"PutRequest": {"Item": it.to_item(item)}})
            written += 1
            if len(batch) == BATCH:
                futures.append(self.pool.submit(self._batch, batch))
                batch = []
        if batch:
            futures.append(self.pool.submit(self._batch, batch))
        for future in futures:
            future.result()  # re-raises a writer's error
        return written

    def _batch(self, batch: list[dict[str, Any]]) -> None:
        pending = {self.table: batch}

        def once() -> None:
            nonlocal pending
            pending = self.db.batch_write_item(RequestItems=pending).get("UnprocessedItems")
            if pending:  # throttled: what is left goes again after a wait
                raise Unavailable("DynamoDB kept leaving items unprocessed (throttled)")

        UNPROCESSED.run(once, retry_on=(Unavailable,))

    def close(self) -> None:
        self.pool.shutdown(wait=True)


class _Exporter:
    def __init__(self, dynamodb: Any, database_url: str, table: str,
                 tenants: list[str] | None, writers: int, page: int,
                 progress: Callable[[Exported], None]) -> None:  # fmt: skip
        self.table, self.page, self.progress = table, page, progress
        self.tenants = sorted(tenants) if tenants else None
        self.source = f"dynamodb-export:{table}:" + (",".join(self.tenants or []) or "*")
        self.writer = _Writer(dynamodb, table, writers)
        self.found = Exported()
        self.conn = psycopg.connect(database_url, autocommit=True, row_factory=dict_row)

    def run(self) -> Exported:
        done = {r["segment"]: r for r in self.conn.execute(
            import_sql.PROGRESS, {"source": self.source, "segments": len(FAMILIES)})}  # fmt: skip
        self.found.resumed = bool(done)
        try:
            for segment, family in enumerate(FAMILIES):
                saved = done.get(segment)
                if saved is not None and saved["done"]:
                    continue
                start = saved["last_key"] if saved is not None else None
                getattr(self, f"_{family}")(segment, start)
        finally:
            self.writer.close()
        return self.found

    def _args(self, key: list[Any] | None, lowest: list[Any]) -> dict[str, Any]:
        low = key if key else lowest
        return {"tenants": self.tenants, "limit": self.page,
                **{f"k{i}": value for i, value in enumerate(low)}}  # fmt: skip

    def _save(self, segment: int, key: list[Any] | None, done: bool) -> None:
        with translated():
            self.conn.execute(import_sql.SAVE_PROGRESS, {
                "source": self.source, "segment": segment, "segments": len(FAMILIES),
                "last_key": Jsonb(key) if key is not None else None, "items": self.found.items,
                "done": done})  # fmt: skip
        self.progress(self.found)

    def _pages(self, sql: str, segment: int, start: list[Any] | None,
               key: Callable[[dict[str, Any]], list[Any]], lowest: list[Any],
               ) -> Iterator[list[dict[str, Any]]]:  # fmt: skip
        """Keyset pages; each page's position saved after the caller wrote it."""
        last = start
        while True:
            with translated():
                rows = self.conn.execute(sql, self._args(last, lowest)).fetchall()
            if not rows:
                self._save(segment, last, True)
                return
            yield rows
            last = key(rows[-1])
            self._save(segment, last, len(rows) < self.page)
            if len(rows) < self.page:
                return

    # -- the families ---------------------------------------------------------------------

    def _services(self, segment: int, _start: Any) -> None:
        with translated():
            rows = self.conn.execute(q.SERVICES, {"tenants": self.tenants}).fetchall()
        found: list[dict[str, Any]] = []
        for r in rows:
            found.append(it.service(r["tenant_id"], r["name"], r["db_role"]))
            if not r["revoked"]:
                found.append(it.credential(r["db_role"], r["tenant_id"], r["name"],
                                           r["can_create"], bytes(r["secret_hash"])))  # fmt: skip
            self.found.tenants.add(r["tenant_id"])
        self.found.items += self.writer.write(found)
        self.found.services += len(rows)
        self._save(segment, None, True)

    def _documents(self, segment: int, start: Any) -> None:
        for rows in self._pages(q.STATES, segment, start,
                                lambda r: [r["tenant_id"], r["document_id"], r["run_id"]],
                                ["", "", 0]):  # fmt: skip
            history = self.conn.execute(q.HISTORY, {
                "tenant": [r["tenant_id"] for r in rows],
                "document": [r["document_id"] for r in rows],
                "run": [r["run_id"] for r in rows]}).fetchall()  # fmt: skip
            found = [self._state(r) for r in rows] + list(self._events(history))
            self.found.items += self.writer.write(i for i in found if self._fits(i))
            for r in rows:
                self.found.states += 1
                self.found.keep((r["tenant_id"], r["document_id"], r["run_id"]))
            self.found.events += len(history)
            self.found.tenants.update(r["tenant_id"] for r in rows)

    def _state(self, r: dict[str, Any]) -> dict[str, Any]:
        return it.state(
            r["tenant_id"], r["document_id"], r["run_id"], r["version"], r["owner"],
            r["status"], assigned_at=_stamp(r["assigned_at"]), due_at=_stamp(r["due_at"]),
            created_at=k.stamp(r["created_at"]), updated_at=k.stamp(r["updated_at"]),
            completed_at=_stamp(r["completed_at"]), data=_compact(r["data"]),
        )  # fmt: skip

    def _events(self, history: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        run: tuple[str, str, int] | None = None
        data: dict[str, Any] = {}
        for h in history:
            here = (h["tenant_id"], h["document_id"], h["run_id"])
            # Each run starts from its first change's data; later changes merge in.
            data = {**(data if here == run else {}), **h["data"]}
            run = here
            yield it.event(
                h["tenant_id"], h["document_id"], h["run_id"], h["version"],
                event_id=h["event_id"], event_type=h["event_type"], source=h["sender"],
                occurred_at=h["accepted"], owner=h["owner_after"],
                previous_owner=h["owner_before"], status=h["status"],
                assigned_at=h["assigned"], due_at=h["due"], data=data,
                correlation_id=h["correlation_id"], causation_id=h["causation_id"],
            )  # fmt: skip

    def _fits(self, item: dict[str, Any]) -> bool:
        size = len(item.get("data", "")) + len(item.get("payload", ""))
        if size <= ITEM_LIMIT:
            return True
        self.found.problems.append(
            f"{item['PK']} {item['SK']}: {size:,} bytes of data; DynamoDB items hold 400 KB "
            "(not exported)")  # fmt: skip
        return False

    def _receipts(self, segment: int, start: Any) -> None:
        for rows in self._pages(q.RECEIPTS, segment, start,
                                lambda r: [r["tenant_id"], r["event_id"]], ["", ""]):  # fmt: skip
            self.found.items += self.writer.write(
                it.receipt(r["tenant_id"], r["event_id"], bytes(r["fingerprint"]),
                           r["document_id"], r["run_id"], r["version"], r["owner"],
                           r["status"], k.stamp(r["accepted_at"]))
                for r in rows)  # fmt: skip
            self.found.receipts += len(rows)

    def _counts(self, segment: int, _start: Any) -> None:
        with translated():
            rows = self.conn.execute(q.COUNTS, {"tenants": self.tenants}).fetchall()
        # The total in shard 0 and every other shard zeroed: a table that held
        # counts before (an export repeated) sums to the total all the same.
        self.found.items += self.writer.write(
            it.count(r["tenant_id"], r["owner"], shard, int(r["assigned"]) if shard == 0 else 0)
            for r in rows for shard in range(k.SHARDS))  # fmt: skip
        self._save(segment, None, True)

    def _rejections(self, segment: int, start: Any) -> None:
        for rows in self._pages(q.REJECTIONS, segment, start, lambda r: [r["id"]], [0]):
            self.found.items += self.writer.write(
                it.rejection(r["tenant_id"], k.stamp(r["rejected_at"]), f"pg{r['id']}", {
                    name: r[name] for name in (
                        "code", "message", "sender", "document_id", "event_id", "event_type",
                        "expected_version", "current_version", "current_owner",
                        "requested_owner", "status")})
                for r in rows)  # fmt: skip
            self.found.rejections += len(rows)

    def forget(self) -> None:
        with translated():
            self.conn.execute(import_sql.FORGET, {"source": self.source})
        self.conn.close()


def export_table(
    dynamodb: Any,
    database_url: str,
    table: str,
    *,
    tenants: list[str] | None = None,
    writers: int = 4,
    page: int = PAGE,
    progress: Callable[[Exported], None] = lambda _e: None,
) -> Exported:
    """Copy PostgreSQL's documents (of ``tenants``, or all) into ``table``, creating it
    if needed and resuming a stopped export; then verify a sample against PostgreSQL."""
    DynamoStore(dynamodb, table).create_table()
    exporter = _Exporter(dynamodb, database_url, table, tenants, writers, page, progress)
    try:
        found = exporter.run()
        if not found.resumed:  # a name given by mistake exports nothing: say so
            found.problems += [f"tenant {t}: no services or documents to export"
                               for t in sorted(set(tenants or ()) - found.tenants)]  # fmt: skip
        found.problems += verify(dynamodb, database_url, table, found)
    except BaseException:
        exporter.conn.close()
        raise
    if not found.problems or not found.items:  # nothing written: nothing to resume
        exporter.forget()
    else:
        exporter.conn.close()
    return found


def _history_steps(entries: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(e["version"], e["eventType"], e["owner"], e["previousOwner"], e["status"],
             e["source"]) for e in entries]  # fmt: skip


def verify(dynamodb: Any, database_url: str, table: str, found: Exported) -> list[str]:
    """Counts per owner, and the sampled documents' state and history, read back
    through the DynamoDB store, against PostgreSQL's."""
    problems: list[str] = []
    twin = DynamoStore(dynamodb, table)
    here = PostgresStore(database_url)
    try:
        for tenant in sorted(found.tenants):
            ours, theirs = here.owner_counts(tenant), twin.owner_counts(tenant)
            if ours != theirs:
                problems.append(f"counts {tenant}: PostgreSQL {ours}, DynamoDB {theirs}")
        for tenant, doc, run in found.sample:
            ours_doc, theirs_doc = here.document(tenant, doc, run), twin.document(tenant, doc, run)
            if ours_doc != theirs_doc:
                problems.append(f"document {tenant}/{doc} run {run}: PostgreSQL {ours_doc}, "
                                f"DynamoDB {theirs_doc}")  # fmt: skip
            ours_steps = _history_steps(here.history(tenant, doc, run))
            theirs_steps = _history_steps(twin.history(tenant, doc, run))
            if ours_steps != theirs_steps:
                problems.append(f"history {tenant}/{doc} run {run} differs")
    finally:
        here.close()
    return problems
