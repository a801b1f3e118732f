"""A timeout leaves the outcome unknown; retrying with the same event id settles it."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import psycopg
import pytest

from handoff.core import errors, retrying
from handoff.core.client import HandoffClient
from tests.fix_contract import ServiceFactory, counts


def test_http_timeout_then_identical_retry_returns_the_original_receipt(
    api_url: str, service: ServiceFactory, admin: psycopg.Connection[Any], tenant: str
) -> None:
    owner = service("owner", can_create=True)
    service("next")
    with HandoffClient.http(api_url, owner) as client:
        client.create(event_id=str(uuid.uuid4()), document_id="slow", owner="owner", status="new")

    event_id = str(uuid.uuid4())

    def move(c: HandoffClient) -> Any:
        return c.emit(
            event_id=event_id,
            event_type="moved",
            document_id="slow",
            next_owner="next",
            status="moved",
            expected_version=1,
        )

    release = threading.Event()

    def hold_row_lock() -> None:
        with psycopg.connect(admin.info.dsn, password=admin.info.password) as conn:
            conn.execute(
                "SELECT 1 FROM handoff.document_state WHERE tenant_id = %s FOR UPDATE", (tenant,)
            )
            release.wait(30)

    holder = threading.Thread(target=hold_row_lock)
    holder.start()
    try:
        with (
            HandoffClient.http(api_url, owner, timeout_s=0.5) as impatient,
            pytest.raises(errors.OutcomeUnknown, match="same event id"),
        ):
            move(impatient)
    finally:
        release.set()
        holder.join()

    with HandoffClient.http(api_url, owner) as client:
        receipt = retrying(lambda: move(client))
    # the first attempt went through once the lock was released: this is its receipt
    assert receipt.replayed and receipt.version == 2
    assert counts(admin, tenant) == {"next": 1}
    versions = admin.execute(
        "SELECT count(*) FROM handoff.document_history WHERE tenant_id = %s", (tenant,)
    ).fetchone()
    assert versions == (2,)
