"""Emit throughput and latency, side by side with pgbench tpcb-like on the same server.

Each client is one connection calling the emit function exactly as the HTTP
API does (``emit_as``: credential checked in the same statement), so one
client can act for whichever service owns its document. Clients run in
several processes so that Python's GIL does not cap them.

Owner mixes:
- uniform: every handoff goes to a random other owner of 50;
- hot: documents alternate into and out of one owner, so every emit
  touches that owner's counter rows (the worst case for a hot owner).
"""

from __future__ import annotations

import multiprocessing
import random
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg

from benchmarks.stats import percentile
from handoff.core.emitter import emit_as
from handoff.core.identity import Credential
from handoff.core.models import CreateRequest, HandoffRequest
from handoff.core.services import add_service

OWNERS = 50
DOCS_PER_CLIENT = 16
# Client processes (threads share the rest): Python spends more CPU per emit
# than pgbench does, and threads of one process would also queue on its GIL.
PROCESSES = 8


@dataclass
class EmitResult:
    mix: str
    clients: int
    accepted_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int


def register_owners(database_url: str, tenant: str) -> dict[str, str]:
    with psycopg.connect(database_url) as conn:
        return {
            f"o{i:02d}": add_service(conn, f"o{i:02d}", tenant=tenant, can_create=True).token
            for i in range(OWNERS)
        }


def _client(
    database_url: str,
    tokens: dict[str, str],
    mix: str,
    client_id: str,
    window: tuple[float, float, float],
    out: list[Any],
) -> None:
    start_at, measure_from, stop_at = window
    creds = {name: Credential.parse(t) for name, t in tokens.items()}
    names = sorted(creds)
    hot = names[0]
    rng = random.Random(client_id)
    latencies: list[float] = []
    errors = 0
    with psycopg.connect(database_url, autocommit=True) as conn:
        docs: dict[str, tuple[str, int]] = {}
        for k in range(DOCS_PER_CLIENT):
            doc, owner = f"{client_id}-{k}", rng.choice(names[1:])
            emit_as(
                conn,
                creds[owner],
                CreateRequest(
                    event_id=str(uuid.uuid4()), document_id=doc, owner=owner, status="new"
                ),
            )
            docs[doc] = (owner, 1)
        order = list(docs)
        time.sleep(max(0.0, start_at - time.time()))
        i = 0
        while (now := time.time()) < stop_at:
            doc = order[i % len(order)]
            i += 1
            owner, version = docs[doc]
            if mix == "hot":
                target = rng.choice(names[1:]) if owner == hot else hot
            else:
                target = rng.choice(names)
                while target == owner:
                    target = rng.choice(names)
            request = HandoffRequest(
                event_id=str(uuid.uuid4()),
                event_type="handoff",
                document_id=doc,
                next_owner=target,
                status="working",
                expected_version=version,
            )
            began = time.perf_counter()
            try:
                emit_as(conn, creds[owner], request)
            except Exception:
                errors += 1
                continue
            elapsed = time.perf_counter() - began
            docs[doc] = (target, version + 1)
            if now >= measure_from:
                latencies.append(elapsed * 1000)
    out.append((latencies, errors))


def _process(
    database_url: str,
    tokens: dict[str, str],
    mix: str,
    clients: list[str],
    window: tuple[float, float, float],
    queue: Any,
) -> None:
    out: list[Any] = []
    threads = [
        threading.Thread(target=_client, args=(database_url, tokens, mix, c, window, out))
        for c in clients
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    latencies = [x for lat, _ in out for x in lat]
    queue.put((latencies, sum(e for _, e in out)))


def run(
    database_url: str, tokens: dict[str, str], mix: str, clients: int, seconds: float
) -> EmitResult:
    processes = min(clients, PROCESSES)
    ids = [f"{mix}{clients}-{uuid.uuid4().hex[:6]}-{n}" for n in range(clients)]
    groups = [ids[p::processes] for p in range(processes)]
    warmup = 1.0
    start_at = time.time() + 3.0 + 0.02 * clients  # all connected and documents created
    window = (start_at, start_at + warmup, start_at + warmup + seconds)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_process, args=(database_url, tokens, mix, group, window, queue))
        for group in groups
    ]
    for p in procs:
        p.start()
    results = [queue.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    latencies = sorted(x for lat, _ in results for x in lat)
    return EmitResult(
        mix,
        clients,
        len(latencies) / seconds,
        percentile(latencies, 50),
        percentile(latencies, 99),
        sum(e for _, e in results),
    )
