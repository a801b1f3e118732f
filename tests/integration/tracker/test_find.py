"""Find through a real ``handoff serve``: id prefix, owner, state, status, overdue,
assigned range and data containment, sorted by id / assigned / due both ways, in keyset
pages; a walk that stops at its bound continues from there (in-process, small bound);
bad parameters answered 422."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool

from handoff.core import HandoffClient
from handoff.core.identity import Credential
from handoff.core.settings import HandoffSettings
from handoff.tracker import read_model as reads
from tests.fix_contract import ServiceFactory, signed_in

NOW = datetime.now(UTC)


@pytest.fixture
def http(api_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_url, timeout=10) as client:
        yield client


@pytest.fixture
def docs(service: ServiceFactory, migrated: HandoffSettings) -> Credential:
    """inv-1..inv-6 at review (inv-2, inv-5 overdue), ord-1 at billing, inv-9 finished."""
    maker, review = service("maker", can_create=True), service("review")
    service("billing")
    with (
        HandoffClient.direct(maker, migrated.database_url, pool_size=1) as m,
        HandoffClient.direct(review, migrated.database_url, pool_size=1) as r,
    ):
        for i in range(1, 7):
            late = i in (2, 5)
            m.create(event_id=f"c{i}", document_id=f"inv-{i}", owner="review",
                     status="urgent" if i == 3 else "new",
                     due_at=NOW + timedelta(hours=-i if late else i),
                     data={"amount": i * 100, "tags": ["a"] if i % 2 else ["b"]})  # fmt: skip
        m.create(event_id="c-ord", document_id="ord-1", owner="billing", status="new",
                 data={"amount": 100})  # fmt: skip
        m.create(event_id="c9", document_id="inv-9", owner="review", status="new")
        r.emit(event_id="d9", event_type="done", document_id="inv-9", next_owner=None,
               status="paid", expected_version=1)  # fmt: skip
    return review


def _find(http: httpx.Client, cred: Credential, **params: Any) -> httpx.Response:
    return http.get("/v1/find", params=params, headers={"Authorization": f"Bearer {cred.token}"})


def _ids(answer: httpx.Response) -> list[str]:
    assert answer.status_code == 200, answer.text
    return [d["documentId"] for d in answer.json()["items"]]


def test_id_prefix_both_ways_in_keyset_pages(http: httpx.Client, docs: Credential) -> None:
    first = _find(http, docs, idPrefix="inv-", limit=4)
    assert _ids(first) == ["inv-1", "inv-2", "inv-3", "inv-4"]  # inv-9 is finished
    more = _find(http, docs, idPrefix="inv-", limit=4, after=first.json()["next"])
    assert _ids(more) == ["inv-5", "inv-6"] and more.json()["next"] is None
    assert _ids(_find(http, docs, idPrefix="inv-", order="desc", limit=2)) == ["inv-6", "inv-5"]
    assert _ids(_find(http, docs, idPrefix="inv-", state="any"))[-1] == "inv-9"
    assert _ids(_find(http, docs, state="completed")) == ["inv-9"]


def test_one_owners_work_by_assignment_or_deadline(http: httpx.Client, docs: Credential) -> None:
    assert _ids(_find(http, docs, owner="billing")) == ["ord-1"]
    by_due = _ids(_find(http, docs, owner="review", sort="due"))
    assert by_due == ["inv-5", "inv-2", "inv-1", "inv-3", "inv-4", "inv-6"]
    assert _ids(_find(http, docs, owner="review", sort="due", overdue=True)) == ["inv-5", "inv-2"]
    newest = _ids(_find(http, docs, owner="review", sort="assigned", order="desc", limit=2))
    assert newest == ["inv-6", "inv-5"]
    page = _find(http, docs, owner="review", sort="assigned", limit=4)
    rest = _find(http, docs, owner="review", sort="assigned", limit=4, after=page.json()["next"])
    assert _ids(page) + _ids(rest) == [f"inv-{i}" for i in range(1, 7)]


def test_status_overdue_range_and_data_filters(http: httpx.Client, docs: Credential) -> None:
    assert _ids(_find(http, docs, status="urgent")) == ["inv-3"]
    assert _ids(_find(http, docs, overdue=True)) == ["inv-2", "inv-5"]
    assert _ids(_find(http, docs, data='{"amount": 100}')) == ["inv-1", "ord-1"]
    assert _ids(_find(http, docs, data='{"tags": ["b"]}', idPrefix="inv")) == [
        "inv-2", "inv-4", "inv-6",
    ]  # fmt: skip
    later = (NOW + timedelta(days=1)).isoformat()
    assert _ids(_find(http, docs, assignedSince=later)) == []
    everything = _find(http, docs, assignedSince=(NOW - timedelta(days=1)).isoformat())
    assert len(_ids(everything)) == 7
    found = _find(http, docs, idPrefix="inv-2").json()["items"][0]
    assert (found["owner"], found["overdue"], found["status"]) == ("review", True, "new")


@pytest.mark.parametrize(
    ("params", "says"),
    [({"sort": "assigned"}, "pick an owner"), ({"data": "{nope"}, "not JSON"),
     ({"data": "[1]"}, "JSON object"), ({"state": "gone"}, ""), ({"order": "up"}, ""),
     ({"after": "garbage!"}, "after"), ({"sort": "due", "owner": "review", "state": "completed"},
      "waiting work"),
     ({"assignedSince": "2026-01-02T00:00:00Z", "assignedUntil": "2026-01-01T00:00:00Z"}, "before"),
     ({"assignedSince": "2026-01-02T00:00:00"}, "RFC 3339")],
)  # fmt: skip
def test_bad_parameters_are_422(
    http: httpx.Client, docs: Credential, params: dict[str, Any], says: str
) -> None:
    answer = _find(http, docs, **params)
    assert answer.status_code == 422, answer.text
    assert answer.json()["code"] == "InvalidRequest" and says in answer.text


def test_a_walk_stopped_at_its_bound_continues_from_where_it_got(
    docs: Credential, migrated: HandoffSettings
) -> None:
    # In-process with a bound of 3 entries: 'urgent' is the 3rd of 8 active-or-not rows by id.
    async def walk() -> list[tuple[list[str], int, bool]]:
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            migrated.database_url, min_size=1, max_size=1, kwargs={"autocommit": True},
            open=False,
        )  # fmt: skip
        await pool.open()
        try:
            model = reads.ReadModel(pool)
            only = reads.FindFilter(status="new", state="any")
            pages, after = [], None
            while True:
                page = await model.one(docs, reads.find(only, 50, after, budget=3))
                pages.append(([d.document_id for d in page.items], page.scanned, bool(page.next)))
                if page.next is None:
                    return pages
                after = page.next
        finally:
            await pool.close()

    # In a thread of its own: after the browser tests, this thread has an event loop.
    with ThreadPoolExecutor(1) as pool:
        pages = pool.submit(lambda: asyncio.run(walk())).result()
    assert [p[1] for p in pages] == [3, 3, 2]  # 8 rows walked 3 at a time
    assert [i for ids, _, _ in pages for i in ids] == [
        "inv-1",
        "inv-2",
        "inv-4",
        "inv-5",
        "inv-6",
        "ord-1",
    ]  # fmt: skip  (inv-3 is urgent, inv-9 paid)
    assert [more for _, _, more in pages] == [True, True, False]


def test_the_page_lists_and_sorts(api_url: str, docs: Credential) -> None:
    with signed_in(api_url, docs) as ui:
        page = ui.get("/find", params={"owner": "review", "sort": "due"}).text
        assert page.index('data-document="inv-5"') < page.index('data-document="inv-1"')
        assert 'data-sort="assigned"' in page
        plain = ui.get("/find", params={"idPrefix": "inv-"}).text
        assert 'data-found="6"' in plain and 'data-sort="due"' not in plain  # needs an owner
        bad = ui.get("/find", params={"data": "{"})
        assert bad.status_code == 422 and "not JSON" in bad.text
