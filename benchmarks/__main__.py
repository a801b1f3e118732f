"""``make bench``: run the benchmarks against the local stack and print tables."""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import psutil
from rich.console import Console

from benchmarks import (
    audit,
    citus,
    compare,
    consumer,
    effects,
    emit,
    emit_bench,
    hop,
    peer,
    relay,
    sync_replication,
    topics,
    tracing,
    tracker,
)
from benchmarks.dynamodb_model import Prices
from benchmarks.stats import markdown_table
from benchmarks.tenants import remove_tenant
from handoff.core.settings import load_settings
from handoff.stack.local import LocalStack

console = Console()


def bench_relay(rows: int, rate: float, seconds: float) -> str:
    """Relay drain vs a bare produce loop; emit-to-broker latency at a steady rate.

    Latency is measured first, on a quiet system (the steady state), and
    again right after the drain, whose aftermath (whatever the relay's reads
    and bounds leave, the OS writing back the broker's new log segments) is
    left to autovacuum and the checkpointer, as on a user's system: nothing is
    vacuumed or checkpointed in between.

    The backlog is written in seconds, which a user's emits never do, and its
    half a gigabyte of WAL forces checkpoints for a minute after: those are
    the backlog's, so they are taken before the drain (CHECKPOINT), and the
    clean-up's (a million rows deleted) are taken before the next run.
    """
    stack = LocalStack(console=console)
    settings = load_settings(stack.layout.home)
    home = str(stack.layout.home)
    leftover = relay.pending_rows(settings)
    if leftover:
        console.print(f"[bold]relay[/bold]: first publishing {leftover:,} rows left by others…")
        relay.drain(home, f"bench.leftover.{uuid.uuid4().hex[:6]}", leftover)

    def steady_latency() -> relay.Latency:
        console.print(f"  latency at {rate:,.0f} emits/s for {seconds:.0f} s…")
        lat_tenant = f"lat-{uuid.uuid4().hex[:6]}"
        tokens = emit.register_owners(settings.database_url, lat_tenant)
        try:
            return relay.latency(settings, home, tokens, lat_tenant, rate, seconds)
        finally:
            remove_tenant(settings.database_url, lat_tenant, tokens)

    console.print("[bold]relay[/bold]: steady state first")
    quiet = steady_latency()
    console.print(f"writing a backlog of {rows:,} outbox rows…")
    backlog = relay.fill_backlog(
        settings, rows, lambda n: console.print(f"  {n:,} rows", highlight=False)
    )
    superuser_url = stack.postgres.superuser_url("handoff")
    relay.settle(superuser_url, vacuum=False)  # the backlog's own WAL, not the drain's
    topic = f"bench.drain.{uuid.uuid4().hex[:6]}"
    bare_topic = f"bench.bare.{uuid.uuid4().hex[:6]}"
    try:
        topics.make(settings, topic)
        console.print("  draining with handoff relay --once…")
        drained = relay.drain(home, topic, rows)
        console.print(
            f"  {drained.events_per_s:,.0f} events/s, peak RSS {drained.max_rss_mb:.0f} MB"
        )
        topics.make(settings, bare_topic)
        console.print("  bare produce loop…")
        bare = relay.bare_loop(settings, bare_topic, rows)
        console.print(f"  {bare:,.0f} events/s")
        # Right after the drain, as a user's system would be: the drained rows still
        # in the outbox (the relay purges them after its retention), their dead
        # versions and the drain's WAL left to autovacuum and the checkpointer.
        after = steady_latency()
    finally:
        # Its rows, published or not (a failed drain leaves some), and nothing else.
        remove_tenant(settings.database_url, backlog)
        topics.delete(settings, [topic, bare_topic])
        relay.settle(superuser_url, vacuum=True)  # the next run starts where this one did

    def latency_row(label: str, m: relay.Latency) -> list[object]:
        fetch = f"p50 {m.fetch_p50_ms:.1f}, p99 {m.fetch_p99_ms:.1f} ms"
        return [label, float(m.count) / seconds, "",
                f"p50 {m.p50_ms:.1f} ms, p99 {m.p99_ms:.1f} ms ({m.count:,} events); "
                f"of it emit -> relay fetch {fetch}"]  # fmt: skip

    rows_out = [
        ["relay drain (one relay)", drained.events_per_s, f"{drained.events_per_s / bare:.2f}x",
         f"peak RSS {drained.max_rss_mb:.0f} MB"],
        ["bare confluent-kafka loop", bare, "1.00x", "pre-serialised records, same headers"],
        latency_row(f"emit commit -> broker append at {rate:,.0f}/s, steady", quiet),
        latency_row(f"the same, right after the {rows:,} drain", after),
    ]  # fmt: skip
    return markdown_table(["what", "events/s", "vs bare", "notes"], rows_out)


