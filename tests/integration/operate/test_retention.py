"""``handoff retention`` on the real stack: windows shown and changed, a window shorter
than the replay window refused with why (by the CLI and by the table itself), and a run
that deletes only what is old (keeping each run's newest guard and open quarantine)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from handoff.core import HandoffClient
from handoff.core.settings import HandoffSettings
from tests.fix_contract import ServiceFactory
from tests.fix_relay import Relays

OLD = "now() - interval '400 days'"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "handoff.cli", "retention", *args],
        capture_output=True, text=True, timeout=120, check=False, env=os.environ.copy(),
    )  # fmt: skip


@pytest.fixture
def kept(admin: psycopg.Connection[Any]) -> Iterator[None]:
    """Whatever a test sets, the next test finds the windows as they were."""
    row = admin.execute("SELECT * FROM handoff.retention").fetchone()
    yield
    admin.execute(
        """UPDATE handoff.retention SET replay_window = %s, receipts = %s, guards = %s,
               outbox = %s, rejections = %s, quarantine = %s, updated_at = %s, updated_by = %s""",
        row[1:],  # type: ignore[index]
    )


def test_windows_are_shown_and_changed(kept: None, admin: psycopg.Connection[Any]) -> None:
    shown = _cli("show")
    assert shown.returncode == 0 and "replay_window" in shown.stdout and "guards" in shown.stdout
    done = _cli(
        "set", "--replay-window", "2d", "--outbox", "2d", "--guards", "45d", "--by", "ops-alice"
    )
    assert done.returncode == 0, done.stderr
    row = admin.execute("SELECT replay_window, guards, receipts, updated_by "
                        "FROM handoff.retention").fetchone()  # fmt: skip
    assert row == (timedelta(days=2), timedelta(days=45), timedelta(days=30), "ops-alice")


def test_shorter_than_the_replay_window_is_refused_with_why(
    kept: None, admin: psycopg.Connection[Any]
) -> None:
    before = admin.execute("SELECT guards, outbox FROM handoff.retention").fetchone()
    done = _cli("set", "--guards", "12h")
    assert done.returncode == 1
    assert "guards 12h is shorter than the replay window 1d" in " ".join(done.stderr.split())
    assert "second payment" in done.stderr
    longer = _cli("set", "--replay-window", "3d")  # would leave the outbox (1d) short
    assert longer.returncode == 1 and "outbox 1d is shorter" in " ".join(longer.stderr.split())
    assert admin.execute("SELECT guards, outbox FROM handoff.retention").fetchone() == before
    with pytest.raises(psycopg.errors.CheckViolation):  # and the table refuses it itself
        admin.execute("UPDATE handoff.retention SET guards = interval '1 hour'")
    bad = _cli("set", "--guards", "thirty days")
    assert bad.returncode == 1 and "not a duration" in bad.stderr


def test_a_run_deletes_only_what_is_old(
    kept: None, service: ServiceFactory, migrated: HandoffSettings,
    admin: psycopg.Connection[Any], tenant: str, relays: Relays,
) -> None:  # fmt: skip
    maker = service("maker", can_create=True)
    with HandoffClient.direct(maker, migrated.database_url, pool_size=1) as client:
        for doc in ("old", "new", "parked"):
            client.create(event_id=f"{doc}-c", document_id=doc, owner="maker", status="new")
    t = (tenant,)
    admin.execute(f"UPDATE handoff.receipts SET accepted_at = {OLD} "
                  "WHERE tenant_id = %s AND document_id = 'old'", t)  # fmt: skip
    # Published by a relay, then aged: only a published row is ever purged, so
    # the parked one stays however old.
    admin.execute("UPDATE handoff.outbox SET payload = payload - 'status' "
                  "WHERE tenant_id = %s AND document_id = 'parked'", t)  # fmt: skip
    assert relays.run_once().returncode == 0
    admin.execute(f"UPDATE handoff.outbox SET created_at = {OLD} "
                  "WHERE tenant_id = %s AND document_id IN ('old', 'parked')", t)  # fmt: skip
    for version, when in ((1, OLD), (2, OLD), (3, OLD), (1, "now()")):
        doc = "d" if when == OLD else "e"
        admin.execute(
            f"""INSERT INTO handoff.consumer_guards (tenant_id, consumer, event_id, fingerprint,
                    document_id, run_id, version, taken_at)
                VALUES (%s, 'billing', %s, '\\x00', %s, 1, %s, {when})""",
            (tenant, f"g-{doc}-{version}", doc, version),
        )
    admin.execute(f"""INSERT INTO handoff.rejections (tenant_id, sender, code, message, rejected_at)
                      VALUES (%s, 'maker', 'VersionMismatch', 'old', {OLD}),
                             (%s, 'maker', 'VersionMismatch', 'new', now())""",
                  (tenant, tenant))  # fmt: skip
    for status, resolved in (("discarded", OLD), ("open", "NULL")):
        admin.execute(
            f"""INSERT INTO handoff.quarantine (tenant_id, consumer, event_id, topic,
                    kafka_partition, kafka_offset, category, error, attempts, status,
                    first_failed_at, resolved_at)
                VALUES (%s, 'billing', %s, 't', 0, 1, 'handler_error', 'x', 1, %s, {OLD},
                        {resolved})""",
            (tenant, f"q-{status}", status),
        )

    done = _cli("run")
    assert done.returncode == 0, done.stderr
    assert "purged" in done.stdout

    def left(sql: str) -> list[Any]:
        return [r[0] for r in admin.execute(sql, t).fetchall()]

    assert sorted(left("SELECT document_id FROM handoff.receipts WHERE tenant_id = %s")) == [
        "new", "parked",
    ]  # fmt: skip
    assert sorted(left("SELECT document_id FROM handoff.outbox WHERE tenant_id = %s")) == [
        "new", "parked",
    ]  # fmt: skip
    # The newest guard of a run stays however old (it is the consumer's position there).
    assert sorted(left("SELECT event_id FROM handoff.consumer_guards WHERE tenant_id = %s")) == [
        "g-d-3", "g-e-1",
    ]  # fmt: skip
    assert left("SELECT message FROM handoff.rejections WHERE tenant_id = %s") == ["new"]
    assert left("SELECT status FROM handoff.quarantine WHERE tenant_id = %s") == ["open"]


def test_run_names_what_it_does_not_know() -> None:
    done = _cli("run", "--only", "guards,history")
    assert done.returncode == 2 and "history" in done.stdout + done.stderr
