"""The event side of the twin: the table's stream, published to Kafka as the relay does.

Every accepted change puts an EVENT item in the same transaction as the
state (the AWS design's outbox, carried by DynamoDB Streams with NEW_IMAGE).
This reader takes the stream's INSERTs of EVENT items, encodes their
envelope with the registry's schema exactly as the relay encodes an outbox
payload, and produces them with the relay's key (tenant/document) and
headers, so consumers and the sample pipeline run unchanged on either store.

Order: one document's items share a partition key, so they are in one
stream shard in commit order; the key sends them to one Kafka partition,
and the idempotent producer keeps their order. Delivery: the position in
each shard (its last sequence number) is saved in the table only after the
producer's flush confirmed everything before it, so a reader killed between
the two publishes those records again after its restart (at least once; the
consumers' guards make a repeat a no-op), and never skips one. The positions
live in a table of their own (``<table>-positions``, as the Kinesis Client
Library keeps its leases apart): kept in the event table, every save would
itself be a stream record, and the reader would chase its own writes.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

import orjson

from handoff.core.errors import ConfigurationError, Unavailable
from handoff.core.events import encode, to_record
from handoff.core.kafka import ensure_topics, producer
from handoff.core.settings import HandoffSettings
from handoff.dynamo.items import plain
from handoff.relay.kafka_io import headers, register_schemas

log = logging.getLogger("handoff.dynamo")


class StreamReader:
    def __init__(
        self,
        settings: HandoffSettings,
        dynamodb: Any,
        streams: Any,
        *,
        table: str,
        topic: str,
        partitions: int = 6,
    ) -> None:
        self.db, self.streams, self.table, self.topic = dynamodb, streams, table, topic
        ensure_topics(settings.kafka_bootstrap, [topic], partitions)
        self.schema, ids = register_schemas(settings.schema_registry_url, [topic])
        self.schema_id = ids[topic]
        self.producer = producer(settings.kafka_bootstrap, linger_ms=5, delivery_timeout_s=30)
        self.positions = f"{table}-positions"
        self._checkpoint_pk = f"READER#{topic}"
        with contextlib.suppress(self.db.exceptions.ResourceInUseException):
            self.db.create_table(
                TableName=self.positions, BillingMode="PAY_PER_REQUEST",
                KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"},
                           {"AttributeName": "SK", "KeyType": "RANGE"}],
                AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"},
                                      {"AttributeName": "SK", "AttributeType": "S"}],
            )  # fmt: skip
        self.db.get_waiter("table_exists").wait(TableName=self.positions)

    def _position(self, shard: str) -> str | None:
        found = self.db.get_item(
            TableName=self.positions, ConsistentRead=True,
            Key={"PK": {"S": self._checkpoint_pk}, "SK": {"S": f"SHARD#{shard}"}},
        ).get("Item")  # fmt: skip
        return found["sequence"]["S"] if found else None

    def _save(self, shard: str, sequence: str) -> None:
        self.db.put_item(TableName=self.positions, Item={
            "PK": {"S": self._checkpoint_pk}, "SK": {"S": f"SHARD#{shard}"},
            "sequence": {"S": sequence}})  # fmt: skip

    def run_once(self, *, after_flush: Callable[[], None] = lambda: None) -> int:
        """Publish what the stream holds beyond the saved positions; how many events."""
        try:
            arn = self.db.describe_table(TableName=self.table)["Table"]["LatestStreamArn"]
        except self.db.exceptions.ResourceNotFoundException as exc:
            raise ConfigurationError(
                f"DynamoDB table {self.table} does not exist (or has no stream); "
                "create it with the AWS design's definition (handoff.dynamo.schema)"
            ) from exc
        shards = self.streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
        # Parents before children: a split shard's records come before its children's.
        order = {s["ShardId"]: s.get("ParentShardId") for s in shards}
        published = 0
        for shard in sorted(order, key=lambda s: _depth(order, s)):
            published += self._shard(arn, shard, after_flush)
        return published

    def _shard(self, arn: str, shard: str, after_flush: Callable[[], None]) -> int:
        saved = self._position(shard)
        start = ({"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": saved}
                 if saved else {"ShardIteratorType": "TRIM_HORIZON"})  # fmt: skip
        iterator = self.streams.get_shard_iterator(StreamArn=arn, ShardId=shard, **start)[
            "ShardIterator"
        ]
        published = 0
        while iterator:
            answer = self.streams.get_records(ShardIterator=iterator, Limit=1000)
            records = answer["Records"]
            if not records:
                break
            last = None
            for record in records:
                last = record["dynamodb"]["SequenceNumber"]
                if record["eventName"] != "INSERT":
                    continue
                image = plain(record["dynamodb"]["NewImage"])
                if not str(image.get("SK", "")).startswith("EVENT#"):
                    continue  # state, receipts, counts: not events
                self._produce(orjson.loads(image["payload"]))
                published += 1
            if self.producer.flush(60) != 0:
                raise Unavailable("Kafka did not confirm the events in time; nothing was saved")
            after_flush()  # a test's crash point: published, position not yet saved
            if last is not None:
                self._save(shard, last)
            iterator = answer.get("NextShardIterator")
        return published

    def _produce(self, payload: dict[str, Any]) -> None:
        value = encode(self.schema, self.schema_id, to_record(payload, self.schema.version))
        key = f"{payload['tenantId']}/{payload['documentId']}".encode()
        self.producer.produce(self.topic, value=value, key=key, headers=headers(payload))


def _depth(parents: dict[str, str | None], shard: str) -> int:
    depth, seen = 0, set()
    while parents.get(shard) and shard not in seen:
        seen.add(shard)
        shard = parents[shard]  # type: ignore[assignment]
        depth += 1
    return depth
