"""Inputs with one strict meaning, through a real ``handoff serve``: crafted cursors,
deep data filters, odd digits in the hand-on form, instants that are not RFC 3339,
a wrong method. Each answers 4xx with its code; none is a 500 (after which the server
would close a pooled client's keep-alive connection)."""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from handoff.core import HandoffClient
from handoff.core.identity import Credential
from handoff.core.settings import HandoffSettings
from tests.fix_contract import ServiceFactory, signed_in


def cursor(parts: object) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(parts)).rstrip(b"=").decode()


CRAFTED = [
    "W3RydWVd",  # base64 of [true]: the old form, where bool passed as int (a 500)
    cursor([True, "a"]),
    "true",
    "1.0",
    "1e5",
    "0x10",
    "1" * 20,  # a digit more than any position needs
    "--1",
    " 1",
    "1/" + "x" * 201,  # a document id longer than the naming rule allows
    "1/a\x00b",
    "",
    "/a",
]
# Positions that fit the format are valid, even beyond what a listing holds.
ODD_BUT_VALID = ["999999999999999999", "-999999999999999999", "0", "5/a/b/c", "7/"]


@pytest.fixture
def owner(service: ServiceFactory, migrated: HandoffSettings) -> Credential:
    credential = service("review", can_create=True)
    with HandoffClient.direct(credential, migrated.database_url, pool_size=1) as client:
        client.create(event_id=str(uuid.uuid4()), document_id="inv-1", owner="review",
                      status="new")  # fmt: skip
    return credential


@pytest.fixture
def api(api_url: str, owner: Credential) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {owner.token}"}
    with httpx.Client(base_url=api_url, headers=headers, timeout=15) as client:
        yield client


@pytest.fixture
def ui(api_url: str, owner: Credential) -> Iterator[httpx.Client]:
    with signed_in(api_url, owner) as client:
        yield client


API_LISTINGS = [
    "/v1/rejections",
    "/v1/rejections?documentId=inv-1",
    "/v1/documents/inv-1/history",
    "/v1/find",
    "/v1/find?owner=review&sort=assigned",
    "/v1/completed",
    "/v1/completed?idPrefix=inv",
    "/v1/owners/review/documents",
    "/v1/owners/review/overdue",
]


@pytest.mark.parametrize("path", API_LISTINGS)
def test_a_crafted_cursor_is_422_on_every_listing(api: httpx.Client, path: str) -> None:
    for after in CRAFTED:
        answer = api.get(path, params={"after": after})
        assert answer.status_code == 422, (path, after, answer.text)
        assert answer.json()["code"] == "InvalidRequest"
    for after in ODD_BUT_VALID:
        answer = api.get(path, params={"after": after})
        assert answer.status_code == 200, (path, after, answer.text)


@pytest.mark.parametrize("page", ["/rejections", "/find", "/completed?idPrefix=inv",
                                  "/owners/review"])  # fmt: skip
def test_a_crafted_cursor_is_422_on_every_page(ui: httpx.Client, page: str) -> None:
    for after in CRAFTED:
        if after == "":  # an empty form field is no cursor
            continue
        answer = ui.get(page, params={"after": after})
        assert answer.status_code == 422, (page, after, answer.text[:300])


def test_the_cursors_the_api_gives_out_still_work(api: httpx.Client) -> None:
    first = api.get("/v1/find", params={"limit": 1, "state": "any"}).json()
    assert first["next"] is not None
    assert api.get("/v1/find", params={"limit": 1, "after": first["next"]}).status_code == 200


def test_a_deep_data_filter_is_422(api: httpx.Client, ui: httpx.Client) -> None:
    deep = '{"a": ' + "[" * 950 + "]" * 950 + "}"
    assert len(deep) <= 2000
    answer = api.get("/v1/find", params={"data": deep})
    assert answer.status_code == 422, answer.text
    assert "deeper than 32" in answer.json()["message"]
    assert ui.get("/find", params={"data": deep}).status_code == 422
    shallow = '{"a": ' + "[" * 30 + "]" * 30 + "}"
    assert api.get("/v1/find", params={"data": shallow}).status_code == 200


def test_a_wrong_method_is_405_with_allow(api: httpx.Client) -> None:
    answer = api.delete("/v1/owners")
    assert answer.status_code == 405
    assert answer.headers["allow"] == "GET"
    assert answer.json()["code"] == "MethodNotAllowed"


def _handoff_form(ui: httpx.Client) -> dict[str, str]:
    page = ui.get("/documents/inv-1").text
    found = re.search(r'action="/documents/inv-1/handoff">(.*?)</form>', page, re.S)
    assert found, "the owner sees no hand-on form"
    return dict(re.findall(r'name="([a-z_]+)" value="([^"]*)"', found.group(1)))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("expected_version", "²"),
        ("expected_version", "1" * 5000),
        ("expected_version", "0"),
        ("expected_version", "2147483648"),
        ("run_id", "³"),
        ("run_id", "9" * 5000),
        ("expected_version", "\uff11"),
    ],
)
def test_odd_digits_in_the_hand_on_form_are_422(ui: httpx.Client, field: str, value: str) -> None:
    form = {**_handoff_form(ui), "event_type": "approved", "next_owner": "", "status": "done"}
    answer = ui.post("/documents/inv-1/handoff", data={**form, field: value})
    assert answer.status_code == 422, answer.text[:300]
    # No 500 before it: the same keep-alive connection goes on serving.
    assert ui.get("/documents/inv-1").status_code == 200


@pytest.mark.parametrize(
    "due",
    [
        "-1",
        "0",
        "1000000000000",
        "0.5",
        "2026-12-01T09:00:00",
        "2026-12-01",
        "tomorrow",
        "2026-12-01T09:00:00+0100",
        1764579600,
        1.5,
        True,
    ],
)
def test_due_at_is_rfc_3339_with_an_offset(api: httpx.Client, due: Any) -> None:
    body = {"eventId": str(uuid.uuid4()), "documentId": f"d-{uuid.uuid4().hex[:6]}",
            "owner": "review", "status": "new", "dueAt": due}  # fmt: skip
    answer = api.post("/v1/documents", json=body)
    assert answer.status_code == 422, (due, answer.text)
    assert "RFC 3339" in answer.json()["message"]


def test_due_at_accepts_rfc_3339_forms(api: httpx.Client) -> None:
    for due in ("2030-01-01T09:00:00Z", "2030-01-01t09:00:00.123456789+01:00",
                "2030-01-01 09:00:00-05:30"):  # fmt: skip
        body = {"eventId": str(uuid.uuid4()), "documentId": f"d-{uuid.uuid4().hex[:6]}",
                "owner": "review", "status": "new", "dueAt": due}  # fmt: skip
        assert api.post("/v1/documents", json=body).status_code == 201, due


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/v1/rejections", "since"),
        ("/v1/rejections", "until"),
        ("/v1/find", "assignedSince"),
        ("/v1/find", "assignedUntil"),
    ],
)
def test_query_times_are_rfc_3339_with_an_offset(api: httpx.Client, path: str, name: str) -> None:
    for value in ("0.5", "0", "-1", "1764579600", "2026-12-01T09:00:00", "2026-12-01"):
        answer = api.get(path, params={name: value})
        assert answer.status_code == 422, (path, name, value, answer.text)
    assert api.get(path, params={name: "2026-12-01T09:00:00Z"}).status_code == 200
