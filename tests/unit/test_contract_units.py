"""Pure parts of the contract: validation, credentials, answers, retries, HTTP mapping."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from handoff.core import errors
from handoff.core.emitter import answer, params
from handoff.core.identity import Credential
from handoff.core.models import CreateRequest, HandoffRequest, StartRunRequest
from handoff.core.retry import backoff_delays, retrying
from handoff.tracker.http_errors import body_of, status_of


def handoff(**overrides: object) -> HandoffRequest:
    fields: dict[str, object] = {
        "eventId": "e1",
        "eventType": "approved",
        "documentId": "invoice-42",
        "nextOwner": "finalization",
        "status": "approved",
        "expectedVersion": 7,
    }
    return HandoffRequest.model_validate({**fields, **overrides})


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"nextOwner": "Finalization"}, "nextOwner"),
        ({"nextOwner": "-x"}, "nextOwner"),
        ({"expectedVersion": 0}, "expectedVersion"),
        ({"eventId": ""}, "eventId"),
        ({"documentId": "a\nb"}, "documentId"),
        ({"status": "x" * 65}, "status"),
        ({"dueAt": "2026-12-01T09:00:00"}, "dueAt"),
        ({"data": {"blob": "x" * 70_000}}, "data"),
        ({"data": [1, 2]}, "data"),
        ({"unknown": 1}, "unknown"),
    ],
)
def test_handoff_request_rejects_bad_fields(overrides: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        handoff(**overrides)
    assert field in {str(e["loc"][0]) for e in info.value.errors()}


def test_completion_is_a_null_next_owner_and_snake_case_works() -> None:
    request = HandoffRequest(
        event_id="e",
        event_type="done",
        document_id="d",
        next_owner=None,
        status="finished",
        expected_version=1,
        due_at=datetime(2026, 12, 1, tzinfo=UTC),
    )
    assert params(request)["next_owner"] is None
    assert params(request)["kind"] == "handoff"


def test_create_and_run_requests_become_function_arguments() -> None:
    create = CreateRequest(event_id="e", document_id="d", owner="routing", status="new")
    assert params(create) | {"data": None} == {
        "event_id": "e",
        "event_type": "created",
        "status": "new",
        "due_at": None,
        "data": None,
        "correlation_id": None,
        "causation_id": None,
        "kind": "create",
        "document_id": "d",
        "run_id": None,
        "sender": None,
        "next_owner": "routing",
        "expected_version": None,
    }
    run = StartRunRequest(event_id="e", owner="routing", status="redo")
    assert params(run, "d")["kind"] == "run"
    with pytest.raises(errors.InvalidRequest):
        params(run)


def test_credentials_round_trip_and_hide_their_secret() -> None:
    credential = Credential.new()
    parsed = Credential.parse(credential.token)
    assert parsed == credential and len(parsed.secret_hash) == 32
    assert credential.secret not in repr(credential)
    for bad in ("", "hsvc_123.short", "role.secret-secret-secret-secret-secret", "a.b.c"):
        with pytest.raises(errors.Unauthenticated, match="malformed"):
            Credential.parse(bad)


def test_answers_become_receipts_or_typed_errors() -> None:
    receipt = answer(
        {
            "accepted": True,
            "replayed": True,
            "receipt": {
                "eventId": "e",
                "documentId": "d",
                "runId": 1,
                "version": 8,
                "owner": None,
                "status": "done",
                "acceptedAt": "2026-11-29T10:00:00+00:00",
            },
        }
    )
    assert receipt.replayed and receipt.version == 8
    assert "replayed" not in receipt.model_dump(by_alias=True)
    with pytest.raises(errors.VersionMismatch) as info:
        answer({"accepted": False, "code": "VersionMismatch", "message": "m", "currentVersion": 9})
    assert info.value.current_version == 9


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (errors.InvalidRequest("m"), 422),
        (errors.Unauthenticated("m"), 401),
        (errors.SenderMismatch("m"), 403),
        (errors.NotPermitted("m"), 403),
        (errors.DocumentNotFound("m"), 404),
        (errors.OwnershipMismatch("m"), 409),
        (errors.VersionMismatch("m"), 409),
        (errors.ConflictingEventReuse("m"), 409),
        (errors.AlreadyExists("m"), 409),
        (errors.DatabaseUnavailable("m"), 503),
        (errors.OutcomeUnknown("m"), 503),
        (errors.HandoffError("m"), 500),
    ],
)
def test_every_error_has_its_status(error: errors.HandoffError, status: int) -> None:
    assert status_of(error) == status


def test_error_bodies_carry_code_and_current_state() -> None:
    body = body_of(errors.VersionMismatch("at 8", current_version=8, current_owner="b"))
    assert body == {
        "code": "VersionMismatch",
        "message": "at 8",
        "currentVersion": 8,
        "currentOwner": "b",
    }
    assert body_of(errors.OwnershipMismatch("finished", current_version=3))["currentOwner"] is None


def test_retrying_repeats_the_same_call_until_it_lands_with_a_fake_sleep() -> None:
    calls: list[int] = []
    slept: list[float] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise errors.OutcomeUnknown("timeout")
        return "receipt"

    assert retrying(flaky, attempts=5, sleep=slept.append) == "receipt"
    assert len(calls) == 3 and len(slept) == 2


def test_retrying_gives_up_and_passes_contract_errors_through() -> None:
    def always() -> None:
        raise errors.TransientConflict("40001")

    with pytest.raises(errors.TransientConflict):
        retrying(always, attempts=3, sleep=lambda _: None)

    def refused() -> None:
        raise errors.VersionMismatch("no")

    with pytest.raises(errors.VersionMismatch):
        retrying(refused, attempts=3, sleep=lambda _: None)


def test_backoff_is_bounded_full_jitter() -> None:
    delays = backoff_delays(8, 0.05, 1.0)
    assert len(delays) == 7
    assert all(0 <= d <= min(1.0, 0.05 * 2**n) for n, d in enumerate(delays))


def test_one_mapping_from_coded_answers_to_errors() -> None:
    error = errors.contract_error(
        {"code": "OwnershipMismatch", "message": "m", "currentVersion": 8, "currentOwner": None}
    )
    assert isinstance(error, errors.OwnershipMismatch) and error.current_version == 8
    unknown = errors.contract_error({"code": "SomethingNew"})
    assert isinstance(unknown, errors.InvalidRequest) and str(unknown) == "SomethingNew"
