"""What the AWS design's single table would consume and allow, modelled from published limits.

Nothing here is measured: moto (the functional stand-in the tests use) says
nothing about DynamoDB's performance. The figures follow from the items the
DynamoDB store writes (their sizes computed by DynamoDB's sizing rules from
the very items ``handoff/dynamo/items.py`` builds) and from AWS's published
limits and prices, each named in ``SOURCES``. Prices are parameters: pass
today's for your region.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import orjson

from handoff.dynamo import items as it
from handoff.dynamo import schema as k

SOURCES = {
    "partition": "AWS, DynamoDB developer guide, 'Best practices for designing and using "
    "partition keys effectively': each partition 3,000 read units/s and 1,000 write units/s",
    "units": "AWS, DynamoDB on-demand pricing page: a standard write unit per 1 KB, a "
    "transactional write 2 per 1 KB; a strongly consistent read 1 unit per 4 KB, eventually "
    "consistent 1/2, transactional 2",
    "sizes": "AWS, DynamoDB developer guide, 'Item sizes and formats': attribute name bytes + "
    "value bytes (strings UTF-8, numbers ~1 byte per 2 significant digits + 1, binary raw)",
    "table-quota": "AWS, DynamoDB service quotas: 40,000 read and 40,000 write request units/s "
    "per on-demand table by default (adjustable)",
    "prices": "AWS, DynamoDB on-demand pricing, us-east-1 after the 2024-11-01 cut: $0.625 per "
    "million write request units, $0.125 per million read request units, $0.25 per GB-month "
    "(Standard class), streams $0.02 per 100,000 read request units",
    "pages": "AWS, DynamoDB developer guide, Query: 1 MB per page; BatchGetItem: 100 keys",
}


@dataclass(frozen=True)
class Prices:
    write_per_million: float = 0.625
    read_per_million: float = 0.125
    gb_month: float = 0.25
    stream_reads_per_100k: float = 0.02


def _number_size(value: int | float | Decimal) -> int:
    digits = len(str(abs(Decimal(str(value)))).replace(".", "").lstrip("0")) or 1
    return math.ceil(digits / 2) + 1


def item_size(values: dict[str, Any]) -> int:
    """Bytes DynamoDB counts for an item of plain values (as ``items.to_item`` takes)."""

    def value_size(v: Any) -> int:
        if isinstance(v, bool) or v is None:
            return 1
        if isinstance(v, (int, float, Decimal)):
            return _number_size(v)
        if isinstance(v, bytes):
            return len(v)
        if isinstance(v, str):
            return len(v.encode())
        if isinstance(v, dict):
            return 3 + sum(len(n.encode()) + value_size(x) + 1 for n, x in v.items())
        if isinstance(v, (list, tuple)):
            return 3 + sum(value_size(x) + 1 for x in v)
        raise TypeError(type(v).__name__)

    return sum(len(n.encode()) + value_size(v) for n, v in values.items() if v is not None)


def _kb(size: int) -> int:
    return max(1, math.ceil(size / 1024))


def _rru(total_bytes: int, consistent: bool) -> float:
    units = max(1, math.ceil(total_bytes / 4096))
    return units if consistent else units / 2


def handoff_items(data_bytes: int, due: bool) -> dict[str, dict[str, Any]]:
    """The items one handoff writes (owner A -> owner B), built as the store builds them,
    with ``data_bytes`` of document data and the ids and times the benchmark's emits use."""
    tenant, doc, now = "bench-1a2b3c4d", "pg-1a2b3c-7", datetime(2026, 11, 30, tzinfo=UTC)
    stamp = k.stamp(now)
    data = orjson.dumps({"note": "x" * max(0, data_bytes - 11)} if data_bytes else {}).decode()
    due_at = k.stamp(now + timedelta(hours=1)) if due else None
    state = it.state(tenant, doc, 1, 12, "o07", "working", assigned_at=stamp, due_at=due_at,
                     created_at=stamp, updated_at=stamp, completed_at=None, data=data)  # fmt: skip
    event_id = str(uuid.UUID(int=7))
    event = it.event(tenant, doc, 1, 12, event_id=event_id, event_type="handoff", source="o03",
                     occurred_at=1_796_000_000_000_000, owner="o07", previous_owner="o03",
                     status="working", assigned_at=1_796_000_000_000_000,
                     due_at=1_796_003_600_000_000 if due else None,
                     data=orjson.loads(data))  # fmt: skip
    return {
        "state": state,
        "event": event,
        "receipt": it.receipt(tenant, event_id, b"\x00" * 32, doc, 1, 12, "o07", "working", stamp),
        "count": it.count(tenant, "o07", 11, -1234),
    }


