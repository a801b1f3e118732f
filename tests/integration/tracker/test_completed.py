"""Completed work through a real ``handoff serve``: newest first in keyset pages, found
by id prefix (unicode too), one tenant's only, and bad parameters answered 422."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from handoff.core.client import HandoffClient
from handoff.core.identity import Credential
from tests.fix_contract import ServiceFactory


@pytest.fixture
def http(api_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_url, timeout=10) as client:
        yield client


def _finish(client: HandoffClient, doc: str) -> None:
    client.create(event_id=f"{doc}-c", document_id=doc, owner="worker", status="new")


def _done(worker: HandoffClient, doc: str) -> None:
    worker.emit(event_id=f"{doc}-d", event_type="done", document_id=doc, next_owner=None,
                status="done", expected_version=1)  # fmt: skip


@pytest.fixture
def finished(service: ServiceFactory, migrated: Any) -> Iterator[tuple[Credential, list[str]]]:
    creator, worker = service("creator", can_create=True), service("worker")
    docs = ["inv-1", "inv-10", "inv-11", "inv-2", "ordre-été-1", "ordre-été-2", "zzz"]
    with (
        HandoffClient.direct(creator, migrated.database_url, pool_size=1) as c,
        HandoffClient.direct(worker, migrated.database_url, pool_size=1) as w,
    ):
        for doc in [*docs, "inv-open"]:
            _finish(c, doc)
        for doc in docs:  # finished in this order; inv-open stays open
            _done(w, doc)
    yield worker, docs


def _ids(answer: httpx.Response) -> list[str]:
    assert answer.status_code == 200, answer.text
    return [item["documentId"] for item in answer.json()["items"]]


def test_newest_completion_first_in_keyset_pages(
    http: httpx.Client, finished: tuple[Credential, list[str]]
) -> None:
    worker, docs = finished
    auth = {"Authorization": f"Bearer {worker.token}"}
    first = http.get("/v1/completed", params={"limit": 4}, headers=auth)
    assert _ids(first) == list(reversed(docs))[:4]
    item = first.json()["items"][0]
    assert (item["status"], item["version"], item["runId"]) == ("done", 2, 1)
    rest = http.get("/v1/completed", params={"limit": 4, "after": first.json()["next"]},
                    headers=auth)  # fmt: skip
    assert _ids(rest) == list(reversed(docs))[4:]
    assert rest.json()["next"] is None


def test_found_by_id_prefix_in_id_order(
    http: httpx.Client, finished: tuple[Credential, list[str]]
) -> None:
    worker, _ = finished
    auth = {"Authorization": f"Bearer {worker.token}"}
    assert _ids(http.get("/v1/completed", params={"idPrefix": "inv-1"}, headers=auth)) == [
        "inv-1", "inv-10", "inv-11",
    ]  # fmt: skip
    page = http.get("/v1/completed", params={"idPrefix": "inv-", "limit": 2}, headers=auth)
    assert _ids(page) == ["inv-1", "inv-10"]
    params = {"idPrefix": "inv-", "limit": 2, "after": page.json()["next"]}
    more = http.get("/v1/completed", params=params, headers=auth)
    assert _ids(more) == ["inv-11", "inv-2"]  # not inv-open: it is not finished
    assert _ids(http.get("/v1/completed", params={"idPrefix": "ordre-été"}, headers=auth)) == [
        "ordre-été-1", "ordre-été-2",
    ]  # fmt: skip
    assert _ids(http.get("/v1/completed", params={"idPrefix": "nothing"}, headers=auth)) == []


def test_only_the_credentials_tenant_and_bad_parameters(
    http: httpx.Client, finished: tuple[Credential, list[str]], service: ServiceFactory
) -> None:
    stranger = service("stranger", in_tenant=f"t-{uuid.uuid4().hex[:10]}")
    auth = {"Authorization": f"Bearer {stranger.token}"}
    assert _ids(http.get("/v1/completed", headers=auth)) == []
    worker, _ = finished
    mine = {"Authorization": f"Bearer {worker.token}"}
    for params in ({"idPrefix": ""}, {"after": "not-a-cursor"}, {"limit": 0}):
        answer = http.get("/v1/completed", params=params, headers=mine)
        assert answer.status_code == 422 and answer.json()["code"] == "InvalidRequest"
    assert http.get("/v1/completed").status_code == 401
