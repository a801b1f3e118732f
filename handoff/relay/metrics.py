"""Prometheus metrics of the relay."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

BACKLOG = Gauge("handoff_relay_backlog_rows", "Outbox rows not yet published (all relays)")
PARKED = Gauge("handoff_relay_parked_rows", "Outbox rows parked because they cannot be encoded")
OLDEST_AGE = Gauge(
    "handoff_relay_oldest_unpublished_age_seconds", "Age of the oldest unpublished outbox row"
)
PUBLISHED = Counter("handoff_relay_published_total", "Events acknowledged by Kafka and marked")
FAILURES = Counter("handoff_relay_failures_total", "Relay failures by kind", ["kind"])
SLOTS_OWNED = Gauge("handoff_relay_slots_owned", "Outbox slots this relay publishes")
PURGED = Counter("handoff_relay_purged_total", "Published outbox rows deleted after retention")

# Every kind the relay counts, at zero from the start (see consumers/metrics.prepare).
FAILURE_KINDS = ("setup", "database", "encode", "delivery")
for _kind in FAILURE_KINDS:
    FAILURES.labels(_kind)
