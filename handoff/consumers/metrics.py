"""Prometheus metrics of a consumer process (``handoff consume --metrics-port``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

EVENTS = Counter(
    "handoff_consumer_events_total",
    "Messages by outcome: applied, duplicate (suppressed), stale, filtered (no decode), "
    "unmatched (guarded, a handler's content filter said no), parked, gap, held, quarantined",
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
UNCLAIMED = Counter(
    "handoff_consumer_unclaimed_total",
    "One-event units whose claim (or handler) failed before the verdict was read, "
    "taken again verdict first: duplicates, parked or failing events",
    ["consumer"],
)
RETRIES = Counter(
    "handoff_consumer_retries_total",
    "Failed attempts retried, by category",
    ["consumer", "category"],
)
EFFECTS = Counter(
    "handoff_effects_total",
    "Effect attempts and lookups by result: succeeded, failed, unknown, not_reached, "
    "reconciled (a lookup found it), absent (a lookup found nothing), lookup_failed, "
    "unresolved (handed to a person), fenced (the lease was taken over)",
    ["consumer", "effect", "result"],
)
PROVIDER_SECONDS = Histogram(
    "handoff_effects_provider_seconds",
    "Duration of provider calls (submissions and lookups)",
    ["consumer", "effect", "call"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
