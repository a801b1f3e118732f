"""``handoff projection`` on the real stack: a rebuild from Kafka (highest version wins, the
events' full state) equals the authoritative tables; a planted difference is found and
blocks the switch; the readers' view moves only on request."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from handoff.core import HandoffClient
from handoff.core.settings import HandoffSettings
from tests.fix_consumer import Wire, payloads
from tests.fix_contract import ServiceFactory


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "handoff.cli", "projection", *args],
        capture_output=True, text=True, timeout=180, check=False, env=os.environ.copy(),
    )  # fmt: skip


@pytest.fixture
def name(admin: psycopg.Connection[Any]) -> Iterator[str]:
    found = f"p{uuid.uuid4().hex[:8]}"
    yield found
    admin.execute("DROP VIEW IF EXISTS handoff_read.documents")
    admin.execute(f"DROP SCHEMA IF EXISTS handoff_projection_{found} CASCADE")


@pytest.fixture
def published(
    service: ServiceFactory, migrated: HandoffSettings, wire: Wire, admin: psycopg.Connection[Any],
    tenant: str,
) -> str:  # fmt: skip
    """Ten invoices, moved on and finished in places; every version's event on the wire,
    later versions before earlier ones for some (as a relay may not, but a rebuild must cope)."""
    maker, review = service("maker", can_create=True), service("review")
    with (
        HandoffClient.direct(maker, migrated.database_url, pool_size=1) as m,
        HandoffClient.direct(review, migrated.database_url, pool_size=1) as r,
    ):
        for i in range(10):
            doc = f"inv-{i}"
            m.create(event_id=f"{doc}-c", document_id=doc, owner="review", status="new",
                     data={"amount": i})  # fmt: skip
            if i % 2:
                r.emit(event_id=f"{doc}-p", event_type="progress", document_id=doc,
                       next_owner="review", status="checking", expected_version=1)  # fmt: skip
            if i % 3 == 0:
                r.emit(event_id=f"{doc}-d", event_type="done", document_id=doc, next_owner=None,
                       status="paid", expected_version=2 if i % 2 else 1)  # fmt: skip
    for (doc, _run, _version), payload in sorted(
        payloads(admin, tenant).items(), key=lambda kv: -kv[0][2]
    ):  # newest first
        wire.produce(wire.encode(payload), key=doc, event_type=payload["eventType"],
                     owner=payload["owner"], tenant=tenant)  # fmt: skip
    return tenant


def test_a_rebuild_equals_the_authoritative_state(
    published: str, wire: Wire, name: str, admin: psycopg.Connection[Any]
) -> None:
    built = _cli("rebuild", name, "--topic", wire.topic, "--tenant", published)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "event(s)" in built.stderr
    rows = admin.execute(f"SELECT count(*), max(version) FROM handoff_projection_{name}.documents"
                         " WHERE tenant_id = %s", (published,)).fetchone()  # fmt: skip
    assert rows == (10, 3)
    same = _cli("compare", name, "--tenant", published)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "no differences" in same.stderr and "counts agree" in same.stdout


def test_a_difference_is_found_and_blocks_the_switch(
    published: str, wire: Wire, name: str, admin: psycopg.Connection[Any]
) -> None:
    assert _cli("rebuild", name, "--topic", wire.topic, "--tenant", published).returncode == 0
    # The authoritative row changed without an event (as a bad manual fix would).
    admin.execute("UPDATE handoff.document_state SET status = 'tampered' "
                  "WHERE tenant_id = %s AND document_id = 'inv-4'", (published,))  # fmt: skip
    found = _cli("compare", name, "--tenant", published)
    assert found.returncode == 1 and "1 document(s) differ" in found.stdout
    assert "inv-4" in found.stdout and "tampered" in found.stdout
    refused = _cli("switch", name)
    assert refused.returncode == 1 and "differed" in refused.stderr
    assert admin.execute("SELECT to_regclass('handoff_read.documents')").fetchone() == (None,)
    forced = _cli("switch", name, "--force")
    assert forced.returncode == 0, forced.stderr
    seen = admin.execute("SELECT count(*) FROM handoff_read.documents WHERE tenant_id = %s",
                         (published,)).fetchone()  # fmt: skip
    assert seen == (10,)
    listed = _cli("list")
    assert name in listed.stdout and "yes" in listed.stdout
    busy = _cli("drop", name, "--yes")
    assert busy.returncode == 1 and "switch them first" in busy.stderr


def test_names_are_checked(name: str) -> None:
    bad = _cli("rebuild", "Robert'); DROP TABLE x;--")
    assert bad.returncode == 1 and "projection name" in bad.stderr
    missing = _cli("compare", name)
    assert missing.returncode == 1 and f"no projection named {name}" in missing.stderr
