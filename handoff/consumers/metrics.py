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
    "unresolved (handed to a person), fenced (the lease was taken over), unrecorded (the "
    "answer could not be recorded: its lease runs out and a lookup records it)",
    ["consumer", "effect", "result"],
)
PROVIDER_SECONDS = Histogram(
    "handoff_effects_provider_seconds",
    "Duration of provider calls (submissions and lookups)",
    ["consumer", "effect", "call"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
# Measured by the executors every MEASURE_S (effect_pending(), handoff/sql/metrics.sql).
EFFECTS_OPEN = Gauge(
    "handoff_effects_open",
    "Effect intents not yet settled, by state (intended, claimed, submitted, unknown)",
    ["consumer", "state"],
)
EFFECTS_UNRESOLVED = Gauge(
    "handoff_effects_unresolved",
    "Effect intents waiting for a person (handoff effects list --unresolved)",
    ["consumer"],
)
EFFECTS_OLDEST_OPEN = Gauge(
    "handoff_effects_oldest_open_seconds",
    "Age of the oldest effect intent not yet settled, by state (and unresolved)",
    ["consumer", "state"],
)

# Every result the executors count (executor.py, _count).
EFFECT_RESULTS = (
    "succeeded", "failed", "unknown", "not_reached", "reconciled", "absent", "lookup_failed",
    "unresolved", "fenced", "unrecorded",
)  # fmt: skip


def prepare(consumer: str, outcomes: list[str], categories: list[str]) -> None:
    """A consumer's series at zero before its first event.

    Why: a labelled series exists only once something is counted in it, and a
    rate over a series that is absent is no rate at all (an alert on retries
    never fires for a consumer that has not retried yet; the dashboard's
    panels stay empty). Prometheus's own advice: initialise the label values
    you know.
    """
    for outcome in outcomes:
        EVENTS.labels(consumer, outcome)
    for category in categories:
        RETRIES.labels(consumer, category)
    UNCLAIMED.labels(consumer)


def prepare_effects(consumer: str, effects: list[str]) -> None:
    """The executors' series at zero (see ``prepare``)."""
    for effect in effects:
        for result in EFFECT_RESULTS:
            EFFECTS.labels(consumer, effect, result)
