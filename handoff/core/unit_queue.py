"""Units sent ahead: the next unit travels while the database is still on this one.

A consumer at batch 1 in one lane sends a unit, waits for its answer, and
only then sends the next: between two units the database waits for the
client's round trip and Python work, and the client waits for the
database's work and the commit's flush. Measured on the 2-core test
machine (the guarded one-event unit, claim + one row): 1,236-1,290 units/s
sent one after another, 2,324-2,367 with the next unit prepared while the
database ran the one before, and 2,680-2,780 with the next one already
queued behind it (pgbench ran the same unit at about 2,750/s).

How a unit travels here: libpq's pipeline mode, each statement of the unit
(bound on the client, as core/wire.py binds them) followed by one Sync.
With no BEGIN or COMMIT, the statements up to a Sync are one implicit
transaction: they commit together at the Sync, or a failing one rolls back
what ran before it and the rest are skipped. So a unit that fails leaves
the session idle, and the unit queued behind it runs as if it had been sent
alone. (A simple-protocol message with BEGIN ... COMMIT cannot be queued:
libpq refuses a second query before the first's results are read, and an
error would leave the session in a failed transaction block for the next.)

A statement sent a second time goes as a prepared statement: the database
then parses and plans it once per session, not once per unit, as pgbench's
``-M prepared`` does. Parameters travel apart from the text, bound by
psycopg's own query conversion. A name is used only once the unit that
prepared it has committed (a failed unit's later messages are skipped, its
Parse among them), and at most ``PREPARED_MAX`` are kept; past that,
statements go unnamed, parsed each time.

Results are read in the order the units were sent (``outcome``), and the
connection leaves pipeline mode when none is left, so that the same
connection can be used as usual in between.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import psycopg
from psycopg import errors as pg
from psycopg import generators, pq
from psycopg._queries import PostgresQuery  # psycopg's own %s -> $n conversion (3.x)
from psycopg.adapt import Transformer

from handoff.core.db import translated, translation
from handoff.core.wire import Statement

_DONE = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)

# Prepared statements a queue keeps on its session: a handler's statements are a
# handful; one that makes its SQL text anew each time would otherwise add a
# statement to the session per unit.
PREPARED_MAX = 64
# Statements remembered as sent once (the next time they are prepared); forgotten
# all at once past this, so that texts made anew cannot grow the set for ever.
SEEN_MAX = 4 * PREPARED_MAX

# A statement as sent: its text with $n, the key of its prepared form (text and
# parameter types: psycopg gives an int the smallest type that holds it), the
# parameters, their formats.
_Converted = tuple[bytes, tuple[bytes, tuple[int, ...]], list[Any] | None, list[pq.Format] | None]


class UnitQueue:
    """Units sent on ``conn`` (autocommit, otherwise unused meanwhile), read back in order."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self._prepared: dict[tuple[bytes, tuple[int, ...]], bytes] = {}  # usable names
        self._seen: set[tuple[bytes, tuple[int, ...]]] = set()  # sent once, unnamed
        self._made = 0  # names made on this session, used or not
        # Names each unit in flight prepares, usable once it commits.
        self._preparing: deque[dict[tuple[bytes, tuple[int, ...]], bytes]] = deque()

    def __len__(self) -> int:
        return len(self._preparing)

    def send(self, statements: list[Statement]) -> None:
        """One unit: ``statements`` as one transaction, sent without waiting for it."""
        pgconn = self.conn.pgconn
        with translated():
            # Bound before anything is sent: a value that cannot be bound fails the
            # unit here, with nothing of it queued.
            converted = [self._converted(query, params) for query, params in statements]
            if pgconn.pipeline_status == pq.PipelineStatus.OFF:
                pgconn.enter_pipeline_mode()
            preparing: dict[tuple[bytes, tuple[int, ...]], bytes] = {}
            for text, key, params, formats in converted:
                name = self._prepared.get(key) or preparing.get(key)
                if name is None and key in self._seen and self._made < PREPARED_MAX:
                    self._made += 1
                    name = preparing[key] = b"handoff_unit_%d" % self._made
                    pgconn.send_prepare(name, text, param_types=key[1])
                if len(self._seen) >= SEEN_MAX:
                    self._seen.clear()
                self._seen.add(key)
                if name is None:
                    pgconn.send_query_params(text, params, param_types=key[1],
                                             param_formats=formats)  # fmt: skip
                else:
                    pgconn.send_query_prepared(name, params, param_formats=formats)
            pgconn.pipeline_sync()
            self.conn.wait(generators.send(pgconn))
        self._preparing.append(preparing)

    def _converted(self, query: Any, params: Any) -> _Converted:
        converting = PostgresQuery(Transformer(self.conn))
        converting.convert(query, params)
        formats = list(converting.formats) if converting.formats is not None else None
        values = list(converting.params) if converting.params is not None else None
        return converting.query, (converting.query, converting.types), values, formats

    def outcome(self) -> Exception | None:
        """The oldest unit's outcome: None once it committed, else why it rolled back
        (Handoff's error, as core/db.py translates it). A lost connection raises."""
        assert self._preparing, "no unit to read"
        pgconn = self.conn.pgconn
        failed: psycopg.Error | None = None
        with translated():
            while True:
                result = self.conn.wait(generators.fetch(pgconn))
                if result is None:  # the end of one statement's results
                    continue
                if result.status == pq.ExecStatus.PIPELINE_SYNC:
                    break
                if result.status == pq.ExecStatus.FATAL_ERROR and failed is None:
                    failed = pg.error_from_result(result, encoding=self.conn.info.encoding)
                elif result.status not in (*_DONE, pq.ExecStatus.PIPELINE_ABORTED):
                    failed = failed or psycopg.OperationalError(
                        f"unexpected result of a queued unit: {pq.ExecStatus(result.status).name}"
                    )
            preparing = self._preparing.popleft()
            if not self._preparing:
                pgconn.exit_pipeline_mode()
        if failed is not None:
            return translation(failed)
        self._prepared.update(preparing)
        return None

    def outcomes(self) -> list[Exception | None]:
        """Every unit still queued, read in order: the connection is free afterwards."""
        return [self.outcome() for _ in range(len(self._preparing))]