def bench_tracker(sizes: list[int], runs: int) -> str:
    """Read model p50/p99 per size, next to the GROUP BY scan, one run."""
    stack = LocalStack(console=console)
    settings = load_settings(stack.layout.home)
    console.print("[bold]tracker[/bold]: 50 owners, skewed; reads timed as the API makes them")
    results = tracker.run(
        settings,
        stack.layout.home,
        sizes,
        runs,
        lambda line: console.print(line, highlight=False),
    )
    out = stack.layout.home / "bench"
    out.mkdir(exist_ok=True)
    (out / f"tracker-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(
        json.dumps([asdict(r) for r in results], indent=2)
    )

    def cell(t: tracker.Timing) -> str:
        return f"{t.p50_ms:.2f} / {t.p99_ms:.2f}"

    rows: list[list[object]] = [
        [
            f"{r.documents:,}",
            cell(r.owner_page),
            cell(r.overdue_page),
            cell(r.detail),
            cell(r.counts),
            cell(r.completed),
            cell(r.completed_prefix),
            cell(r.group_by),
            f"{r.load_s:.1f}",
        ]
        for r in results
    ]
    smallest, largest = results[0], results[-1]
    rows.append(
        [
            f"{largest.documents:,} ÷ {smallest.documents:,} (p50)",
            f"{largest.owner_page.p50_ms / smallest.owner_page.p50_ms:.2f}x",
            f"{largest.overdue_page.p50_ms / smallest.overdue_page.p50_ms:.2f}x",
            f"{largest.detail.p50_ms / smallest.detail.p50_ms:.2f}x",
            f"{largest.counts.p50_ms / smallest.counts.p50_ms:.2f}x",
            f"{largest.completed.p50_ms / smallest.completed.p50_ms:.2f}x",
            f"{largest.completed_prefix.p50_ms / smallest.completed_prefix.p50_ms:.2f}x",
            f"{largest.group_by.p50_ms / smallest.group_by.p50_ms:.2f}x",
            "",
        ]
    )
    read_model = markdown_table(
        [
            "active documents",
            "owner page p50/p99 ms",
            "overdue p50/p99 ms",
            "detail p50/p99 ms",
            "counts p50/p99 ms",
            "completed p50/p99 ms",
            "completed by id prefix p50/p99 ms",
            "GROUP BY baseline p50/p99 ms",
            "load s",
        ],
        rows,
    )
    kinds = ("owner_page", "overdue_page", "detail", "counts", "completed", "completed_prefix")
    http = markdown_table(
        [
            "active documents",
            "owner page",
            "overdue",
            "detail",
            "counts",
            "completed",
            "completed by prefix",
        ],
        [
            [
                f"{r.documents:,}",
                *(cell(r.http[k]) for k in kinds),
            ]
            for r in results
        ],
    )
    flow_kinds = ("pipeline", "trends_hour", "trends_day", "find_prefix", "find_overdue",
                  "find_data", "operate")  # fmt: skip
    flow = markdown_table(
        [
            "active documents",
            "pipeline",
            "charts, hour",
            "charts, day",
            "find id prefix",
            "find owner overdue by due",
            "find data (walks the bound)",
            "operate (with Kafka lag)",
            "minute sample s",
        ],
        [
            [f"{r.documents:,}", *(cell(r.flow[k]) for k in flow_kinds), f"{r.sample_s:.3f}"]
            for r in results
        ],
    )
    return (
        read_model
        + "\n\nFlow, find and operate reads (read model, p50 / p99 ms), and one minute "
        + "sample of every tenant's waiting work (the tracker's background job):\n"
        + flow
        + "\n\nThe same reads over HTTP (a real handoff serve on loopback; "
        + "client-timed p50 / p99 ms):\n"
        + http
    )


