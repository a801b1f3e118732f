"""The sandbox provider as a real process: its idempotency contract, status lookup,
validation, durable records, and each injected fault as the executor's client sees it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from handoff.consumers.providers import SandboxPayments
from handoff.core.errors import ProviderNotReached, ProviderOutcomeUnknown, ProviderRefused
from handoff.stack.procs import wait_until
from tests.fix_effects import SandboxProcess


def _ref() -> str:
    return f"order-{uuid.uuid4().hex[:8]}"


def _pay(reference: str, amount: int = 100) -> dict[str, object]:
    return {"amount": amount, "currency": "EUR", "reference": reference}


@pytest.fixture
def client(sandbox: SandboxProcess) -> Iterator[SandboxPayments]:
    found = SandboxPayments(sandbox.url, timeout_s=1.0)
    try:
        yield found
    finally:
        found.close()


def test_same_key_same_parameters_answers_the_original_other_parameters_409(
    sandbox: SandboxProcess,
) -> None:
    ref, key = _ref(), uuid.uuid4().hex
    url = f"{sandbox.url}/v1/payments"
    first = httpx.post(url, json=_pay(ref), headers={"Idempotency-Key": key})
    again = httpx.post(url, json=_pay(ref), headers={"Idempotency-Key": key})
    other = httpx.post(url, json=_pay(ref, 101), headers={"Idempotency-Key": key})
    assert first.status_code == 201 and "Idempotent-Replayed" not in first.headers
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert other.status_code == 409 and other.json()["code"] == "IdempotencyKeyReuse"
    assert len(sandbox.payments(ref)) == 1


def test_the_status_lookup_finds_by_key_or_answers_404(client: SandboxPayments) -> None:
    ref, key = _ref(), uuid.uuid4().hex
    assert client.status(key) is None
    made = client.submit(key, _pay(ref))
    found = client.status(key)
    assert made.succeeded and found is not None
    assert found.reference == made.reference and found.body["idempotencyKey"] == key


K = {"Idempotency-Key": "k"}
GOOD = {"amount": 5, "currency": "EUR", "reference": "r"}


@pytest.mark.parametrize(
    ("body", "headers", "code"),
    [
        ({**GOOD, "amount": 0}, K, "InvalidRequest"),
        ({**GOOD, "currency": "eur"}, K, "InvalidRequest"),
        ({**GOOD, "x": 1}, K, "InvalidRequest"),
        (GOOD, {}, "InvalidRequest"),
        (GOOD, {**K, "Sandbox-Fault": "melt"}, "InvalidFault"),
    ],
)
def test_bad_requests_answer_400_with_a_code(
    sandbox: SandboxProcess, body: dict[str, object], headers: dict[str, str], code: str
) -> None:
    answer = httpx.post(f"{sandbox.url}/v1/payments", json=body, headers=headers)
    assert answer.status_code == 400 and answer.json()["code"] == code


def test_bad_faults_are_refused_with_what_to_fix(sandbox: SandboxProcess) -> None:
    answer = httpx.post(f"{sandbox.url}/_sandbox/faults", json={"kind": "delay"})
    assert answer.status_code == 400 and "delayMs" in answer.json()["message"]


def test_drop_makes_the_payment_and_loses_the_answer(
    sandbox: SandboxProcess, client: SandboxPayments
) -> None:
    ref, key = _ref(), uuid.uuid4().hex
    sandbox.arm(kind="drop", reference=ref)
    with pytest.raises(ProviderOutcomeUnknown):
        client.submit(key, _pay(ref))
    [made] = sandbox.payments(ref)
    found = client.status(key)
    assert found is not None and found.reference == made["id"]
    # The fault was for one request: the retry with the key gets the original.
    assert client.submit(key, _pay(ref)).reference == made["id"]


def test_error_answers_503_without_charging(
    sandbox: SandboxProcess, client: SandboxPayments
) -> None:
    ref, key = _ref(), uuid.uuid4().hex
    sandbox.arm(kind="error", reference=ref)
    with pytest.raises(ProviderOutcomeUnknown):
        client.submit(key, _pay(ref))
    assert sandbox.payments(ref) == [] and client.status(key) is None


def test_delay_beyond_the_timeout_is_unknown_and_the_payment_is_made(
    sandbox: SandboxProcess, client: SandboxPayments
) -> None:
    ref, key = _ref(), uuid.uuid4().hex
    sandbox.arm(kind="delay", reference=ref, delayMs=1500)
    with pytest.raises(ProviderOutcomeUnknown):
        client.submit(key, _pay(ref))  # the client waits 1 s
    # The provider goes on after the caller gave up: the payment appears.
    assert wait_until(lambda: len(sandbox.payments(ref)) == 1, 15)
    # Its answer met a closed connection: counted, and no traceback in its log.
    health = lambda: httpx.get(f"{sandbox.url}/healthz").json()  # noqa: E731
    assert wait_until(lambda: health()["clientsGone"] >= 1, 10)
    assert "Traceback" not in sandbox.log.read_text()


def test_decline_is_a_final_failed_answer(sandbox: SandboxProcess, client: SandboxPayments) -> None:
    ref, key = _ref(), uuid.uuid4().hex
    sandbox.arm(kind="decline", reference=ref)
    answer = client.submit(key, _pay(ref))
    assert not answer.succeeded and answer.body["status"] == "failed"
    assert client.submit(key, _pay(ref)).succeeded is False  # the same answer again


def test_key_reuse_with_other_parameters_is_refused(client: SandboxPayments) -> None:
    ref, key = _ref(), uuid.uuid4().hex
    client.submit(key, _pay(ref))
    with pytest.raises(ProviderRefused) as refused:
        client.submit(key, _pay(ref, 999))
    assert refused.value.status == 409


def test_lookup_error_makes_the_lookup_fail(
    sandbox: SandboxProcess, client: SandboxPayments
) -> None:
    sandbox.arm(kind="lookup_error")
    with pytest.raises(ProviderOutcomeUnknown):
        client.status(uuid.uuid4().hex)
    assert client.status(uuid.uuid4().hex) is None


def test_refuse_closes_the_port_then_accepts_again(
    sandbox: SandboxProcess, client: SandboxPayments
) -> None:
    ref = _ref()
    sandbox.arm(kind="refuse", forS=1.5)
    time.sleep(0.3)
    with pytest.raises(ProviderNotReached):
        client.submit(uuid.uuid4().hex, _pay(ref))
    assert not sandbox.healthy()
    time.sleep(2.0)
    assert client.submit(uuid.uuid4().hex, _pay(ref)).succeeded
    assert len(sandbox.payments(ref)) == 1


def test_records_survive_a_kill_of_the_provider(tmp_path: Path) -> None:
    proc = SandboxProcess(tmp_path / "data", tmp_path / "log").start()
    ref, key = _ref(), uuid.uuid4().hex
    try:
        first = SandboxPayments(proc.url)
        made = first.submit(key, _pay(ref))
        first.close()
        proc.kill()  # SIGKILL: no shutdown, no flush beyond each commit's fsync
        proc.start()  # the same port and folder
        again = SandboxPayments(proc.url)
        found = again.status(key)
        replay = again.submit(key, _pay(ref))
        again.close()
    finally:
        proc.kill()
    assert found is not None and found.reference == made.reference
    assert replay.reference == made.reference


def test_every_payment_is_listed_in_order_a_page_at_a_time(
    sandbox: SandboxProcess, client: SandboxPayments
) -> None:
    made = [
        client.submit(
            f"page-{uuid.uuid4()}", {"amount": 100 + i, "currency": "EUR", "reference": "paged"}
        ).reference
        for i in range(5)
    ]
    listed = [p["id"] for p in client.every_payment(page=2)]
    assert listed[-5:] == made  # after whatever other tests made before
    for bad in ({"after": "-1"}, {"after": "x"}, {"limit": "0"}, {"after": "9" * 30}):
        assert httpx.get(f"{sandbox.url}/v1/payments", params=bad).status_code == 400
