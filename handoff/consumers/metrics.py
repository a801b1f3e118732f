"""Prometheus metrics of a consumer process (``handoff consume --metrics-port``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

EVENTS = Counter(
    "handoff_consumer_events_total",
    "Messages by outcome: applied, duplicate (suppressed), stale, filtered (no decode), "
    "parked, gap, held, quarantined",
    ["consumer", "outcome"],
)
LAG = Gauge(
    "handoff_consumer_lag_messages",
    "Messages behind the partition's end",
    ["consumer", "topic", "partition"],
)
RATE = Gauge("handoff_consumer_processed_per_second", "Messages processed per second", ["consumer"])
QUARANTINED = Gauge(
    "handoff_consumer_quarantined", "Quarantine entries open or waiting for a retry", ["consumer"]
)
PARKED = Gauge("handoff_consumer_parked", "Events parked in PostgreSQL", ["consumer"])
OLDEST_PENDING = Gauge(
    "handoff_consumer_oldest_pending_seconds",
    "Age of the oldest quarantined or parked event",
    ["consumer"],
)
UNIT_SECONDS = Histogram(
    "handoff_consumer_unit_seconds",
    "Duration of one unit of work (guard, handlers, commit)",
    ["consumer"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)
RETRIES = Counter(
    "handoff_consumer_retries_total",
    "Failed attempts retried, by category",
    ["consumer", "category"],
)
