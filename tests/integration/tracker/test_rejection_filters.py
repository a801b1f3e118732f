"""Rejections filtered by code, sender and time, through a real ``handoff serve``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from handoff.core.client import HandoffClient
from handoff.core.errors import ContractError
from handoff.core.identity import Credential
from tests.fix_contract import ServiceFactory


@pytest.fixture
def refused(service: ServiceFactory, migrated: Any) -> Iterator[Credential]:
    """Two VersionMismatch attempts by worker, one OwnershipMismatch by idler."""
    creator, worker, idler = (
        service("creator", can_create=True),
        service("worker"),
        service("idler"),
    )
    with (
        HandoffClient.direct(creator, migrated.database_url, pool_size=1) as c,
        HandoffClient.direct(worker, migrated.database_url, pool_size=1) as w,
        HandoffClient.direct(idler, migrated.database_url, pool_size=1) as i,
    ):
        for doc in ("r-1", "r-2"):
            c.create(event_id=f"{doc}-c", document_id=doc, owner="worker", status="new")
        attempts = [(w, "r-1", 5), (w, "r-2", 9), (i, "r-1", 1)]
        for client, doc, version in attempts:
            with pytest.raises(ContractError):
                client.emit(event_id=str(uuid.uuid4()), event_type="x", document_id=doc,
                            next_owner="creator", status="s", expected_version=version)  # fmt: skip
    yield worker


def _codes(answer: httpx.Response) -> list[tuple[str, str]]:
    assert answer.status_code == 200, answer.text
    return [(r["code"], r["sender"]) for r in answer.json()["items"]]


def test_filters_by_code_sender_and_time(api_url: str, refused: Credential) -> None:
    auth = {"Authorization": f"Bearer {refused.token}"}
    with httpx.Client(base_url=api_url, headers=auth, timeout=10) as http:
        assert sorted(_codes(http.get("/v1/rejections"))) == [
            ("OwnershipMismatch", "idler"), ("VersionMismatch", "worker"),
            ("VersionMismatch", "worker"),
        ]  # fmt: skip
        assert _codes(http.get("/v1/rejections", params={"code": "OwnershipMismatch"})) == [
            ("OwnershipMismatch", "idler")
        ]
        assert len(_codes(http.get("/v1/rejections", params={"sender": "worker"}))) == 2
        both = {"code": "VersionMismatch", "sender": "idler"}
        assert _codes(http.get("/v1/rejections", params=both)) == []
        now = datetime.now(UTC)
        past = {"until": (now - timedelta(hours=1)).isoformat()}
        assert _codes(http.get("/v1/rejections", params=past)) == []
        recent = {"since": (now - timedelta(hours=1)).isoformat(), "documentId": "r-1"}
        assert len(_codes(http.get("/v1/rejections", params=recent))) == 2
        for bad in ({"code": "Nope"}, {"since": now.isoformat(), "until": now.isoformat()},
                    {"sender": "Not A Name"}):  # fmt: skip
            answer = http.get("/v1/rejections", params=bad)
            assert answer.status_code == 422 and answer.json()["code"] == "InvalidRequest"
