"""Retention of receipts, guards, published outbox rows, rejections and closed
quarantine entries, configured with the replay window (``handoff retention``).

One row in ``handoff.retention`` holds the windows, so every process reads
the same. Receipts, guards and the outbox are kept at least as long as the
replay window: a replayed event older than its guard, or a re-sent request
older than its receipt, would otherwise act a second time. A setting that
breaks this is refused with that explanation (and the table's CHECK
constraints refuse it again, whoever writes it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any, LiteralString

import psycopg
from psycopg.rows import dict_row

from handoff.core.db import on_citus, translated
from handoff.core.errors import InvalidRequest, RetentionTooShort
from handoff.operate import retention_sql as q

# Kept at least as long as the replay window, and what goes wrong otherwise.
COVERING = {
    "receipts": "a re-sent request older than its receipt would be accepted again",
    "guards": "a replayed event older than its guard would act again (a second payment)",
    "outbox": "a replay by event id would not find the event's payload",
}
PURGES: dict[str, LiteralString] = {
    "receipts": q.PURGE_RECEIPTS,
    "guards": q.PURGE_GUARDS,
    "outbox": q.PURGE_OUTBOX,
    "rejections": q.PURGE_REJECTIONS,
    "quarantine": q.PURGE_QUARANTINE,
}
BATCH = 10_000


@dataclass(frozen=True)
class Retention:
    replay_window: timedelta
    receipts: timedelta
    guards: timedelta
    outbox: timedelta
    rejections: timedelta
    quarantine: timedelta
    updated_at: datetime | None = None
    updated_by: str | None = None

    def windows(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in
                ("updated_at", "updated_by")}  # fmt: skip


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> timedelta:
    """'90m', '12h', '30d', '2w' (or a combination, '1d12h')."""
    parts = re.findall(r"(\d+)\s*([smhdw])", text.strip().lower())
    if not parts or "".join(n + u for n, u in parts) != re.sub(r"\s", "", text.lower()):
        raise InvalidRequest(f"{text!r} is not a duration; write e.g. 12h, 30d or 2w")
    seconds = sum(int(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise InvalidRequest(f"{text!r}: a retention must be longer than zero")
    return timedelta(seconds=seconds)


def say(delta: timedelta) -> str:
    """A window as it was likely written: '30d', '12h', '1d12h'."""
    seconds = int(delta.total_seconds())
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            out += f"{seconds // size}{unit}"
            seconds %= size
    return out or "0s"


def current(conn: psycopg.Connection[Any]) -> Retention:
    with translated(), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(q.SETTINGS).fetchone()
    assert row is not None, "the migration inserts the one retention row"
    return Retention(**row)


def check(wanted: Retention) -> None:
    """Refuse a retention that does not cover the replay window, saying why."""
    problems = [
        f"{name} {say(getattr(wanted, name))} is shorter than the replay window "
        f"{say(wanted.replay_window)}: {why}"
        for name, why in COVERING.items()
        if getattr(wanted, name) < wanted.replay_window
    ]
    if problems:
        raise RetentionTooShort(
            "; ".join(problems) + ". Keep them at least as long as the replay window, "
            "or shorten the replay window first."
        )


def configure(conn: psycopg.Connection[Any], *, by: str, **changes: timedelta) -> Retention:
    """Change some windows; the rest stay. Checked before it is written."""
    unknown = set(changes) - set(current(conn).windows())
    if unknown:
        raise InvalidRequest(f"no retention named {', '.join(sorted(unknown))}")
    with translated(), conn.transaction():
        conn.execute(q.LOCK)
        wanted = Retention(**{**current(conn).windows(), **changes})
        check(wanted)
        params = {name: changes.get(name) for name in wanted.windows()}
        with conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute(q.UPDATE, {**params, "by": by}).fetchone()
    assert row is not None
    return Retention(**row)


def purge(
    conn: psycopg.Connection[Any],
    *,
    only: list[str] | None = None,
    limit: int = BATCH,
    progress: Callable[[str, int], None] = lambda _family, _n: None,
    stopping: Callable[[], bool] = lambda: False,
) -> dict[str, int]:
    """Delete what is older than its window, in batches; how many rows each family lost."""
    with translated():
        cut = conn.execute(q.CUTOFFS).fetchone()
        assert cut is not None
        cutoffs = dict(zip(("receipts", "guards", "outbox", "rejections", "quarantine"), cut,
                           strict=True))  # fmt: skip
        statements = q.CITUS_PURGES if on_citus(conn) else PURGES
        done: dict[str, int] = {}
        for family, statement in statements.items():
            if only and family not in only:
                continue
            done[family] = 0
            while not stopping():
                deleted = conn.execute(statement, {"cutoff": cutoffs[family], "limit": limit})
                done[family] += deleted.rowcount
                progress(family, done[family])
                if deleted.rowcount < limit:
                    break
    return done