def bench_consumer(events: int, batch_size: int, rate: float, seconds: float) -> str:
    """Guarded consumer vs a bare consume loop and a one-INSERT pgbench; hop latency."""
    stack = LocalStack(console=console)
    settings = load_settings(stack.layout.home)
    console.print("[bold]consumer[/bold]")
    r = consumer.run(
        settings,
        stack.layout.home,
        events,
        batch_size,
        rate,
        seconds,
        lambda line: console.print(line, highlight=False),
        hop.stack_pids(stack),
    )
    out = stack.layout.home / "bench"
    out.mkdir(exist_ok=True)
    (out / f"consumer-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(
        json.dumps(asdict(r), indent=2)
    )
    # The targets are issue 25's: batched >= 25,000 events/s; batch 1 (one lane)
    # >= 0.9x the guarded unit pgbench runs, the database's share of it.
    rows: list[list[object]] = [
        ["bare confluent-kafka consume + decode", r.bare.per_s, "1.00x", "", "no effect, no guard"],
        [f"handoff consume, batch {r.batch_size}", r.batched.per_s,
         f"{r.batched.per_s / r.bare.per_s:.2f}x", f"{r.batched.rss_mb:.0f}",
         f"target >= 25,000/s; {r.batched.events:,} events; {_cpu_note(r.batched)}"],
        ["handoff consume, batch 1", r.single.per_s, f"{r.single.per_s / r.bare.per_s:.2f}x",
         f"{r.single.rss_mb:.0f}",
         f"{r.single.per_s / r.guarded_tps:.2f}x the guarded unit (target >= 0.9x), "
         f"{r.single.per_s / r.python_tps:.2f}x its Python client; {_cpu_note(r.single)}"],
        ["handoff consume, batch 1, each unit sent once the one before committed",
         r.alone.per_s, f"{r.alone.per_s / r.bare.per_s:.2f}x", f"{r.alone.rss_mb:.0f}",
         f"{r.alone.per_s / r.guarded_tps:.2f}x the guarded unit (QUEUE_AHEAD=0; sent ahead: "
         f"{r.single.per_s / r.alone.per_s:.2f}x this); {_cpu_note(r.alone)}"],
        [f"handoff consume, batch 1, {r.concurrency} lanes", r.lanes.per_s,
         f"{r.lanes.per_s / r.bare.per_s:.2f}x", f"{r.lanes.rss_mb:.0f}",
         f"{r.lanes.per_s / r.guarded_tps:.2f}x the guarded unit; {_cpu_note(r.lanes)}"],
        ["pgbench one-INSERT transaction, 1 client", r.pgbench_tps, "", "",
         f"p50 {r.pgbench_p50_ms:.2f} ms, p99 {r.pgbench_p99_ms:.2f} ms"],
        ["pgbench, the guarded one-event unit (guard + one INSERT), 1 client", r.guarded_tps,
         "", "", f"p50 {r.guarded_p50_ms:.2f} ms, p99 {r.guarded_p99_ms:.2f} ms; "
         f"{r.guarded_tps / r.pgbench_tps:.2f}x the one-INSERT (target >= 0.6x)"],
        ["pgbench, the one-event claim (the unit batch 1 sends) + one INSERT, 1 client",
         r.claimed_tps, "", "", f"{r.claimed_tps / r.pgbench_tps:.2f}x the one-INSERT, "
         f"{r.claimed_tps / r.guarded_tps:.2f}x the guarded unit"],
        ["pgbench, the unit's guard row and effect row as plain INSERTs (no guard), 1 client",
         r.floor_tps, "", "", f"{r.floor_tps / r.pgbench_tps:.2f}x the one-INSERT: the floor "
         "under any guard that writes its row in the unit"],
        ["the same unit from a Python client (psycopg, one message), 1 connection",
         r.python_tps, "", "",
         f"{r.python_tps / r.guarded_tps:.2f}x pgbench's: a Python client's ceiling for batch 1"],
        [f"hop: emit commit -> next handler commit at {r.hop.rate:,.0f}/s", r.hop.rate, "",
         f"{r.hop.rss_mb:.0f}",
         f"p50 {r.hop.p50_ms:.1f} ms, p99 {r.hop.p99_ms:.1f} ms ({r.hop.handoffs:,} handoffs; "
         "target p99 <= 50 ms, p50 <= 15 ms; segments: bench hop)"],
    ]  # fmt: skip
    return markdown_table(["what", "events/s", "vs bare", "peak RSS MB", "notes"], rows)


