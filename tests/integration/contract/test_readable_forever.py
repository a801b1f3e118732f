"""Whatever the contract accepts, every read can return, forever.

Generated ids, statuses, deadlines (the whole accepted range, in far time
zones) and data go in through every entry point (HTTP, the direct client)
and come back through every read: the query API, the web UI's pages, the
per-owner counts, and the events on Kafka decoded by confluent-kafka's
AvroDeserializer (the reader that an out-of-range deadline used to break).
"""

from __future__ import annotations

import itertools
import math
import unicodedata
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from handoff.core.client import HandoffClient
from handoff.core.identity import Credential
from handoff.core.models import EARLIEST, LATEST
from handoff.core.names import id_problem, label_problem
from handoff.core.settings import HandoffSettings
from tests.fix_contract import ServiceFactory, signed_in
from tests.fix_relay import Relays, consume

ZONES = [
    timezone(timedelta(hours=h, minutes=m))
    for h, m in ((-14, 0), (-3, -30), (0, 0), (5, 45), (14, 0))
]
_EXCLUDED = ("Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp")
_serial = itertools.count()


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


ids = (
    st.text(st.characters(exclude_categories=_EXCLUDED), min_size=1, max_size=40)
    .map(_nfc)
    .filter(lambda s: id_problem(s + "-0") is None)
)
labels = (
    st.text(
        st.characters(exclude_categories=("Cc", "Cf", "Cs", "Co", "Cn")), min_size=1, max_size=60
    )
    .map(lambda s: _nfc(s).strip(" "))
    .filter(lambda s: label_problem(s) is None)
)
instants = st.one_of(
    st.just(EARLIEST),
    st.just(LATEST),
    st.datetimes(
        min_value=EARLIEST.replace(tzinfo=None) + timedelta(days=1),
        max_value=LATEST.replace(tzinfo=None) - timedelta(days=1),
        timezones=st.sampled_from(ZONES),
    ),
    # around now, so that some are overdue and some not
    st.integers(-(10**6), 10**6).map(lambda s: datetime.now(UTC) + timedelta(seconds=s)),
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.text(
                st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=6
            ),
            inner,
            max_size=3,
        )
    ),
    max_leaves=10,
)
datas = st.dictionaries(
    st.text(min_size=1, max_size=8).filter(lambda k: "\x00" not in k), json_values, max_size=4
)


@dataclass
class Case:
    document_id: str
    status: str
    handed_status: str
    created_due: datetime
    due: datetime
    data: dict[str, Any]
    over_http: bool


@st.composite
def cases(draw: st.DrawFn) -> Case:
    return Case(
        document_id=f"{draw(ids)}-{next(_serial)}",
        status=draw(labels),
        handed_status=draw(labels),
        created_due=draw(instants),
        due=draw(instants),
        data=draw(datas),
        over_http=draw(st.booleans()),
    )


def same(a: Any, b: Any) -> bool:
    """JSON equality through jsonb: numbers compare by value (1e308 comes back as an int)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(a, b, rel_tol=1e-15, abs_tol=1e-300)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text)


@pytest.fixture
def intake(service: ServiceFactory) -> Credential:
    """Set up once per test (hypothesis runs every example inside one fixture scope)."""
    service("review")
    return service("intake", can_create=True)


@pytest.mark.slow
@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batch=st.lists(cases(), min_size=6, max_size=6))
def test_every_accepted_value_reads_back_everywhere(
    batch: list[Case],
    migrated: HandoffSettings,
    intake: Credential,
    api_url: str,
    relays: Relays,
    tenant: str,
) -> None:
    auth = {"Authorization": f"Bearer {intake.token}"}
    direct = HandoffClient.direct(intake, migrated.database_url, pool_size=1)
    over_http = HandoffClient.http(api_url, intake)
    try:
        for case in batch:
            client = over_http if case.over_http else direct
            client.create(
                event_id=f"c-{uuid.uuid4()}", document_id=case.document_id, owner="intake",
                status=case.status, due_at=case.created_due, data=case.data,
            )  # fmt: skip
            (direct if case.over_http else over_http).emit(
                event_id=f"h-{uuid.uuid4()}", event_type="handed", document_id=case.document_id,
                next_owner="review", status=case.handed_status, expected_version=1,
                due_at=case.due, data={"step": "review"},
            )  # fmt: skip
    finally:
        direct.close()
        over_http.close()

    # The web UI reads with its session; the API with the bearer header.
    with signed_in(api_url, intake, headers=auth, timeout=30) as http:
        now = datetime.now(UTC)
        for case in batch:
            path = quote(case.document_id, safe="")
            detail = http.get(f"/v1/documents/{path}")
            assert detail.status_code == 200, detail.text
            body = detail.json()
            assert body["documentId"] == case.document_id
            assert body["owner"] == "review" and body["status"] == case.handed_status
            assert instant(body["dueAt"]) == case.due
            assert same(body["data"], {**case.data, "step": "review"})
            history = http.get(f"/v1/documents/{path}/history")
            assert history.status_code == 200, history.text
            assert [h["version"] for h in history.json()["items"]] == [1, 2]
            assert instant(history.json()["items"][0]["dueAt"]) == case.created_due
            page = http.get(f"/documents/{path}")
            assert page.status_code == 200 and "Not valid" not in page.text

        listed = http.get("/v1/owners/review/documents", params={"limit": 500})
        assert listed.status_code == 200, listed.text
        listed_ids = {d["documentId"] for d in listed.json()["items"]}
        assert {c.document_id for c in batch} <= listed_ids
        overdue = http.get("/v1/owners/review/overdue", params={"limit": 500})
        assert overdue.status_code == 200, overdue.text
        overdue_ids = {d["documentId"] for d in overdue.json()["items"]}
        assert {c.document_id for c in batch if c.due < now} <= overdue_ids
        owners = {o["owner"]: o for o in http.get("/v1/owners").json()["owners"]}
        assert owners["review"]["assigned"] == len(listed_ids)
        assert owners["review"]["overdue"] == len(overdue_ids)
        ui = http.get("/owners/review")
        assert ui.status_code == 200 and "Not valid" not in ui.text

    assert relays.run_once().returncode == 0
    wanted = {c.document_id for c in batch}
    events = consume(
        migrated, relays.topic, tenant,
        lambda seen: all(len(seen.get(d, [])) >= 2 for d in wanted),
    )  # fmt: skip
    for case in batch:
        versions = {e["version"]: e for e in events[case.document_id]}
        assert versions[1]["dueAt"] == case.created_due
        assert versions[2]["dueAt"] == case.due
        assert versions[2]["status"] == case.handed_status
