"""The operate page and API through a real ``handoff serve``: the relay's backlog and
parked rows, consumer lag read from the real Kafka, quarantined events and unresolved
effects; retry/discard/resolve from the page by the service that owns the entry, audited,
and refused for anyone else, for a forged form and without a reason."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from handoff.core import HandoffClient
from handoff.core.identity import Credential
from handoff.core.settings import HandoffSettings
from handoff.stack.procs import wait_until
from handoff.tracker import operate, sessions
from handoff.tracker.sessions import Session
from tests.fix_contract import ServiceFactory, signed_in


@pytest.fixture
def held(
    service: ServiceFactory, migrated: HandoffSettings, admin: psycopg.Connection[Any], tenant: str
) -> dict[str, Any]:
    """review and billing, each with a quarantined event; review with an unresolved effect."""
    review, billing = service("review", can_create=True), service("billing")
    with HandoffClient.direct(review, migrated.database_url, pool_size=1) as client:
        client.create(event_id="c1", document_id="inv-1", owner="review", status="new")
    ids = {}
    for consumer in ("review", "billing"):
        ids[consumer] = admin.execute(
            """INSERT INTO handoff.quarantine (tenant_id, consumer, event_id, event_type,
                   document_id, run_id, version, topic, kafka_partition, kafka_offset, category,
                   error, attempts)
               VALUES (%s, %s, %s, 'routed', 'inv-1', 1, 1, 't', 0, 7, 'handler_error',
                       'KeyError: amount', 3)
               RETURNING id""",
            (tenant, consumer, f"e-{consumer}"),
        ).fetchone()[0]  # type: ignore[index]
    effect = admin.execute(
        """INSERT INTO handoff.effect_intents (tenant_id, consumer, event_id, effect,
               idempotency_key, document_id, run_id, request, fingerprint, state,
               reconciliation, attempts, lookups, owner, error)
           VALUES (%s, 'review', 'e-pay', 'pay', %s, 'inv-1', 1, '{}', '\\x00', 'unknown',
                   'unresolved', 1, 5, 'review', 'status lookup failed 5 times')
           RETURNING id""",
        (tenant, f"key-{uuid.uuid4()}"),
    ).fetchone()[0]  # type: ignore[index]
    admin.execute(
        "UPDATE handoff.outbox SET parked_at = now(), park_reason = 'test' WHERE tenant_id = %s",
        (tenant,),
    )
    return {"review": review, "billing": billing, "quarantine": ids, "effect": effect}


@pytest.fixture
def ui(api_url: str, held: dict[str, Any]) -> Iterator[httpx.Client]:
    with signed_in(api_url, held["review"]) as client:
        yield client


def _fresh(ui: httpx.Client, action: str) -> dict[str, str]:
    """A valid, unused form of the signed-in session for ``action``, as a page would give."""
    return operate.new_form(Session(ui.cookies[sessions.COOKIE]), action)


def _auth(cred: Credential) -> dict[str, str]:
    return {"Authorization": f"Bearer {cred.token}"}


def test_the_api_shows_backlog_quarantine_and_unresolved_effects(
    api_url: str, held: dict[str, Any]
) -> None:
    view = httpx.get(f"{api_url}/v1/operate", headers=_auth(held["review"]), timeout=15).json()
    assert view["relay"]["parked"] == 1
    assert view["relay"]["pending"] == 0 or view["relay"]["oldestPendingAt"] is not None
    assert sorted(q["consumer"] for q in view["quarantine"]) == ["billing", "review"]
    assert view["quarantine"][0]["error"] == "KeyError: amount"
    (effect,) = view["unresolvedEffects"]
    assert (effect["id"], effect["owner"], effect["lookups"]) == (held["effect"], "review", 5)

    # Lag as the server's sampler last wrote it: current within a few of its rounds.
    def current() -> bool:
        answer = httpx.get(f"{api_url}/v1/operate", headers=_auth(held["review"]), timeout=15)
        return answer.json()["kafkaError"] is None

    assert wait_until(current, 30)


def test_consumer_lag_is_read_from_kafka(
    api_url: str, held: dict[str, Any], migrated: HandoffSettings, tenant: str
) -> None:
    topic = f"lag-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": migrated.kafka_bootstrap})
    for i in range(5):
        producer.produce(topic, key=b"k", value=str(i).encode(), partition=0)
    assert producer.flush(15) == 0
    # The review consumer's group has taken two of the five.
    group = Consumer({"bootstrap.servers": migrated.kafka_bootstrap,
                      "group.id": f"handoff.{tenant}.review"})  # fmt: skip
    try:
        group.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    finally:
        group.close()
    # The server's sampler takes it from Kafka within its interval (1 s here).
    lags: dict[str, Any] = {}

    def sampled() -> bool:
        view = httpx.get(f"{api_url}/v1/operate", headers=_auth(held["review"]), timeout=15)
        lags.update({c["consumer"]: c for c in view.json()["consumers"]})
        return "review" in lags

    assert wait_until(sampled, 30), "the sampler never reported the review group's lag"
    assert lags["review"]["lag"] == 3 and lags["review"]["partitions"] == 1
    assert "billing" not in lags  # it has committed nothing


def _form(page: str, action: str) -> dict[str, str]:
    found = re.search(rf'action="{re.escape(action)}">\s*(.*?)</form>', page, re.S)
    assert found, f"no form for {action}"
    return dict(re.findall(r'name="(nonce|token)" value="([^"]+)"', found.group(1)))


def test_the_owner_retries_its_quarantined_event_from_the_page_audited(
    ui: httpx.Client, held: dict[str, Any], admin: psycopg.Connection[Any]
) -> None:
    entry = held["quarantine"]["review"]
    page = ui.get("/operate").text
    assert f'data-quarantine="{held["quarantine"]["billing"]}"' in page  # shown, no form
    form = _form(page, f"/operate/quarantine/{entry}/retry")
    done = ui.post(f"/operate/quarantine/{entry}/retry", data={**form, "reason": "fixed"})
    assert done.status_code == 303 and "retry" in done.headers["location"]
    status = admin.execute("SELECT status FROM handoff.quarantine WHERE id = %s", (entry,))
    assert status.fetchone() == ("retry",)
    audit = admin.execute(
        "SELECT actor, action, detail FROM handoff.quarantine_audit WHERE quarantine_id = %s",
        (entry,),
    ).fetchall()
    assert audit[0] == ("review (tracker)", "retry requested", "fixed")
    # Until the consumer has taken it again, a person may still give it up (the page
    # offers it, with a form of its own); after that, nothing is left to decide.
    page = ui.get("/operate").text
    assert f"/operate/quarantine/{entry}/retry" not in page
    discard = _form(page, f"/operate/quarantine/{entry}/discard")
    gone = ui.post(f"/operate/quarantine/{entry}/discard", data={**discard, "reason": "moot"})
    assert gone.status_code == 303
    again = ui.post(f"/operate/quarantine/{entry}/retry",
                    data={**_fresh(ui, f"quarantine/{entry}/retry"), "reason": "x"})  # fmt: skip
    assert again.status_code == 409 and "already discarded" in again.text


def test_the_owner_resolves_its_effect_from_the_page_audited(
    ui: httpx.Client, held: dict[str, Any], admin: psycopg.Connection[Any]
) -> None:
    intent = held["effect"]
    form = _form(ui.get("/operate").text, f"/operate/effects/{intent}/resolve")
    answer = ui.post(f"/operate/effects/{intent}/resolve",
                     data={**form, "outcome": "succeeded", "provider_ref": "pay_123",
                           "reason": "seen in the provider's dashboard"})  # fmt: skip
    assert answer.status_code == 303
    row = admin.execute(
        "SELECT state, reconciliation, provider_ref FROM handoff.effect_intents WHERE id = %s",
        (intent,),
    ).fetchone()
    assert row == ("succeeded", "resolved", "pay_123")
    actor = admin.execute(
        "SELECT actor FROM handoff.effect_history WHERE intent_id = %s ORDER BY id DESC LIMIT 1",
        (intent,),
    ).fetchone()
    assert actor == ("review (tracker)",)


def test_acting_on_another_services_entry_a_forged_form_or_no_reason_is_refused(
    ui: httpx.Client, held: dict[str, Any], admin: psycopg.Connection[Any]
) -> None:
    theirs = held["quarantine"]["billing"]
    # A well-formed form of the signed-in session, for an entry that is not its own.
    form = _fresh(ui, f"quarantine/{theirs}/discard")
    refused = ui.post(f"/operate/quarantine/{theirs}/discard", data={**form, "reason": "mine"})
    assert refused.status_code == 403 and "only billing may act" in refused.text
    mine = held["quarantine"]["review"]
    forged = ui.post(f"/operate/quarantine/{mine}/discard",
                     data={"nonce": "n1", "token": "0" * 64, "reason": "x"})  # fmt: skip
    assert forged.status_code == 403
    form = _form(ui.get("/operate").text, f"/operate/quarantine/{mine}/discard")
    silent = ui.post(f"/operate/quarantine/{mine}/discard", data={**form, "reason": " "})
    assert silent.status_code == 422 and "say why" in silent.text
    # The retry form's token does not discard: each form is bound to its action.
    retry = _form(ui.get("/operate").text, f"/operate/quarantine/{mine}/retry")
    crossed = ui.post(f"/operate/quarantine/{mine}/discard", data={**retry, "reason": "x"})
    assert crossed.status_code == 403
    statuses = admin.execute(
        "SELECT status FROM handoff.quarantine WHERE id = ANY(%s)", ([theirs, mine],)
    ).fetchall()
    assert statuses == [("open",), ("open",)]


def test_an_operate_form_works_once(
    ui: httpx.Client, held: dict[str, Any], admin: psycopg.Connection[Any]
) -> None:
    intent = held["effect"]
    form = _form(ui.get("/operate").text, f"/operate/effects/{intent}/resolve")
    body = {**form, "outcome": "retry", "reason": "look again"}
    assert ui.post(f"/operate/effects/{intent}/resolve", data=body).status_code == 303
    replayed = ui.post(f"/operate/effects/{intent}/resolve", data=body)
    assert replayed.status_code == 403 and "used already" in replayed.text
    history = admin.execute(
        "SELECT count(*) FROM handoff.effect_history WHERE intent_id = %s AND actor = %s",
        (intent, "review (tracker)"),
    ).fetchone()
    assert history == (1,)
