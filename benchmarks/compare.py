"""``handoff bench compare``: PostgreSQL measured beside the AWS design modelled.

Measured here, on the local stack (labelled "measured"): accepted emits/s
at 8 clients, uniform and with one hot owner, by both drivers (pgbench's C
client running the emit function, and the product's Python emitter); the
tracker's read-model p50/p99 at N active documents; the counts' cost (the
maintained counts read beside the GROUP BY they replace, and what a hot
owner costs the emits); the bytes each handoff keeps. Modelled from
published limits and prices (labelled "modelled", with the source), in
``dynamodb_model``. Everything the run created is removed afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import emit, emit_pgbench, tracker
from benchmarks.dynamodb_model import SOURCES, Model, Prices, model
from benchmarks.stats import markdown_table
from benchmarks.tenants import remove_tenant
from handoff.core.settings import HandoffSettings

CLIENTS = 8

# Bytes kept per accepted handoff: its history row, its receipt and its outbox
# row (until the relay's retention purges it), heap tuples without indexes.
KEPT = """
SELECT (SELECT avg(pg_column_size(h.*)) FROM handoff.document_history h
         WHERE h.tenant_id = %(tenant)s),
       (SELECT avg(pg_column_size(r.*)) FROM handoff.receipts r WHERE r.tenant_id = %(tenant)s),
       (SELECT avg(pg_column_size(o.*)) FROM handoff.outbox o WHERE o.tenant_id = %(tenant)s)
