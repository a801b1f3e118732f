"""One log format for every ``handoff`` process; JSON lines on request.

``HANDOFF_LOG_FORMAT=json`` writes one JSON object a line: the time, level,
logger and message, and the work in hand (``tenant``, ``documentId``,
``eventId``, …) from two places: what the code around the record bound with
``bound(...)`` (the consumer binds each event it handles, the relay each
batch, the API each request's tenant) and the record's own ``extra=``.

Why a context variable and not a LoggerAdapter: the fields belong to the
unit of work, not to a logger, and the records that need them are written
deep below it (a retry in core/retry.py, a quarantine in consumers/), by
loggers that know nothing of the event.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

import orjson

from handoff.telemetry import tracing

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

# Every attribute a LogRecord has by itself; the rest came with ``extra=``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}

_NOTHING: Mapping[str, Any] = MappingProxyType({})
_bound: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "handoff_log_fields", default=_NOTHING
)


@contextlib.contextmanager
def bound(**fields: Any) -> Iterator[None]:
    """Within the block, every record of this thread or task carries ``fields``
    (None values are left out)."""
    token = _bound.set({**_bound.get(), **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _bound.reset(token)


def current_fields() -> Mapping[str, Any]:
    return _bound.get()


class JsonFormatter(logging.Formatter):
    """A record as one JSON object (orjson: a log line must not cost a unit its speed)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="microseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(_bound.get())
        if (ids := tracing.current_ids()) is not None:
            line["traceId"], line["spanId"] = ids
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(line, default=str).decode()


def formatter(log_format: str) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)


def configure(level: int = logging.INFO, log_format: str | None = None) -> None:
    """The root logger's handler (standard error) in the chosen format.

    ``log_format`` None reads ``HANDOFF_LOG_FORMAT``. As ``logging.basicConfig``
    does, a root logger that has a handler of someone else's (a test runner's,
    an embedding application's) is left alone; this one's own handler is
    replaced, so a process that configures twice still writes each record once.
    """
    root = logging.getLogger()
    if any(not getattr(h, "_handoff", False) for h in root.handlers):
        return
    if log_format is None:
        from handoff.telemetry.settings import TelemetrySettings

        log_format = TelemetrySettings().log_format
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(log_format))
    handler._handoff = True  # type: ignore[attr-defined]
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