def _cpu_note(run: consumer.Run) -> str:
    """CPU-ms per event by part, and the rate the machine's cores allow at that cost."""
    parts = ", ".join(f"{part} {ms:.3f}" for part, ms in run.cpu_ms.items()
                      if part not in ("machine", "sum of parts"))  # fmt: skip
    machine = run.cpu_ms.get("machine", 0.0)
    cores = psutil.cpu_count() or 1
    ceiling = f"{cores * 1000 / machine:,.0f}/s" if machine > 0 else "n/a"
    return f"CPU-ms per event: {parts}, machine {machine:.3f} (at most {ceiling} on {cores} cores)"


def bench_hop(rate: float, seconds: float, runs: int, lanes: int) -> str:
    """The hop, ``runs`` times: total and per-segment p50/p99, CPU-ms per hop by part."""
    stack = LocalStack(console=console)
    settings = load_settings(stack.layout.home)
    console.print(f"[bold]hop[/bold]: {runs} runs of {seconds:.0f} s at {rate:,.0f} handoffs/s, "
                  f"consumer with {lanes} lane(s)")  # fmt: skip
    measured = hop.runs(settings, stack.layout.home, rate, seconds, runs, hop.stack_pids(stack),
                        lambda line: console.print(line, highlight=False), lanes)  # fmt: skip
    out = stack.layout.home / "bench"
    out.mkdir(exist_ok=True)
    (out / f"hop-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(
        json.dumps([asdict(r) for r in measured], indent=2)
    )
    return "\n\n".join(hop.tables(measured))


def bench_effects(
    executor_counts: list[tuple[int, int]], per_executor: int, latency_ms: int
) -> str:
    """Effects/s through the ledger vs a bare provider loop; unknown -> reconciled."""
    stack = LocalStack(console=console)
    settings = load_settings(stack.layout.home)
    console.print("[bold]effects[/bold]")
    r = effects.run(
        settings,
        stack.layout.home,
        executor_counts,
        per_executor,
        latency_ms,
        lambda line: console.print(line, highlight=False),
    )
    out = stack.layout.home / "bench"
    out.mkdir(exist_ok=True)
    (out / f"effects-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(
        json.dumps(asdict(r), indent=2)
    )
    return markdown_table(
        ["executors", "effects/s (ledger)", f"bare provider loop ({r.latency_ms} ms)",
         "ledger / bare", "notes"],
        effects.result_rows(r),
    )  # fmt: skip


def bench_audit(sizes: list[int]) -> str:
    """``handoff audit`` wall time and peak resident memory by size, one run."""
    stack = LocalStack(console=console)
    settings = load_settings(stack.layout.home)
    console.print("[bold]audit[/bold]: a clean tenant per size, audited as a real process")
    runs = audit.run(settings, stack.layout.home, sizes,
                     lambda line: console.print(line, highlight=False))  # fmt: skip
    out = stack.layout.home / "bench"
    out.mkdir(exist_ok=True)
    (out / f"audit-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(
        json.dumps([asdict(r) for r in runs], indent=2)
    )
    names = sorted(runs[0].checks)
    return markdown_table(
        ["documents", "audit s", "peak RSS MB", *(f"{n} s" for n in names), "load s"],
        [[f"{r.documents:,}", f"{r.audit_s:.1f}", f"{r.peak_rss_mb:.0f}",
          *(f"{r.checks[n]:.1f}" for n in names), f"{r.load_s:.0f}"] for r in runs],
    )  # fmt: skip


