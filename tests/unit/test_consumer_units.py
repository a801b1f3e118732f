"""Pure parts of the consumer runtime: retry policy, failure classes, registration, events."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from handoff.cli.bootstrap import load_app
from handoff.consumers import Consumer
from handoff.consumers.event import Position, fingerprint, from_record
from handoff.consumers.failures import Category, HeldBack, classify
from handoff.consumers.settings import ConsumerSettings
from handoff.core import errors
from handoff.core.names import id_problem
from handoff.core.retry import RetryPolicy


def test_retry_policy_stops_at_its_attempts_with_full_jitter_waits() -> None:
    calls: list[int] = []
    slept: list[float] = []

    def always() -> None:
        calls.append(1)
        raise errors.TransientConflict("40001")

    policy = RetryPolicy(attempts=4, base_s=0.1, max_s=0.3, budget_s=100)
    with pytest.raises(errors.TransientConflict):
        policy.run(always, sleep=slept.append)
    assert len(calls) == 4 and len(slept) == 3
    assert all(0 <= wait <= min(0.3, 0.1 * 2**n) for n, wait in enumerate(slept))


def test_retry_policy_stops_when_the_next_wait_would_pass_its_time_budget() -> None:
    now = [0.0]
    calls: list[int] = []

    def failing() -> None:
        calls.append(1)
        now[0] += 4.0  # each attempt takes four seconds
        raise errors.Unavailable("down")

    policy = RetryPolicy(attempts=100, base_s=0.0, max_s=0.0, budget_s=10)
    with pytest.raises(errors.Unavailable):
        policy.run(failing, sleep=lambda _: None, clock=lambda: now[0])
    assert len(calls) == 3  # 4 s, 8 s, 12 s > budget


def test_retry_policy_passes_what_it_may_not_retry_through_at_once() -> None:
    calls: list[int] = []

    def refused() -> None:
        calls.append(1)
        raise errors.VersionMismatch("moved on")

    with pytest.raises(errors.VersionMismatch):
        RetryPolicy().run(refused, sleep=lambda _: None)
    assert calls == [1]


def test_retry_policy_runs_coroutines_too() -> None:
    attempts: list[int] = []

    async def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise errors.TransientConflict("deadlock")
        return "ok"

    policy = RetryPolicy(attempts=5, base_s=0.0, max_s=0.0)
    # In a thread of its own: other tests may leave an event loop running here.
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(lambda: asyncio.run(policy.run_async(flaky))).result()
    assert answer == "ok" and len(attempts) == 3


def test_retry_policy_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError):
        RetryPolicy(budget_s=0)


@pytest.mark.parametrize(
    ("error", "category", "retryable"),
    [
        (errors.TransientConflict("x"), Category.TRANSIENT, True),
        (errors.Unavailable("x"), Category.TRANSIENT, True),
        (TimeoutError(), Category.TRANSIENT, True),
        (errors.MalformedEvent("x"), Category.MALFORMED, False),
        (errors.InvalidRequest("x"), Category.MALFORMED, False),
        (errors.NotPermitted("x"), Category.DENIED, False),
        (errors.Unauthenticated("x"), Category.DENIED, False),
        (errors.VersionMismatch("x"), Category.INVALID_TRANSITION, False),
        (errors.UnknownOwner("x"), Category.INVALID_TRANSITION, False),
        (HeldBack(Category.CONFLICTING_REUSE, "x"), Category.CONFLICTING_REUSE, False),
        (RuntimeError("bug"), Category.HANDLER_ERROR, True),
    ],
)
def test_failures_are_classified_by_whether_a_retry_can_help(
    error: Exception, category: Category, retryable: bool
) -> None:
    assert classify(error) == (category, retryable)


def test_handlers_are_registered_as_data_one_per_event_type() -> None:
    app = Consumer("review", "hsvc_0123456789ab." + "s" * 43)

    @app.handler("routed", version="3")
    def review(event: Any, tx: Any) -> None:
        return None

    app.add_handler("created", review, name="first-look")
    assert app.event_types == ["created", "routed"]
    assert (app.handlers["routed"].name, app.handlers["routed"].version) == ("review", "3")
    assert app.handlers["created"].name == "first-look"
    with pytest.raises(errors.DuplicateHandler, match="already has a handler for routed"):
        app.add_handler("routed", review)
    with pytest.raises(errors.ConfigurationError, match="event type"):
        app.add_handler("bad type", review)


def test_the_header_filter_wants_its_types_its_tenant_and_by_default_itself_as_owner() -> None:
    app = Consumer("review", "hsvc_0123456789ab." + "s" * 43)
    app.add_handler("routed", lambda e, tx: None)
    assert app.wants("routed", "review", "acme", "acme")
    assert not app.wants("routed", "billing", "acme", "acme")
    assert not app.wants("routed", "review", "other", "acme")
    assert not app.wants("created", "review", "acme", "acme")
    projection = Consumer("audit", "hsvc_0123456789ab." + "s" * 43, owner=None)
    projection.add_handler("routed", lambda e, tx: None)
    assert projection.wants("routed", "billing", "acme", "acme")


def test_a_consumer_without_a_credential_says_where_to_put_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HANDOFF_CONSUMER_CREDENTIAL", raising=False)
    with pytest.raises(errors.ConfigurationError, match="HANDOFF_CONSUMER_CREDENTIAL"):
        _ = Consumer("review").credential
    with pytest.raises(errors.ConfigurationError, match="consumer name"):
        Consumer("Review!")


@pytest.mark.parametrize(
    ("target", "problem"),
    [
        ("no_colon", "expected MODULE:APP"),
        ("handoff_not_a_module:app", "cannot import"),
        ("handoff.core:errors", "not a handoff.consumers.Consumer"),
    ],
)
def test_handoff_consume_names_what_is_wrong_with_its_target(target: str, problem: str) -> None:
    with pytest.raises(errors.ConfigurationError, match=problem):
        load_app(target)


def test_consumer_settings_are_validated() -> None:
    with pytest.raises(ValidationError):
        ConsumerSettings(batch_size=0)
    with pytest.raises(ValidationError):
        ConsumerSettings(session_timeout_s=1)
    policy = ConsumerSettings(max_deliveries=5).retry_policy()
    assert policy.attempts == 5


def _record(**changes: Any) -> dict[str, Any]:
    record = {
        "eventId": "e-1",
        "eventType": "routed",
        "schemaVersion": 2,
        "source": "intake",
        "occurredAt": datetime(2026, 11, 30, tzinfo=UTC),
        "tenantId": "acme",
        "documentId": "invoice-42",
        "runId": 1,
        "version": 7,
        "correlationId": None,
        "causationId": None,
        "owner": "review",
        "previousOwner": "intake",
        "status": "routed",
        "assignedAt": None,
        "dueAt": None,
        "completed": False,
        "data": '{"amount": 10}',
        "completedAt": None,
    }
    return {**record, **changes}


def test_the_fingerprint_is_what_changed_not_which_schema_wrote_it() -> None:
    base = fingerprint(_record())
    assert fingerprint(_record(schemaVersion=1)) == base
    assert fingerprint({k: v for k, v in _record().items() if k != "completedAt"}) == base
    assert fingerprint(_record(status="approved")) != base
    assert fingerprint(_record(data='{"amount": 11}')) != base


def test_derived_event_ids_are_stable_and_follow_the_naming_rule() -> None:
    event = from_record(_record(), Position("t", 0, 1))
    first = event.next_event_id("approve")
    assert first == event.next_event_id("approve") != event.next_event_id("reject")
    assert id_problem(first) is None
