"""The W3C trace context as Handoff stores and passes it: a version-00 ``traceparent``.

The format only, and the current span's context in it, whoever set OpenTelemetry up
(the process's own tracing, telemetry/tracing.py, or an application's SDK around a
``HandoffClient`` call): the API is all this needs, so ``core`` stays below
``telemetry``.
"""

from __future__ import annotations

import re

from opentelemetry import trace
from opentelemetry.trace import Span

# A W3C traceparent of version 00, as the database's column default accepts it
# (migration 0025_trace).
TRACEPARENT = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


def valid(traceparent: str | None) -> str | None:
    """``traceparent`` when it is one this system passes on, else None."""
    if traceparent and TRACEPARENT.fullmatch(traceparent):
        return traceparent
    return None


def traceparent_of(span: Span) -> str | None:
    """The span's context as a ``traceparent``, when it is sampled (else nothing to pass)."""
    ctx = span.get_span_context()
    if not (ctx.is_valid and ctx.trace_flags.sampled):
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def caller_traceparent() -> str | None:
    """The current span's traceparent (None: no sampled span)."""
    return traceparent_of(trace.get_current_span())


def caller_headers() -> dict[str, str]:
    """``caller_traceparent`` as an HTTP header (empty: none)."""
    traceparent = caller_traceparent()
    return {"traceparent": traceparent} if traceparent else {}
