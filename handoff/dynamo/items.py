"""The items of the AWS design's table, built in one place.

The DynamoDB store writes them as changes are accepted; ``handoff export
dynamodb`` writes the same items from PostgreSQL's rows, so a ported table
is what the store would have written (and the store reads it as its own).
Values are plain Python here; ``to_item`` turns them into DynamoDB's typed
attributes, leaving out absent ones (a sparse index must not see them).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from handoff.core.micros import to_micros
from handoff.dynamo import schema as k

_to, _from = TypeSerializer(), TypeDeserializer()


def to_item(values: dict[str, Any]) -> dict[str, Any]:
    return {name: _to.serialize(v) for name, v in values.items() if v is not None}


def plain(item: dict[str, Any]) -> dict[str, Any]:
    return {name: _from.deserialize(v) for name, v in item.items()}


def micros(at: datetime | None) -> int | None:
    return None if at is None else to_micros(at)


def state(
    tenant: str, doc: str, run: int, version: int, owner: str | None, status: str, *,
    assigned_at: str | None, due_at: str | None, created_at: str, updated_at: str,
    completed_at: str | None, data: str,
) -> dict[str, Any]:  # fmt: skip
    """A run's state item (times as schema.stamp text, data as JSON text), with the
    sparse indexes' keys only while someone owns it (and, for ByOwnerDue, a deadline)."""
    found: dict[str, Any] = {
        "PK": k.doc_pk(tenant, doc), "SK": k.state_sk(run), "kind": "state", "tenant": tenant,
        "document_id": doc, "run_id": run, "version": version, "owner": owner, "status": status,
        "assigned_at": assigned_at, "due_at": due_at, "created_at": created_at,
        "updated_at": updated_at, "completed_at": completed_at,
        # JSON text, not a DynamoDB map: numbers stay as the client wrote them
        # (a map would turn them into Decimals and refuse floats).
        "data": data,
    }  # fmt: skip
    if owner is not None:
        found["G1PK"] = k.owner_key(tenant, owner)
        found["G1SK"] = f"{assigned_at}#{doc}#{run}"
        if due_at is not None:
            found["G2PK"] = k.owner_key(tenant, owner)
            found["G2SK"] = f"{due_at}#{doc}#{run}"
    return found


def event(
    tenant: str, doc: str, run: int, version: int, *, event_id: str, event_type: str,
    source: str, occurred_at: int, owner: str | None, previous_owner: str | None, status: str,
    assigned_at: int | None, due_at: int | None, data: dict[str, Any],
    correlation_id: str | None = None, causation_id: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """An accepted version (the stream's outbox): the relay's envelope as JSON text, its
    times in microseconds since the epoch as the outbox payload has them."""
    payload = {
        "eventId": event_id, "eventType": event_type, "source": source,
        "occurredAt": occurred_at, "tenantId": tenant, "documentId": doc, "runId": run,
        "version": version, "correlationId": correlation_id, "causationId": causation_id,
        "owner": owner, "previousOwner": previous_owner, "status": status,
        "assignedAt": assigned_at, "dueAt": due_at, "completed": owner is None,
        "completedAt": occurred_at if owner is None else None, "data": data,
    }  # fmt: skip
    return {
        "PK": k.doc_pk(tenant, doc),
        "SK": k.event_sk(run, version),
        "kind": "event",
        "tenant": tenant,
        "payload": orjson.dumps(payload).decode(),
    }


def receipt(
    tenant: str, event_id: str, fingerprint: bytes, doc: str, run: int, version: int,
    owner: str | None, status: str, accepted_at: str,
) -> dict[str, Any]:  # fmt: skip
    return {
        "PK": k.receipt_pk(tenant, event_id), "SK": "RECEIPT", "fingerprint": fingerprint,
        "document_id": doc, "run_id": run, "version": version, "owner": owner,
        "status": status, "accepted_at": accepted_at,
    }  # fmt: skip


def service(tenant: str, name: str, role: str) -> dict[str, Any]:
    return {"PK": k.services_pk(tenant), "SK": f"SERVICE#{name}", "name": name, "role": role}


def credential(
    role: str, tenant: str, name: str, can_create: bool, secret_hash: bytes
) -> dict[str, Any]:
    return {"PK": k.cred_pk(role), "SK": "CRED", "tenant": tenant, "service": name,
            "can_create": can_create, "secret_hash": secret_hash}  # fmt: skip


def count(tenant: str, owner: str, shard: int, assigned: int) -> dict[str, Any]:
    return {"PK": k.count_pk(tenant, owner, shard), "SK": "COUNT", "owner": owner,
            "assigned": assigned}  # fmt: skip


def rejection(tenant: str, at: str, unique: str, values: dict[str, Any]) -> dict[str, Any]:
    """A rejected attempt: code, message, sender and what the request named."""
    return {"PK": k.rejections_pk(tenant), "SK": f"{at}#{unique}", **values}