def bench_compare(documents: int, seconds: float, reads: int, prices: Prices) -> str:
    """PostgreSQL measured beside the DynamoDB design modelled, one run."""
    stack = LocalStack(console=console)
    settings = load_settings(stack.layout.home)
    console.print("[bold]compare[/bold]: PostgreSQL measured, the DynamoDB design modelled")
    table, raw = compare.run(settings, stack.layout.home, documents, seconds, reads,
                             lambda line: console.print(line, highlight=False),
                             prices)  # fmt: skip
    out = stack.layout.home / "bench"
    out.mkdir(exist_ok=True)
    (out / f"compare-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(json.dumps(raw, indent=2))
    return table


def bench_peer(rows: int, rate: float, seconds: float, runs: int) -> str:
    """handoff relay beside Debezium's outbox connector on one outbox, ``runs`` times."""
    stack = LocalStack(console=console)
    settings = load_settings(stack.layout.home)
    console.print(f"[bold]peer[/bold]: {runs} runs; backlogs of {rows:,} rows, "
                  f"{rate:,.0f}/s for {seconds:.0f} s; handoff relay, then Debezium")  # fmt: skip
    measured = peer.runs(stack, settings, rows, rate, seconds, runs,
                         lambda line: console.print(line, highlight=False))  # fmt: skip
    out = stack.layout.home / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"peer-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(
        json.dumps(peer.as_json(measured), indent=2)
    )
    return peer.table(measured, rows, rate)


def bench_tracing(clients: int, rate: float, seconds: float, rounds: int) -> str:
    """Emits/s and the hop with tracing off, on with sampling 0, on at 100 %, interleaved."""
    stack = LocalStack(console=console)
    settings = load_settings(stack.layout.home)
    console.print(f"[bold]tracing[/bold]: {rounds} rounds of off, sampling 0 and 100 %; "
                  f"{clients} HTTP clients for {seconds:.0f} s, "
                  f"the hop at {rate:,.0f}/s")  # fmt: skip
    measured = tracing.runs(settings, stack.layout.home, stack.settings.cache_dir,
                            hop.stack_pids(stack), seconds, clients, rate, rounds,
                            lambda line: console.print(line, highlight=False))  # fmt: skip
    out = stack.layout.home / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"tracing-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(
        json.dumps([asdict(r) for r in measured], indent=2)
    )
    return tracing.table(measured, clients, rate)


def bench_sync(clients: int, seconds: float, rounds: int) -> str:
    """Strict synchronous replication on and off, same cluster, same run."""
    stack = LocalStack(console=console)
    settings = load_settings(stack.layout.home)
    console.print(f"[bold]sync[/bold]: {clients} clients, {rounds} rounds of sync, async, alone")
    samples = sync_replication.run(stack, settings, clients, int(seconds), rounds,
                                   say=console.print)  # fmt: skip
    out = stack.layout.home / "bench"
    out.mkdir(exist_ok=True)
    (out / f"sync-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(
        json.dumps([asdict(s) for s in samples], indent=2)
    )
    return markdown_table(
        ["emit driver", "replication", "emits/s", "÷ alone", "p50 / p99 ms"],
        sync_replication.table_rows(samples),
    )


def bench_citus(client_counts: list[int], seconds: float, citus_home: str) -> str:
    """One PostgreSQL (the default stack home) beside Citus 1+2 (``citus_home``), same run."""
    from pathlib import Path

    console.print(f"[bold]citus[/bold]: one PostgreSQL beside Citus ({citus_home}), "
                  f"{seconds:.0f} s per run")  # fmt: skip
    rows = citus.run(client_counts, seconds, Path(citus_home).absolute(), console)
    out = LocalStack(console=console).layout.home / "bench"
    out.mkdir(exist_ok=True)
    (out / f"citus-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(
        json.dumps([asdict(r) for r in rows], indent=2)
    )
    return markdown_table(
        ["measure", "clients", "one PostgreSQL /s", "Citus 1+2 /s", "ratio",
         "p50 / p99 ms, one", "p50 / p99 ms, Citus", "to a worker per call", "delegated",
         "two-phase commit"],
        [[r.measure, r.clients, r.one.tps, r.citus.tps, f"{r.citus.tps / r.one.tps:.2f}x",
          f"{r.one.p50_ms:.2f} / {r.one.p99_ms:.2f}",
          f"{r.citus.p50_ms:.2f} / {r.citus.p99_ms:.2f}",
          f"{r.sent_per_call:.1f}", r.delegated, f"{r.two_phase:.0%}"] for r in rows],
    )  # fmt: skip