@dataclass
class Model:
    data_bytes: int
    due: bool
    sizes: dict[str, int]
    write_units_table: int  # the transaction: state, event, receipt, two count shards
    write_units_indexes: int  # ByOwner (and ByOwnerDue) entries moved
    read_units: float  # the store's reads before the transaction
    uniform_ceiling_per_s: float  # at the default table quota
    hot_owner_ceiling_per_s: float  # the hot owner's index partition key
    count_item_ceiling_per_s: float  # one count item, unsharded
    count_shards_ceiling_per_s: float  # SHARDS count items
    owner_page_read_units: float
    detail_read_units: float
    counts_read_units: float
    counts_calls: int
    cost_per_million: dict[str, float] = field(default_factory=dict)
    storage_bytes_per_handoff: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def model(data_bytes: int = 0, *, due: bool = False, owners: int = 50, page: int = 50,
          versions: int = 5, prices: Prices = Prices()) -> Model:  # fmt: skip
    """One handoff into another owner, and the tracker's reads, on the AWS design."""
    found = handoff_items(data_bytes, due)
    sizes = {name: item_size(v) for name, v in found.items()}
    state, event, receipt, count = (sizes[n] for n in ("state", "event", "receipt", "count"))
    # TransactWriteItems: 2 write units per KB of each item written.
    table = 2 * (_kb(state) + _kb(event) + _kb(receipt) + 2 * _kb(count))
    # An index entry whose key changes is deleted and put again: 2 standard writes.
    indexes = 2 * _kb(state) * (2 if due else 1)
    # Before the transaction the store reads, strongly consistent: the credential,
    # the receipt (absent), the next owner's registration and the document's state.
    reads = 3 * _rru(200, True) + _rru(state, True)
    quota = 40_000.0
    # Every handoff in the hot mix moves an entry into or out of the hot owner's
    # ByOwner key: one partition key value, at most 1,000 write units/s. Its sort
    # key (assignedAt) only grows, so splitting the key's range for heat leaves
    # the newest writes on one partition.
    hot = 1000.0 / _kb(state)
    count_item = 1000.0 / (2 * _kb(count))
    per_million = {
        "writes": (table + indexes) * prices.write_per_million,
        "reads": reads * prices.read_per_million,
        # ~5 stream records per handoff (every item written), up to 1,000 per GetRecords.
        "stream reads": 5 * 1e6 / 1000 * prices.stream_reads_per_100k / 1e5,
    }
    # Kept per handoff: its event and its receipt (the state item is overwritten).
    kept = event + receipt
    per_million["storage, a month"] = kept * 1e6 / 1e9 * prices.gb_month
    per_million["total"] = sum(per_million.values())
    return Model(
        data_bytes=data_bytes, due=due, sizes=sizes, write_units_table=table,
        write_units_indexes=indexes, read_units=reads, uniform_ceiling_per_s=quota / table,
        hot_owner_ceiling_per_s=hot, count_item_ceiling_per_s=count_item,
        count_shards_ceiling_per_s=count_item * k.SHARDS,
        # An owner's page: one Query of the GSI, eventually consistent (GSIs offer nothing else).
        owner_page_read_units=_rru(page * state, False),
        # A document's detail: its state and its history, strongly consistent.
        detail_read_units=_rru(state, True) + _rru(versions * event, True),
        # Counts: every owner's shards, strongly consistent, 100 keys per BatchGetItem.
        counts_read_units=float(owners * k.SHARDS * _rru(count, True)),
        counts_calls=math.ceil(owners * k.SHARDS / 100),
        cost_per_million=per_million, storage_bytes_per_handoff=kept,
    )  # fmt: skip
