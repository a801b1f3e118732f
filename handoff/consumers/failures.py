"""Failure classes of a consumer [SQS retry → DLQ, with reasons].

Whether another attempt can help decides what happens next: transient
failures and unknown handler errors are retried with backoff until the
delivery count or the time budget runs out; malformed, denied and invalid
transitions go to quarantine at once, since the identical retry would fail
identically.
"""

from __future__ import annotations

import enum
import socket

from pydantic import ValidationError

from handoff.core.errors import (
    ContractError,
    EventEncodingError,
    InvalidRequest,
    MalformedEvent,
    NotPermitted,
    OutcomeUnknown,
    SenderMismatch,
    TransientConflict,
    Unauthenticated,
    Unavailable,
)


class Category(enum.StrEnum):
    TRANSIENT = "transient"
    MALFORMED = "malformed"
    DENIED = "denied"
    INVALID_TRANSITION = "invalid_transition"
    CONFLICTING_REUSE = "conflicting_reuse"
    UNEXPECTED_VERSION = "unexpected_version"
    HANDLER_ERROR = "handler_error"


class HeldBack(Exception):
    """An event the ordering check sets aside (conflicting reuse, a future version)."""

    def __init__(self, category: Category, message: str) -> None:
        super().__init__(message)
        self.category = category


_TRANSIENT = (TransientConflict, Unavailable, OutcomeUnknown, TimeoutError, socket.timeout)


def classify(exc: BaseException) -> tuple[Category, bool]:
    """The category of a failure and whether a retry may cure it."""
    if isinstance(exc, HeldBack):
        return exc.category, False
    if isinstance(exc, MalformedEvent | EventEncodingError | InvalidRequest | ValidationError):
        return Category.MALFORMED, False
    if isinstance(exc, NotPermitted | Unauthenticated | SenderMismatch):
        return Category.DENIED, False
    if isinstance(exc, ContractError):
        return Category.INVALID_TRANSITION, False
    if isinstance(exc, _TRANSIENT):
        return Category.TRANSIENT, True
    return Category.HANDLER_ERROR, True


def describe(exc: BaseException) -> str:
    text = str(exc).strip() or "(no message)"
    return f"{type(exc).__name__}: {text}"[:4000]