# Every benchmark by name; the default set runs when none is named.
NAMES = ("emit", "relay", "tracker", "consumer", "effects", "audit", "compare", "hop", "peer",
         "sync", "citus", "tracing")  # fmt: skip


def _positive(kind: type[int] | type[float], zero: bool = False) -> Callable[[str], Any]:
    """An argument type: a number above 0 (or from 0, with ``zero``), said as such."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value < 0 or (value == 0 and not zero):
            raise argparse.ArgumentTypeError(f"{text}: give {'0 or more' if zero else 'above 0'}")
        return value

    return parse


def _counts(text: str) -> list[int]:
    """A comma-separated list of counts above 0 (client counts, sizes)."""
    return [_positive(int)(item.strip()) for item in text.split(",")]


def _layouts(text: str) -> list[tuple[int, int]]:
    try:
        return effects.layouts(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument(
        "which",
        nargs="*",
        default=["emit", "relay", "tracker", "consumer", "effects", "audit"],
        help="benchmarks to run: emit, relay, tracker, consumer, effects, audit; "
        "compare (PostgreSQL beside the DynamoDB design), hop (the hop latency taken apart, "
        "--runs times), peer (handoff relay beside Debezium) and sync (synchronous "
        "replication's cost, on a clustered stack home) and citus (one PostgreSQL beside a "
        "Citus coordinator and 2 workers, --citus-home) and tracing (off, sampling 0 and "
        "100 %%, --rounds) run only when named",
    )
    parser.add_argument("--rows", type=_positive(int), default=1_000_000, help="relay backlog rows")
    parser.add_argument(
        "--rate", type=_positive(float), default=1000.0, help="emits/s for relay latency"
    )
    parser.add_argument(
        "--seconds", type=_positive(float), default=10.0, help="measured time per run"
    )
    parser.add_argument(
        "--clients", type=_counts, default="1,8,32", help="comma-separated client counts"
    )
    parser.add_argument(
        "--sizes",
        type=_counts,
        default="10000,100000,1000000",
        help="tracker: active documents per run",
    )
    parser.add_argument(
        "--reads", type=_positive(int), default=500, help="tracker: timed reads per kind"
    )
    parser.add_argument(
        "--events", type=_positive(int), default=20_000, help="consumer: events per run"
    )
    parser.add_argument(
        "--batch-size", type=_positive(int), default=500, help="consumer: batched size"
    )
    parser.add_argument(
        "--hop-rate",
        type=_positive(float),
        default=500.0,
        help="consumer: handoffs/s for hop latency",
    )
    parser.add_argument(
        "--executors", default="1,4,16", type=_layouts,
        help="effects: comma-separated executor counts, each in one process, or as "
        "executors/processes (16/2: 16 executors in 2 processes)",
    )  # fmt: skip
    parser.add_argument(
        "--per-executor",
        type=_positive(int),
        default=200,
        help="effects: intents per executor per run",
    )
    parser.add_argument(
        "--provider-latency-ms",
        type=_positive(int, zero=True),
        default=20,
        help="effects: the provider's latency",
    )
    parser.add_argument(
        "--audit-sizes", type=_counts, default="100000,1000000", help="audit: documents per run"
    )
    parser.add_argument("--compare-documents", type=_positive(int), default=1_000_000,
                        help="compare: active documents for the tracker reads")  # fmt: skip
    price = _positive(float, zero=True)
    parser.add_argument("--write-price", type=price, default=Prices.write_per_million,
                        help="compare: USD per million DynamoDB write request units")  # fmt: skip
    parser.add_argument("--read-price", type=price, default=Prices.read_per_million,
                        help="compare: USD per million DynamoDB read request units")  # fmt: skip
    parser.add_argument("--gb-month-price", type=price, default=Prices.gb_month,
                        help="compare: USD per GB-month of DynamoDB storage")  # fmt: skip
    parser.add_argument(
        "--rounds", type=_positive(int), default=3, help="sync, tracing: rounds of each mode"
    )
    parser.add_argument(
        "--runs", type=_positive(int), default=5, help="hop: runs, each --seconds long"
    )
    parser.add_argument(
        "--peer-rows", type=_positive(int), default=100_000, help="peer: backlog rows"
    )
    parser.add_argument(
        "--peer-runs", type=_positive(int), default=3, help="peer: runs of every scenario"
    )
    parser.add_argument(
        "--hop-lanes", type=_positive(int), default=1, help="hop: the consumer's lanes"
    )
    parser.add_argument(
        "--citus-home",
        default=".handoff-citus",
        help="citus: the Citus stack home (started if it is not running)",
    )
    parser.add_argument(
        "--citus-clients", type=_counts, default="8,32", help="citus: emit client counts"
    )
    args = parser.parse_args()
    unknown = [name for name in args.which if name not in NAMES]
    if unknown:
        parser.error(f"no benchmark named {', '.join(unknown)}; there are {', '.join(NAMES)}")
    counts = args.clients
    if "emit" in args.which:
        table = emit_bench.run(args.seconds, counts, console)
        console.print("\n[bold]Emit: accepted handoffs per second[/bold]")
        print(table)
    if "relay" in args.which:
        table = bench_relay(args.rows, args.rate, max(args.seconds, 20.0))
        console.print("\n[bold]Relay[/bold]")
        print(table)
    if "tracker" in args.which:
        table = bench_tracker(args.sizes, args.reads)
        console.print("\n[bold]Tracker reads (server-side)[/bold]")
        print(table)
    if "consumer" in args.which:
        table = bench_consumer(args.events, args.batch_size, args.hop_rate, args.seconds)
        console.print("\n[bold]Consumer[/bold]")
        print(table)
    if "hop" in args.which:
        table = bench_hop(args.hop_rate, max(args.seconds, 20.0), args.runs, args.hop_lanes)
        console.print("\n[bold]Hop: emit commit -> the next handler's commit[/bold]")
        print(table)
    if "effects" in args.which:
        table = bench_effects(
            args.executors, args.per_executor,
            args.provider_latency_ms,
        )  # fmt: skip
        console.print("\n[bold]Effects[/bold]")
        print(table)
    if "compare" in args.which:
        prices = Prices(args.write_price, args.read_price, args.gb_month_price)
        table = bench_compare(args.compare_documents, args.seconds, args.reads, prices)
        console.print("\n[bold]PostgreSQL (measured) beside the DynamoDB design (modelled)[/bold]")
        print(table)
    if "peer" in args.which:
        table = bench_peer(args.peer_rows, args.rate, args.seconds, args.peer_runs)
        console.print("\n[bold]handoff relay beside Debezium's outbox connector[/bold]")
        print(table)
    if "sync" in args.which:
        table = bench_sync(max(counts), args.seconds, args.rounds)
        console.print("\n[bold]Strict synchronous replication: emits with and without[/bold]")
        console.print("sync: the standby acknowledges every commit; async: it streams, no "
                      "commit waits; alone: the standby stopped")  # fmt: skip
        print(table)
    if "citus" in args.which:
        table = bench_citus(args.citus_clients, args.seconds,
                            args.citus_home)  # fmt: skip
        console.print("\n[bold]One PostgreSQL beside Citus (a coordinator, 2 workers)[/bold]")
        console.print("on one machine: what the coordinator and distribution cost, not scaling")
        print(table)
    if "tracing" in args.which:
        table = bench_tracing(max(counts), args.hop_rate, args.seconds, args.rounds)
        console.print("\n[bold]What tracing costs (exporting to Zipkin)[/bold]")
        print(table)
    if "audit" in args.which:
        table = bench_audit(args.audit_sizes)
        console.print("\n[bold]Audit[/bold]")
        print(table)


if __name__ == "__main__":
    main()
