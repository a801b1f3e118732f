"""``handoff import dynamodb``: port a table of the AWS design into PostgreSQL.

The table is scanned in parallel segments (DynamoDB's Segment/TotalSegments),
each in a thread of its own with a connection of its own. Each page's items
are written in one transaction with the segment's position (its
LastEvaluatedKey), so a stopped import resumes where each segment got to,
and the inserts are idempotent besides. States, history and receipts are
copied; per-owner counters are recomputed from the states afterwards (the
deadline counters follow the state rows through their trigger). Then it
verifies: counts equal states and versions are gapless (the auditor's
checks), and every receipt names an accepted version.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
import psycopg
from psycopg.types.json import Jsonb

from handoff.core.db import translated
from handoff.core.micros import from_micros
from handoff.dynamo import import_sql as q
from handoff.dynamo.items import plain
from handoff.dynamo.schema import parse_stamp
from handoff.operate import audit_sql

# Items asked per scan page. DynamoDB ends a page at 1 MB before that (a few thousand
# small items); moto, which reads its whole table for every page, is spared many pages.
PAGE = 10_000


def _instant(value: Any) -> datetime | None:
    return None if value is None else from_micros(int(value))


@dataclass
class Imported:
    items: int = 0
    states: int = 0
    events: int = 0
    receipts: int = 0
    tenants: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    unregistered: list[tuple[str, str]] = field(default_factory=list)


def _rows(items: list[dict[str, Any]], found: Imported) -> dict[str, list[dict[str, Any]]]:
    rows: dict[str, list[dict[str, Any]]] = {"state": [], "history": [], "receipt": []}
    for raw in items:
        item = plain(raw)
        sk = str(item.get("SK", ""))
        if sk.startswith("STATE#"):
            rows["state"].append({
                "tenant": item["tenant"], "document_id": item["document_id"],
                "run_id": int(item["run_id"]), "owner": item.get("owner"),
                "status": item["status"], "version": int(item["version"]),
                "assigned_at": parse_stamp(item.get("assigned_at")),
                "due_at": parse_stamp(item.get("due_at")),
                "created_at": parse_stamp(item["created_at"]),
                "updated_at": parse_stamp(item["updated_at"]),
                "completed_at": parse_stamp(item.get("completed_at")),
                "data": Jsonb(orjson.loads(item["data"])),
            })  # fmt: skip
            found.tenants.add(str(item["tenant"]))
        elif sk.startswith("EVENT#"):
            e = orjson.loads(item["payload"])
            rows["history"].append(
                {
                    "tenant": e["tenantId"],
                    "document_id": e["documentId"],
                    "run_id": e["runId"],
                    "version": e["version"],
                    "event_id": e["eventId"],
                    "event_type": e["eventType"],
                    "sender": e["source"],
                    "owner_before": e.get("previousOwner"),
                    "owner_after": e.get("owner"),
                    "status": e["status"],
                    "accepted_at": _instant(e["occurredAt"]),
                    "assigned_at": _instant(e.get("assignedAt")),
                    "due_at": _instant(e.get("dueAt")),
                    "data": Jsonb(e.get("data") or {}),
                    "correlation_id": e.get("correlationId"),
                    "causation_id": e.get("causationId"),
                }
            )
        elif sk == "RECEIPT":
            tenant = str(item["PK"]).split("#", 2)[1]
            rows["receipt"].append({
                "tenant": tenant, "event_id": str(item["PK"]).split("#RECEIPT#", 1)[1],
                "fingerprint": bytes(item["fingerprint"]), "document_id": item["document_id"],
                "run_id": int(item["run_id"]), "version": int(item["version"]),
                "owner": item.get("owner"), "status": item["status"],
                "accepted_at": parse_stamp(item["accepted_at"]),
            })  # fmt: skip
    return rows


def import_table(
    dynamodb: Any,
    database_url: str,
    table: str,
    *,
    segments: int = 4,
    page: int = PAGE,
    progress: Callable[[int], None] = lambda _n: None,
) -> Imported:
    """Copy ``table`` into PostgreSQL, resuming a stopped import; then verify."""
    source = f"dynamodb:{table}"
    found = Imported()
    lock = threading.Lock()
    with psycopg.connect(database_url, autocommit=True) as conn:
        done = {r[0]: r for r in conn.execute(q.PROGRESS, {"source": source,
                                                           "segments": segments})}  # fmt: skip
    errors: list[BaseException] = []
    failed = threading.Event()

    def scan(segment: int) -> None:
        try:
            _scan(dynamodb, database_url, table, source, segment, segments, page,
                  done.get(segment), found, lock, progress, failed)  # fmt: skip
        except BaseException as exc:  # the others stop after their page in hand
            errors.append(exc)
            failed.set()

    threads = [threading.Thread(target=scan, args=(s,), name=f"import-{s}")
               for s in range(segments)]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    _finish(database_url, source, found)
    return found


def _scan(
    dynamodb: Any, database_url: str, table: str, source: str, segment: int, segments: int,
    page_size: int, resumed: Any, found: Imported, lock: threading.Lock,
    progress: Callable[[int], None], failed: threading.Event,
) -> None:  # fmt: skip
    if resumed is not None and resumed[3]:
        return  # this segment finished before
    start = resumed[1] if resumed is not None else None
    items = int(resumed[2]) if resumed is not None else 0
    with psycopg.connect(database_url, autocommit=True) as conn:
        while True:
            if failed.is_set():
                return
            # A saved position every page (1 MB at most), so a resume repeats little.
            args: dict[str, Any] = {"TableName": table, "Segment": segment, "Limit": page_size,
                                    "TotalSegments": segments, "ConsistentRead": True}  # fmt: skip
            if start:
                args["ExclusiveStartKey"] = start
            page = dynamodb.scan(**args)
            rows = _rows(page["Items"], found)
            start = page.get("LastEvaluatedKey")
            items += len(page["Items"])
            with translated(), conn.transaction(), conn.cursor() as cur:
                for kind, sql in (("state", q.STATE), ("history", q.HISTORY),
                                  ("receipt", q.RECEIPT)):  # fmt: skip
                    if rows[kind]:
                        cur.executemany(sql, rows[kind])
                cur.execute(q.SAVE_PROGRESS, {
                    "source": source, "segment": segment, "segments": segments,
                    "last_key": Jsonb(start) if start else None, "items": items,
                    "done": start is None})  # fmt: skip
            with lock:
                found.items += len(page["Items"])
                found.states += len(rows["state"])
                found.events += len(rows["history"])
                found.receipts += len(rows["receipt"])
                progress(found.items)
            if start is None:
                return


def _finish(database_url: str, source: str, found: Imported) -> None:
    """Recount, then verify what the import wrote (per imported tenant)."""
    with psycopg.connect(database_url, autocommit=True) as conn, translated():
        if not found.tenants:  # a resumed import that had nothing left: find them again
            return
        tenants = sorted(found.tenants)
        with conn.transaction():
            conn.execute(q.UNCOUNT, {"tenants": tenants})
            conn.execute(q.RECOUNT, {"tenants": tenants})
        for tenant in tenants:
            for name, sql in (("counts", audit_sql.COUNTS), ("versions", audit_sql.VERSIONS)):
                bad = conn.execute(sql, {"tenant": tenant, "window_s": 0}).fetchall()
                found.problems += [f"{name} {tenant}: {row}" for row in bad[:20]]
        orphans = conn.execute(q.ORPHAN_RECEIPTS, {"tenants": tenants}).fetchall()
        found.problems += [f"receipt without its version: {row}" for row in orphans]
        found.unregistered = [(t, o) for t, o in conn.execute(q.UNREGISTERED_OWNERS,
                                                               {"tenants": tenants})]  # fmt: skip
        if not found.problems:
            conn.execute(q.FORGET, {"source": source})
