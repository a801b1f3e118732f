"""The single table of the AWS design: its keys, its sparse indexes, its creation.

    PK                                   SK                         what
    TENANT#t#DOC#id                      STATE#<run:06>             a run's current state
    TENANT#t#DOC#id                      EVENT#<run:06>#<ver:010>   an accepted version (the event)
    TENANT#t#RECEIPT#<event id>          RECEIPT                    the idempotency record
    TENANT#t#COUNT#<owner>#<shard>       COUNT                      assigned documents, one shard
    TENANT#t#SERVICES                    SERVICE#<name>             a registered service
    TENANT#t#REJ                         <at>#<uuid>                a rejected attempt
    CRED#<role>                          CRED                       a credential (secret hash)

Sparse GSIs, keyed only on state items that have an owner (and a deadline):
ByOwner (G1PK = TENANT#t#OWNER#o, G1SK = <assigned at>#<id>#<run>) and
ByOwnerDue (G2PK = the same, G2SK = <due at>#<id>#<run>). An attribute that
is absent keeps an item out of an index: finishing a document removes them.

Times are ISO 8601 UTC with microseconds, so string order is time order.
The table has a stream (NEW_IMAGE): EVENT items are the outbox.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

SHARDS = 16  # count items per owner: one item per owner would be a hot key
BY_OWNER = "ByOwner"
BY_OWNER_DUE = "ByOwnerDue"


def doc_pk(tenant: str, document_id: str) -> str:
    return f"TENANT#{tenant}#DOC#{document_id}"


def state_sk(run: int) -> str:
    return f"STATE#{run:06d}"


def event_sk(run: int, version: int) -> str:
    return f"EVENT#{run:06d}#{version:010d}"


def receipt_pk(tenant: str, event_id: str) -> str:
    return f"TENANT#{tenant}#RECEIPT#{event_id}"


def count_pk(tenant: str, owner: str, shard: int) -> str:
    return f"TENANT#{tenant}#COUNT#{owner}#{shard}"


def services_pk(tenant: str) -> str:
    return f"TENANT#{tenant}#SERVICES"


def rejections_pk(tenant: str) -> str:
    return f"TENANT#{tenant}#REJ"


def owner_key(tenant: str, owner: str) -> str:
    return f"TENANT#{tenant}#OWNER#{owner}"


def cred_pk(role: str) -> str:
    return f"CRED#{role}"


def stamp(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="microseconds")


def parse_stamp(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def table_definition(name: str) -> dict[str, Any]:
    """CreateTable arguments: on-demand, a NEW_IMAGE stream, the two sparse GSIs."""
    keys = ("PK", "SK", "G1PK", "G1SK", "G2PK", "G2SK")
    return {
        "TableName": name,
        "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": [
            {"AttributeName": "PK", "KeyType": "HASH"},
            {"AttributeName": "SK", "KeyType": "RANGE"},
        ],
        "AttributeDefinitions": [{"AttributeName": k, "AttributeType": "S"} for k in keys],
        "GlobalSecondaryIndexes": [
            {
                "IndexName": index,
                "Projection": {"ProjectionType": "ALL"},
                "KeySchema": [
                    {"AttributeName": pk, "KeyType": "HASH"},
                    {"AttributeName": sk, "KeyType": "RANGE"},
                ],
            }
            for index, pk, sk in ((BY_OWNER, "G1PK", "G1SK"), (BY_OWNER_DUE, "G2PK", "G2SK"))
        ],
        "StreamSpecification": {"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
    }
