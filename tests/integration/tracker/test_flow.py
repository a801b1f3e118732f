"""Flow over time through a real ``handoff serve``: the pipeline's stage order learned
from the folded outbox (loops included), its pace and quarantine, the fold that finds
a row committed after a later one, the minute samples (p50/p90 age) and the charts'
data; bad parameters answered 422."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from handoff.core import HandoffClient, handoff_tx
from handoff.core.identity import Credential
from handoff.core.settings import HandoffSettings
from tests.fix_contract import ServiceFactory, signed_in

FOLD = "SELECT handoff.fold_flow()"
SAMPLE = "SELECT handoff.sample_owners(interval '0 seconds')"


@pytest.fixture
def http(api_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_url, timeout=10) as client:
        yield client


def _locked(admin: psycopg.Connection[Any], statement: str) -> None:
    """Run a fold, waiting for the server's own round if one is under way (both
    take the flow_fold row; the function skips when another session holds it)."""
    with admin.transaction():
        admin.execute("SELECT 1 FROM handoff.flow_fold FOR UPDATE")
        admin.execute(statement)


def _fold(admin: psycopg.Connection[Any]) -> None:
    # The server folds every few seconds too; folding here makes the test not wait.
    _locked(admin, FOLD)


def _auth(cred: Credential) -> dict[str, str]:
    return {"Authorization": f"Bearer {cred.token}"}


def _move(client: HandoffClient, doc: str, to: str | None, version: int) -> None:
    client.emit(event_id=str(uuid.uuid4()), event_type="moved", document_id=doc, next_owner=to,
                status="done" if to is None else f"at-{to}", expected_version=version)  # fmt: skip


@pytest.fixture
def invoices(
    service: ServiceFactory, migrated: HandoffSettings, admin: psycopg.Connection[Any]
) -> dict[str, Credential]:
    """intake -> routing -> review -> finalization -> done; one review sends back to routing."""
    names = ("intake", "routing", "review", "finalization")
    creds = {n: service(n, can_create=n == "intake") for n in names}
    clients = {n: HandoffClient.direct(c, migrated.database_url, pool_size=1)
               for n, c in creds.items()}  # fmt: skip
    now = datetime.now(UTC)
    try:
        for i in range(6):
            doc = f"inv-{i}"
            due = now + timedelta(hours=-1 if i == 5 else 1)
            clients["intake"].create(event_id=f"{doc}-c", document_id=doc, owner="routing",
                                     status="new", due_at=due)  # fmt: skip
            if i >= 4:
                continue  # inv-4 and inv-5 wait at routing (inv-5 overdue)
            _move(clients["routing"], doc, "review", 1)
            if i == 3:  # sent back once, then on
                _move(clients["review"], doc, "routing", 2)
                _move(clients["routing"], doc, "review", 3)
                continue  # waits at review
            if i == 2:
                continue  # waits at review
            _move(clients["review"], doc, "finalization", 2)
            _move(clients["finalization"], doc, None, 3)
    finally:
        for client in clients.values():
            client.close()
    _fold(admin)
    return creds


def test_stages_in_flow_order_learned_from_history_with_counts_and_pace(
    http: httpx.Client, invoices: dict[str, Credential]
) -> None:
    answer = http.get("/v1/pipeline", headers=_auth(invoices["review"]))
    assert answer.status_code == 200, answer.text
    view = answer.json()
    stages = {s["owner"]: s for s in view["stages"]}
    # The loop review -> routing does not put routing after review.
    assert [s["owner"] for s in view["stages"]] == ["routing", "review", "finalization"]
    assert (stages["routing"]["waiting"], stages["routing"]["overdue"]) == (2, 1)
    assert stages["review"]["waiting"] == 2 and stages["finalization"]["waiting"] == 0
    # Pace over the default 15 minutes: 6 created; routing handed on 5 times.
    assert view["windowMinutes"] == 15
    assert view["createdPerMinute"] == round(6 / 15, 2)
    assert view["completedPerMinute"] == round(2 / 15, 2)
    assert stages["routing"]["departedPerMinute"] == round(5 / 15, 2)
    assert stages["routing"]["arrivedPerMinute"] == round(7 / 15, 2)
    assert stages["review"]["next"] == ["finalization", "routing"]
    assert stages["finalization"]["next"] == [""]  # "" = finished


def test_a_stage_shows_its_quarantined_events(
    http: httpx.Client, invoices: dict[str, Credential], admin: psycopg.Connection[Any],
    tenant: str,
) -> None:  # fmt: skip
    admin.execute(
        """INSERT INTO handoff.quarantine (tenant_id, consumer, event_id, topic, kafka_partition,
               kafka_offset, category, error, attempts)
           VALUES (%s, 'review', 'e-poison', 't', 0, 1, 'handler_error', 'boom', 1)""",
        (tenant,),
    )
    view = http.get("/v1/pipeline", headers=_auth(invoices["review"])).json()
    stages = {s["owner"]: s for s in view["stages"]}
    assert stages["review"]["quarantined"] == 1 and stages["routing"]["quarantined"] == 0


def test_the_fold_finds_a_change_committed_after_a_later_one(
    service: ServiceFactory, migrated: HandoffSettings, admin: psycopg.Connection[Any],
    http: httpx.Client,
) -> None:  # fmt: skip
    maker = service("maker", can_create=True)
    service("checker")
    info = make_conninfo(migrated.database_url, user=maker.role, password=maker.secret)
    with (
        psycopg.connect(info) as slow,
        HandoffClient.direct(maker, migrated.database_url) as fast,
        handoff_tx(slow) as tx,
    ):
        tx.create(event_id="slow-c", document_id="slow", owner="checker", status="new")
        # Its outbox id is taken; it commits only after a later id is folded.
        fast.create(event_id="fast-c", document_id="fast", owner="checker", status="new")
        _fold(admin)
        edges = http.get("/v1/pipeline", headers=_auth(maker)).json()["stages"]
        assert edges[0]["arrivedPerMinute"] == round(1 / 15, 2)
        tx.commit()
    _fold(admin)
    stages = http.get("/v1/pipeline", headers=_auth(maker)).json()["stages"]
    assert [(s["owner"], s["arrivedPerMinute"]) for s in stages] == [("checker", round(2 / 15, 2))]


def test_samples_give_waiting_ages_and_the_charts_their_points(
    http: httpx.Client, invoices: dict[str, Credential], admin: psycopg.Connection[Any]
) -> None:
    _locked(admin, SAMPLE)
    owners = http.get("/v1/owners", headers=_auth(invoices["review"])).json()["owners"]
    routing = next(o for o in owners if o["owner"] == "routing")
    assert routing["ageP50From"] is not None and routing["ageP90From"] is not None
    assert routing["oldestAssignedAt"] <= routing["ageP90From"] <= routing["ageP50From"]

    trends = http.get("/v1/trends", headers=_auth(invoices["review"])).json()
    assert trends["window"] == "hour" and trends["bucketS"] == 60
    series = {s["owner"]: s for s in trends["owners"]}
    assert series["routing"]["assigned"][-1] == 2 and series["routing"]["overdue"][-1] == 1
    assert series["review"]["oldestS"][-1] >= 0
    assert len(series["review"]["at"]) == len(series["review"]["assigned"]) >= 1
    assert sum(trends["created"]) == 6 and sum(trends["completed"]) == 2
    assert len(trends["flowAt"]) == len(trends["created"])
    day = http.get("/v1/trends", params={"window": "day"}, headers=_auth(invoices["review"]))
    assert day.json()["bucketS"] == 600


def test_other_tenants_flow_is_not_seen(
    http: httpx.Client, invoices: dict[str, Credential], service: ServiceFactory,
) -> None:  # fmt: skip
    stranger = service("routing", in_tenant=f"other-{uuid.uuid4().hex[:8]}")
    view = http.get("/v1/pipeline", headers=_auth(stranger)).json()
    assert view["stages"] == [] and view["createdPerMinute"] == 0


@pytest.mark.parametrize(
    ("path", "params"),
    [("/v1/pipeline", {"minutes": 0}), ("/v1/pipeline", {"minutes": 1441}),
     ("/v1/trends", {"window": "week"})],
)  # fmt: skip
def test_bad_parameters_are_422(
    http: httpx.Client, invoices: dict[str, Credential], path: str, params: dict[str, Any]
) -> None:
    answer = http.get(path, params=params, headers=_auth(invoices["review"]))
    assert answer.status_code == 422 and answer.json()["code"] == "InvalidRequest"


def test_pages_show_the_stages_and_the_charts(
    api_url: str, invoices: dict[str, Credential], admin: psycopg.Connection[Any]
) -> None:
    _locked(admin, SAMPLE)
    with signed_in(api_url, invoices["review"]) as ui:
        page = ui.get("/pipeline").text
        assert page.index('data-stage="routing"') < page.index('data-stage="review"')
        assert page.index('data-stage="review"') < page.index('data-stage="finalization"')
        # The flow: a node per stage in the same order, edges between them, both ends.
        flow = page[page.index('<svg class="flow"') : page.index("</svg>")]
        assert flow.index('data-flow-stage="routing"') < flow.index('data-flow-stage="review"')
        assert 'data-flow-edge="routing → review"' in flow and "data-flow-start" in flow
        assert 'href="/owners/review"' in flow
        day = ui.get("/pipeline", params={"minutes": "1440"})
        assert day.status_code == 200 and "over the last 1440 minutes" in day.text
        bad = ui.get("/pipeline", params={"minutes": "7"})
        assert bad.status_code == 422 and "minutes must be one of" in bad.text
        charts = ui.get("/trends").text
        assert charts.count("<polyline") >= 3 + 2  # per owner twice, created + completed
        assert 'data-series="completed"' in charts
        assert ui.get("/trends", params={"window": "week"}).status_code == 422
