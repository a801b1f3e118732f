"""The consumer app the integration tests and the benchmark run as real processes.

    handoff consume tests.consumer_apps:app

Configured by environment variables, so one module serves every scenario:

- ``TEST_CONSUMER_NAME``: the service it runs as (its credential in
  ``HANDOFF_CONSUMER_CREDENTIAL``); ``TEST_CONSUMER_TYPES``: event types it
  handles (comma-separated); ``TEST_CONSUMER_OWNER``: ``*`` for every owner.
- ``TEST_CONSUMER_NEXT``: hand each document on to this service.
- ``TEST_CONSUMER_SLEEP_S``: seconds per event (to kill it mid-batch).
- ``TEST_CONSUMER_VERSION``: the handler version recorded in quarantine.
- ``TEST_CONSUMER_KILL_AFTER_COMMIT``: kill -9 the process at its after-commit
  injection point (after a database commit, before the offsets are stored).
- ``TEST_CONSUMER_DEFERRED``: the effect is a deferred write (``tx.write``), read
  by nothing in the unit, so that at batch 1 units are sent ahead
  (consumers/queued.py); without it the effect's INSERT runs at once.

Its local effect is a row in ``consumer_test.effects`` (no unique key, so
a double effect would show as two rows). An event whose data says
``{"poison": true}`` fails until its document is listed in
``consumer_test.cures``; one whose data says ``{"crash": true}`` kills the
process (kill -9), every time.
"""

from __future__ import annotations

import os
import signal
import time

from handoff.consumers import Consumer, Event
from handoff.core import HandoffTx

EFFECTS_DDL = """
CREATE SCHEMA IF NOT EXISTS consumer_test;
CREATE TABLE IF NOT EXISTS consumer_test.effects (
    tenant_id   text NOT NULL,
    consumer    text NOT NULL,
    event_id    text NOT NULL,
    document_id text NOT NULL,
    run_id      integer NOT NULL,
    version     integer NOT NULL,
    note        text,
    occurred_at timestamptz NOT NULL,
    done_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    pid         integer NOT NULL DEFAULT pg_backend_pid()
);
CREATE INDEX IF NOT EXISTS effects_by_tenant ON consumer_test.effects (tenant_id, document_id);
CREATE TABLE IF NOT EXISTS consumer_test.cures (tenant_id text, document_id text);
GRANT USAGE ON SCHEMA consumer_test TO handoff_service;
GRANT INSERT, SELECT ON consumer_test.effects TO handoff_service;
GRANT SELECT ON consumer_test.cures TO handoff_service;
"""

app = Consumer(
    os.environ.get("TEST_CONSUMER_NAME", "review"),
    owner=None
    if os.environ.get("TEST_CONSUMER_OWNER") == "*"
    else os.environ.get("TEST_CONSUMER_OWNER", os.environ.get("TEST_CONSUMER_NAME", "review")),
)
NEXT = os.environ.get("TEST_CONSUMER_NEXT")

if os.environ.get("TEST_CONSUMER_KILL_AFTER_COMMIT"):

    @app.after_commit
    def die(_messages: int) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


SLEEP_S = float(os.environ.get("TEST_CONSUMER_SLEEP_S", "0"))
DEFERRED = bool(os.environ.get("TEST_CONSUMER_DEFERRED"))


def record(event: Event, tx: HandoffTx) -> None:
    if SLEEP_S:
        time.sleep(SLEEP_S)
    if event.data.get("crash"):  # dies as a segfault or the OOM killer would
        os.kill(os.getpid(), signal.SIGKILL)
    if event.data.get("poison"):
        cured = tx.execute(
            "SELECT 1 FROM consumer_test.cures WHERE tenant_id = %s AND document_id = %s",
            (event.tenant_id, event.document_id),
        ).fetchone()
        if cured is None:
            raise RuntimeError(f"cannot process {event.document_id}: poison")
    (tx.write if DEFERRED else tx.execute)(
        "INSERT INTO consumer_test.effects (tenant_id, consumer, event_id, document_id, run_id,"
        " version, note, occurred_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        (
            event.tenant_id,
            app.name,
            event.event_id,
            event.document_id,
            event.run_id,
            event.version,
            event.data.get("note"),
            event.occurred_at,
        ),
    )
    if NEXT:
        tx.emit(
            event_id=event.next_event_id("next"),
            event_type="routed",
            document_id=event.document_id,
            run_id=event.run_id,
            next_owner=NEXT,
            status="routed",
            expected_version=event.version,
            correlation_id=event.correlation_id,
            causation_id=event.event_id,
        )


for event_type in os.environ.get("TEST_CONSUMER_TYPES", "created,routed").split(","):
    app.add_handler(event_type, record, version=os.environ.get("TEST_CONSUMER_VERSION", "1"))
