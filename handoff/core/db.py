"""Database access: connection settings and psycopg errors translated at the edge.

Messages of the translated errors are written for the caller. The database's
own text (DETAIL, CONTEXT, "unnamed portal parameter $13") stays on the
psycopg error, which is the ``__cause__`` of the translated one: the HTTP
layer logs it with the request id and never sends it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import errors as pg

from handoff.core.errors import (
    DatabaseUnavailable,
    EventNotClaimed,
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

# Raised by Handoff's own SQL functions with messages written for callers:
# 22H00 the naming rule or the instant range (0003), 22023 a missing field (0001),
# 22H01 an effect's request changed, 22H02 a workflow run's input changed (0005).
OWN_MESSAGES = frozenset({"22H00", "22023", "22H01", "22H02"})
# consumer_claim's refusal (0011).
NOT_CLAIMED = "P0H00"


def _primary(exc: psycopg.Error) -> str:
    text = exc.diag.message_primary or str(exc).strip().split("\n", 1)[0]
    return text.strip() or type(exc).__name__


def raise_if_lost(conn: psycopg.Connection[Any], exc: BaseException) -> None:
    """A broken session is the database's failure, not the work's: raise it as such,
    so the caller reconnects and takes the work again."""
    if conn.broken or conn.closed:
        raise DatabaseUnavailable(f"the database session broke: {exc}") from exc


def login_problem(exc: BaseException) -> DatabaseUnavailable | None:
    """What to tell a person when connecting failed (psycopg's error, or SQLAlchemy's
    around it, as alembic raises it); None when ``exc`` is not a failed connection.

    For the CLI: a wrong password or a stopped server is a setting to fix, said in
    one line, not a traceback."""
    found: BaseException | None = exc
    while found is not None and not isinstance(found, psycopg.OperationalError):
        found = getattr(found, "orig", None) or found.__cause__
    if found is None:
        return None
    text = str(found)
    target = "PostgreSQL"
    where = re.search(r'server at "([^"]+)", port (\d+)', text)
    if where:
        target = f"PostgreSQL at {where.group(1)}:{where.group(2)}"
    user = re.search(r'for user "([^"]+)"', text)
    if "password authentication failed" in text:
        who = f" as {user.group(1)!r}" if user else ""
        why = f"{target} refused the login{who}: wrong password"
    elif "does not exist" in text:
        why = f"{target} refused the login: {_primary(found)}"
    elif "Connection refused" in text or "could not connect" in text or "timeout" in text:
        why = f"{target} is not reachable (is it running? `handoff stack up` starts the local one)"
    else:
        why = f"could not connect to {target}: {_primary(found)}"
    return DatabaseUnavailable(
        f'{why}. Check HANDOFF_DATABASE_URL; for the local stack: eval "$(handoff stack env)"'
    )


@contextmanager
def translated(*, sent: bool = True) -> Iterator[None]:
    """Turn psycopg errors into Handoff's. ``sent``: a lost connection means unknown outcome."""
    try:
        yield
    except RETRYABLE as exc:
        raise TransientConflict(
            f"{type(exc).__name__}: the transaction met a concurrent one; retry it as is"
        ) from exc
    except psycopg.DataError as exc:  # SQLSTATE class 22: a value the request carried
        if exc.sqlstate in OWN_MESSAGES:
            raise InvalidRequest(_primary(exc)) from exc
        raise InvalidRequest(
            "a value in the request is out of range or malformed for the database"
        ) from exc
    except pg.InvalidAuthorizationSpecification as exc:  # our own RAISE ... 28000
        raise Unauthenticated(_primary(exc)) from exc
    except pg.InsufficientPrivilege as exc:
        raise NotPermitted(
            "the database refused the operation to this role (service roles may only emit)"
        ) from exc
    except psycopg.OperationalError as exc:
        if "password authentication failed" in str(exc):
            raise Unauthenticated("the database refused the service's login") from exc
        if sent:
            raise OutcomeUnknown(
                f"lost the database connection during the request ({_primary(exc)}); "
                "retry it unchanged, with the same event id"
            ) from exc
        raise DatabaseUnavailable(f"the database is unreachable: {_primary(exc)}") from exc
    except psycopg.Error as exc:
        if exc.sqlstate == NOT_CLAIMED:
            raise EventNotClaimed(_primary(exc)) from exc
        raise
