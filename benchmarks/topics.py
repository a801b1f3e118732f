"""The topics a benchmark makes (six partitions each), and their deletion when it is done."""

from __future__ import annotations

from collections.abc import Iterable

from handoff.core import kafka
from handoff.core.settings import HandoffSettings

PARTITIONS = 6
# The broker stamps each record with its append time: the end of a latency.
LOG_APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}


def make(settings: HandoffSettings, topic: str, log_append_time: bool = False) -> None:
    config = LOG_APPEND_TIME if log_append_time else None
    kafka.ensure_topics(settings.kafka_bootstrap, [topic], PARTITIONS, config)


def delete(settings: HandoffSettings, topics: Iterable[str]) -> None:
    kafka.delete_topics(settings.kafka_bootstrap, topics)