"""


@dataclass
class Measured:
    seconds: float
    documents: int
    emit_pgbench: dict[str, dict[str, float]]  # mix -> tps, p50_ms, p99_ms
    emit_python: dict[str, dict[str, float]]
    reads: dict[str, dict[str, float]]  # kind -> p50_ms, p99_ms
    kept_bytes: dict[str, float]


def measure(settings: HandoffSettings, home: Path, documents: int, seconds: float, reads: int,
            say: Callable[[str], None]) -> Measured:  # fmt: skip
    tenant = f"cmp-{uuid.uuid4().hex[:8]}"
    tokens = emit.register_owners(settings.database_url, tenant)
    by_pgbench: dict[str, dict[str, float]] = {}
    by_python: dict[str, dict[str, float]] = {}
    try:
        for mix in ("uniform", "hot"):
            say(f"  emit, {mix}, {CLIENTS} clients, {seconds:.0f} s per driver…")
            pg = emit_pgbench.run(settings.database_url, tenant, tokens, mix, CLIENTS,
                                  int(seconds))  # fmt: skip
            by_pgbench[mix] = {"per_s": pg.tps, "p50_ms": pg.p50_ms, "p99_ms": pg.p99_ms}
            py = emit.run(settings.database_url, tokens, mix, CLIENTS, seconds)
            if py.errors:
                raise RuntimeError(f"{py.errors} emit(s) failed in the {mix} run")
            by_python[mix] = {"per_s": py.accepted_per_s, "p50_ms": py.p50_ms,
                              "p99_ms": py.p99_ms}  # fmt: skip
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            row = conn.execute(KEPT, {"tenant": tenant}).fetchone()
        assert row is not None
        kept = {"history": float(row[0] or 0), "receipt": float(row[1] or 0),
                "outbox": float(row[2] or 0)}  # fmt: skip
    finally:
        remove_tenant(settings.database_url, tenant, tokens)
    say(f"  tracker reads at {documents:,} active documents ({reads} of each kind)…")
    (size,) = tracker.run(settings, home, [documents], reads, say)
    timed = {name: getattr(size, name) for name in
             ("owner_page", "overdue_page", "detail", "counts", "group_by")}  # fmt: skip
    return Measured(
        seconds=seconds, documents=documents, emit_pgbench=by_pgbench, emit_python=by_python,
        reads={n: {"p50_ms": t.p50_ms, "p99_ms": t.p99_ms} for n, t in timed.items()},
        kept_bytes=kept,
    )  # fmt: skip


def _rate(figures: dict[str, float]) -> str:
    return f"{figures['per_s']:,.0f}/s ({_ms(figures)})"


def _ms(figures: dict[str, float]) -> str:
    return f"p50 {figures['p50_ms']:.2f} ms, p99 {figures['p99_ms']:.2f} ms"


def report(m: Measured, plain: Model, due: Model, large: Model, prices: Prices) -> str:
    """The side-by-side tables, every figure labelled measured or modelled."""
    pg, py = m.emit_pgbench, m.emit_python
    hot_ratio = pg["hot"]["per_s"] / pg["uniform"]["per_s"]
    measured = "measured, this machine"
    rows: list[list[object]] = [
        [f"emits/s, {CLIENTS} clients, uniform owners",
         f"{_rate(pg['uniform'])} pgbench driver; {_rate(py['uniform'])} Python driver "
         f"({measured})",
         f"{plain.uniform_ceiling_per_s:,.0f}/s at the default 40,000 write units/s table "
         f"quota ({plain.write_units_table} units a handoff; modelled)", "table-quota"],
        [f"emits/s, {CLIENTS} clients, one hot owner",
         f"{_rate(pg['hot'])} pgbench; {_rate(py['hot'])} Python ({measured})",
         f"{plain.hot_owner_ceiling_per_s:,.0f}/s: the hot owner's ByOwner key, one partition "
         "(modelled)", "partition"],
        ["hot count item ceiling",
         f"no ceiling of its own: {hot_ratio:.2f}x the uniform rate with the hot owner's "
         f"counter rows ({measured})",
         f"{plain.count_item_ceiling_per_s:,.0f} transactional updates/s per count item; "
         f"{plain.count_shards_ceiling_per_s:,.0f}/s over the store's 16 shards (modelled)",
         "partition"],
        [f"owner page (50), {m.documents:,} active documents",
         f"{_ms(m.reads['owner_page'])} ({measured})",
         f"{plain.owner_page_read_units:g} read units, one Query page, eventually consistent "
         "(modelled)", "units"],
        ["overdue page (50)", f"{_ms(m.reads['overdue_page'])} ({measured})",
         f"{plain.owner_page_read_units:g} read units on ByOwnerDue (modelled)", "units"],
        ["document detail (state + 5 versions)", f"{_ms(m.reads['detail'])} ({measured})",
         f"{plain.detail_read_units:g} read units, strongly consistent (modelled)",
         "units"],
        ["counts for 50 owners",
         f"{_ms(m.reads['counts'])} maintained counts; GROUP BY instead: "
         f"{_ms(m.reads['group_by'])} ({measured})",
         f"{plain.counts_read_units:g} read units in {plain.counts_calls} BatchGetItem calls "
         "(modelled)", "pages"],
        ["bytes kept per handoff",
         f"{sum(m.kept_bytes.values()):,.0f} (history {m.kept_bytes['history']:.0f}, receipt "
         f"{m.kept_bytes['receipt']:.0f}, outbox {m.kept_bytes['outbox']:.0f} until purged; "
         f"heap rows without indexes; {measured})",
         f"{plain.storage_bytes_per_handoff:,} (event and receipt items; modelled)",
         "sizes"],
    ]  # fmt: skip
    keys = list(SOURCES)
    for row in rows:  # the source as a numbered note under the table
        row[-1] = f"[{keys.index(str(row[-1])) + 1}]"
    side = markdown_table(["", "PostgreSQL + Kafka (Handoff)", "DynamoDB design", "source"],
                          rows)  # fmt: skip
    notes = "\n".join(f"{i}. {SOURCES[key]}" for i, key in enumerate(keys, 1))
    cost_rows: list[list[object]] = []
    for label, found in (("no data (as measured)", plain), ("no data, with a deadline", due),
                         (f"{large.data_bytes:,} bytes of data", large)):  # fmt: skip
        c = found.cost_per_million
        cost_rows.append([label, f"{found.write_units_table} + {found.write_units_indexes}",
                          f"{found.read_units:g}", f"${c['writes']:.2f}", f"${c['reads']:.2f}",
                          f"${c['stream reads']:.3f}", f"${c['storage, a month']:.3f}",
                          f"${c['total']:.2f}"])  # fmt: skip
    costs = markdown_table(
        ["handoff", "write units (table + indexes)", "read units", "writes", "reads",
         "stream reads", "storage, a month", "total"], cost_rows)  # fmt: skip
    million_s = 1e6 / pg["uniform"]["per_s"]
    return (
        side
        + "\n\nSources of the modelled figures:\n"
        + notes
        + "\n\nDynamoDB on-demand cost per million handoffs (modelled; prices: "
        + f"${prices.write_per_million}/M write units, ${prices.read_per_million}/M read units, "
        + f"${prices.gb_month}/GB-month [{keys.index('prices') + 1}]):\n"
        + costs
        + f"\n\nPostgreSQL: a million handoffs took {million_s:,.0f} s of this machine's "
        + f"database at {CLIENTS} clients (measured, pgbench driver); price it at your "
        + "server's cost."
    )


def run(settings: HandoffSettings, home: Path, documents: int, seconds: float, reads: int,
        say: Callable[[str], None], prices: Prices | None = None,
        large_data: int = 2048) -> tuple[str, dict[str, Any]]:  # fmt: skip
    prices = prices or Prices()
    found = measure(settings, home, documents, seconds, reads, say)
    plain, due, large = model(0, prices=prices), model(0, due=True, prices=prices), model(
        large_data, prices=prices)  # fmt: skip
    raw = {"measured": asdict(found), "modelled": [plain.as_dict(), due.as_dict(),
           large.as_dict()], "prices": asdict(prices), "sources": SOURCES}  # fmt: skip
    return report(found, plain, due, large, prices), raw
