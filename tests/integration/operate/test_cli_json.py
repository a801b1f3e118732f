"""``--json`` on the operator commands, for scripts: each prints one JSON document on
stdout (progress and notes go to stderr), with the same facts as its table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from typing import Any

import psycopg
import pytest

from tests.fix_contract import ServiceFactory


def _json(*args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "handoff.cli", *args, "--json"],
        capture_output=True, text=True, timeout=120, check=False, env=os.environ.copy(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def planted(service: ServiceFactory, admin: psycopg.Connection[Any], tenant: str) -> dict[str, int]:
    service("review", can_create=True)
    entry = admin.execute(
        """INSERT INTO handoff.quarantine (tenant_id, consumer, event_id, event_type,
               document_id, run_id, version, topic, kafka_partition, kafka_offset, category,
               error, attempts)
           VALUES (%s, 'review', 'e-1', 'routed', 'inv-1', 1, 1, 't', 0, 7, 'handler_error',
                   'KeyError: amount', 3)
           RETURNING id""",
        (tenant,),
    ).fetchone()[0]  # type: ignore[index]
    intent = admin.execute(
        """INSERT INTO handoff.effect_intents (tenant_id, consumer, event_id, effect,
               idempotency_key, document_id, run_id, request, fingerprint, state, owner)
           VALUES (%s, 'review', 'e-pay', 'pay', %s, 'inv-1', 1, '{"amount": 5}', '\\x00',
                   'succeeded', 'review')
           RETURNING id""",
        (tenant, f"key-{uuid.uuid4()}"),
    ).fetchone()[0]  # type: ignore[index]
    return {"entry": entry, "intent": intent}


def test_service_list(planted: dict[str, int], tenant: str) -> None:
    (found,) = _json("service", "list", "--tenant", tenant)
    assert (found["name"], found["can_create"], found["revoked_at"]) == ("review", True, None)
    assert found["role"].startswith("hsvc_")


def test_quarantine_list_and_show(planted: dict[str, int], tenant: str) -> None:
    (listed,) = _json("quarantine", "list", "--tenant", tenant)
    assert (listed["id"], listed["category"], listed["status"]) == (
        planted["entry"], "handler_error", "open",
    )  # fmt: skip
    shown = _json("quarantine", "show", str(planted["entry"]))
    assert shown["error"] == "KeyError: amount" and isinstance(shown["audit"], list)


def test_effects_list_and_show(planted: dict[str, int], tenant: str) -> None:
    (listed,) = _json("effects", "list", "--tenant", tenant)
    assert (listed["id"], listed["state"]) == (planted["intent"], "succeeded")
    shown = _json("effects", "show", str(planted["intent"]))
    assert shown["request"] == {"amount": 5} and isinstance(shown["history"], list)


def test_backlog(planted: dict[str, int], tenant: str) -> None:
    budgets = _json("backlog", "--tenant", tenant, "--window", "1", "--all")
    relay = next(b for b in budgets if b["name"] == "relay")
    assert {"backlog", "arrival_per_s", "completion_per_s", "drain_s"} <= set(relay)
