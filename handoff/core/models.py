"""Requests and receipts of the emit contract, validated at every entry point.

JSON field names are camelCase (the HTTP API); Python names are snake_case.
The database checks the essentials again for callers that use plain SQL.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, NoReturn, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
)
from pydantic.alias_generators import to_camel

from handoff.core.errors import ContractError, InvalidRequest, contract_error
from handoff.core.names import (
    ID_JSON_PATTERN,
    ID_MAX,
    LABEL_JSON_PATTERN,
    LABEL_MAX,
    SERVICE_NAME_JSON_PATTERN,
    id_problem,
    label_problem,
    service_name_problem,
)

MAX_DATA_BYTES = 64 * 1024
MAX_DATA_DEPTH = 32

# Every accepted instant must stay readable by every reader, forever: the
# API's JSON, PostgreSQL, JavaScript's Date, the Avro ``timestamp-micros``
# field and the Python datetimes that consumers decode it to (years 1-9999).
# A day's margin at each end keeps it so in any time zone a reader renders.
EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
LATEST = datetime(9999, 12, 30, 23, 59, 59, 999999, tzinfo=UTC)


def _checked(problem: Callable[[str], str | None]) -> Callable[[str], str]:
    def check(value: str) -> str:
        found = problem(value)
        if found is not None:
            raise ValueError(found)
        return value

    return check


# RFC 3339's date-time (section 5.6), offset required: "2026-12-01T09:00:00Z",
# "2026-12-01T10:00:00.5+01:00". Checked before any parsing, because pydantic's
# lax datetime would read "-1", "0.5" or "1000000000000" as Unix time.
RFC3339 = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)
_RFC3339 = re.compile(RFC3339)
INSTANT_HINT = "must be an RFC 3339 date-time with a time zone offset, e.g. 2026-12-01T09:00:00Z"


def parse_instant(value: Any) -> Any:
    """A datetime from an RFC 3339 string (or a datetime from Python callers), else ValueError.

    Strict JSON types: never a number, never a string read as seconds since the epoch.
    """
    if value is None or isinstance(value, datetime):
        return value
    if not isinstance(value, str) or _RFC3339.match(value) is None:
        raise ValueError(INSTANT_HINT)
    text = value.upper().replace(" ", "T").replace("Z", "+00:00")
    head, dot, rest = text.partition(".")
    if dot:  # Python reads at most microseconds: keep six digits, drop the rest
        digits = rest[: len(rest) - 6]
        text = f"{head}.{digits[:6]}{rest[len(digits) :]}"
    try:
        return datetime.fromisoformat(text)
    except ValueError as exc:  # e.g. month 13, second 61
        raise ValueError(f"{INSTANT_HINT} ({exc})") from None


def _aware(value: datetime | None) -> datetime | None:
    if value is None:
        return value
    if value.utcoffset() is None:
        raise ValueError("must include a time zone, e.g. 2026-12-01T09:00:00Z")
    try:
        in_range = EARLIEST <= value <= LATEST
    except OverflowError:  # an offset that pushes it past year 1 or 9999
        in_range = False
    if not in_range:
        raise ValueError(f"must be between {EARLIEST.isoformat()} and {LATEST.isoformat()}")
    return value


def data_problem(value: Any, depth: int = 0) -> str | None:
    """Why a ``data`` value (or a filter on it) could not be stored and read back
    everywhere, or None. Depth first: JSON nested deeper than this cannot be
    serialised again by every reader (``json.dumps`` recurses)."""
    if depth > MAX_DATA_DEPTH:
        return f"must not nest deeper than {MAX_DATA_DEPTH} levels"
    if isinstance(value, float) and not math.isfinite(value):
        return "numbers must be finite (no NaN or Infinity)"
    if isinstance(value, str):
        if "\x00" in value:
            return "strings must not contain NUL (\\u0000)"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "strings must be valid Unicode (no unpaired surrogates)"
    elif isinstance(value, dict):
        for key, item in value.items():
            found = data_problem(key, depth) or data_problem(item, depth + 1)
            if found is not None:
                return found
    elif isinstance(value, list):
        for item in value:
            found = data_problem(item, depth + 1)
            if found is not None:
                return found
    return None


def _small_object(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is None:
        return value
    problem = data_problem(value)
    if problem is not None:
        raise ValueError(problem)
    if len(json.dumps(value, separators=(",", ":"))) > MAX_DATA_BYTES:
        raise ValueError(f"must serialise to at most {MAX_DATA_BYTES} bytes of JSON")
    return value


# The naming rule (core/names.py) in the OpenAPI document: a pattern and lengths, and
# a named format for what a pattern cannot say (NFC, code points beyond the BMP).
ServiceName = Annotated[
    str,
    Strict(),
    AfterValidator(_checked(service_name_problem)),
    Field(
        json_schema_extra={
            "pattern": SERVICE_NAME_JSON_PATTERN,
            "minLength": 1,
            "maxLength": 63,
            "format": "handoff-name",
        }
    ),
]
Identifier = Annotated[
    str,
    Strict(),
    AfterValidator(_checked(id_problem)),
    Field(
        json_schema_extra={
            "pattern": ID_JSON_PATTERN, "minLength": 1, "maxLength": ID_MAX,
            "format": "handoff-id",
            "description": "1-200 characters in Unicode NFC, without whitespace, control, "
            "format, private-use or non-characters and without '/'; not '.' or '..'",
        }
    ),
]  # fmt: skip
Status = Annotated[
    str,
    Strict(),
    AfterValidator(_checked(label_problem)),
    Field(
        json_schema_extra={
            "pattern": LABEL_JSON_PATTERN, "minLength": 1, "maxLength": LABEL_MAX,
            "format": "handoff-label",
            "description": "1-64 characters in Unicode NFC, as an id but spaces inside "
            "and '/' allowed",
        }
    ),
]  # fmt: skip
EventType = Identifier
_INSTANT_SCHEMA = Field(
    json_schema_extra={
        "pattern": RFC3339,
        "description": "RFC 3339 with a time zone offset, from "
        f"{EARLIEST.isoformat()} to {LATEST.isoformat()}",
    }
)
Deadline = Annotated[
    datetime | None, BeforeValidator(parse_instant), AfterValidator(_aware), _INSTANT_SCHEMA
]
# A time in a query (since, until, assignedSince, assignedUntil): the same strict form.
Instant = Annotated[
    datetime, BeforeValidator(parse_instant), AfterValidator(_aware), _INSTANT_SCHEMA
]
# Its schema in the OpenAPI document is written by hand (tracker/openapi.py, by this
# mark): a JSON object whose strings have no NUL, which pydantic cannot derive.
Data = Annotated[
    dict[str, Any] | None,
    AfterValidator(_small_object),
    Field(json_schema_extra={"x-handoff-data": True}),
]
# Versions and runs are PostgreSQL integers; strict: "1", true and 2025.0 are not 1.
Version = Annotated[
    int,
    Strict(),
    Field(
        ge=1,
        le=2**31 - 1,
        description="an integer from 1 to 2147483647, written without a fraction or exponent "
        '(2025.0 and "2025" are refused)',
    ),
]


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class CreateRequest(_Model):
    """Initial assignment of a document to its first owner."""

    event_id: Identifier
    document_id: Identifier
    owner: ServiceName
    status: Status
    event_type: EventType = "created"
    due_at: Deadline = None
    data: Data = None
    correlation_id: Identifier | None = None
    causation_id: Identifier | None = None


class StartRunRequest(_Model):
    """A new run of a finished document (deliberate reprocessing); versions restart at 1."""

    event_id: Identifier
    owner: ServiceName
    status: Status
    event_type: EventType = "run-started"
    due_at: Deadline = None
    data: Data = None
    correlation_id: Identifier | None = None
    causation_id: Identifier | None = None


class HandoffRequest(_Model):
    """Handoff (next owner differs), progress (same owner) or completion (no next owner)."""

    event_id: Identifier
    event_type: EventType
    document_id: Identifier
    sender: ServiceName | None = None
    next_owner: ServiceName | None
    status: Status
    expected_version: Version
    run_id: Version | None = None
    due_at: Deadline = None
    data: Data = None
    correlation_id: Identifier | None = None
    causation_id: Identifier | None = None


class Receipt(_Model):
    """What an accepted change answers; an identical retry answers the same."""

    event_id: str
    document_id: str
    run_id: int
    version: int
    owner: str | None
    status: str
    accepted_at: datetime
    replayed: bool = Field(default=False, exclude=True)
    """True when this is the stored answer to an earlier identical request."""


class Rejection(_Model):
    """What a refused change answers inside a transaction (only ``HandoffClient`` raises).

    The rejection row is recorded in the caller's unit and commits with it.
    """

    code: str
    message: str
    current_version: int | None = None
    current_owner: str | None = None

    def error(self) -> ContractError:
        """The typed error of ``handoff.core.errors`` this rejection names."""
        return contract_error(self.model_dump(by_alias=True))

    def raise_(self) -> NoReturn:
        raise self.error()


M = TypeVar("M", CreateRequest, HandoffRequest, StartRunRequest)


def validated(model: type[M], **fields: Any) -> M:
    """Build a request model; pydantic's errors become ``InvalidRequest``."""
    try:
        return model(**fields)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise InvalidRequest(problems) from exc
