"""Database access: connection settings and psycopg errors translated at the edge."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import errors as pg

from handoff.core.errors import (
    DatabaseUnavailable,
    InvalidRequest,
    NotPermitted,
    OutcomeUnknown,
    TransientConflict,
    Unauthenticated,
)

# Liveness check of a connection.
PING = "SELECT 1"

# SQLSTATEs a retry of the identical request can cure.
RETRYABLE = (pg.SerializationFailure, pg.DeadlockDetected, pg.LockNotAvailable)


@contextmanager
def translated(*, sent: bool = True) -> Iterator[None]:
    """Turn psycopg errors into Handoff's. ``sent``: a lost connection means unknown outcome."""
    try:
        yield
    except RETRYABLE as exc:
        raise TransientConflict(f"{type(exc).__name__}: {exc}") from exc
    except psycopg.DataError as exc:  # SQLSTATE class 22: a value the request carried
        raise InvalidRequest(str(exc).strip()) from exc
    except pg.InvalidAuthorizationSpecification as exc:
        raise Unauthenticated(str(exc).strip()) from exc
    except pg.InsufficientPrivilege as exc:
        raise NotPermitted(str(exc).strip()) from exc
    except psycopg.OperationalError as exc:
        if "password authentication failed" in str(exc):
            raise Unauthenticated("the database refused the service's login") from exc
        if sent:
            raise OutcomeUnknown(
                f"lost the database connection during the request ({exc}); "
                "retry it unchanged, with the same event id"
            ) from exc
        raise DatabaseUnavailable(str(exc).strip()) from exc
