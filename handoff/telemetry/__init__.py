"""What a Handoff process tells the tools operators already run: logs, traces.

``settings`` (the ``HANDOFF_LOG_FORMAT`` and ``HANDOFF_OTEL_*`` fields),
``logs`` (one format for every process, JSON on request, with the trace and
the work in hand on every line) and ``tracing`` (OpenTelemetry: one trace
from an emitting request through the outbox, Kafka, consumers and effects).
"""
