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
from typing import Any, LiteralString

import orjson
import psycopg
from psycopg import errors as pg

from handoff.core.errors import (
    REFUSED_UNAWAITED,
    DatabaseUnavailable,
    HandoffError,
    InvalidRequest,
    LoginRefused,
    NotPermitted,
    OutcomeUnknown,
    TransientConflict,
    Unauthenticated,
    contract_error,
    lookup,
)

# Liveness check of a connection.
PING = "SELECT 1"

# Whether the database is a Citus coordinator: where the relay marks rows,
# retention deletes per family in one statement, and outbox ids are per node.
HAS_CITUS = "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')"

# SQLSTATEs a retry of the identical request can cure.
RETRYABLE = (pg.SerializationFailure, pg.DeadlockDetected, pg.LockNotAvailable)

# Citus, while a tenant's shard moves: the coordinator delegated a call to the
# worker that held the shard, the move committed before the call ran there, so
# the call's own statements would have become distributed queries, and Citus
# refused them with this text (SQLSTATE XX000, an internal error; no code of its
# own). The transaction rolled back; asked again, the coordinator routes the call
# to the shard's new worker. This text only: other internal errors are not retried.
SHARD_MOVED = "cannot execute a distributed query from a query on a shard"


def by_tenant(
    plain: LiteralString, named: LiteralString, params: dict[str, Any], tenant: str | None
) -> tuple[LiteralString, dict[str, Any]]:
    """The statement that names the caller's ``tenant`` (handoff/sql/by_tenant.sql) with its
    parameters when the tenant is known, else ``plain``: on Citus the named one is handed
    whole to the tenant's worker."""
    if tenant is None:
        return plain, params
    return named, {**params, "tenant": tenant}


def shard_moved(exc: psycopg.Error) -> bool:
    """Whether Citus refused a delegated call because the tenant's shard moved away."""
    return isinstance(exc, pg.InternalError_) and _primary(exc).startswith(SHARD_MOVED)


def _primary(exc: psycopg.Error) -> str:
    text = exc.diag.message_primary or str(exc).strip().split("\n", 1)[0]
    return text.strip() or type(exc).__name__


def refused_login(exc: BaseException) -> bool:
    """Whether connecting failed because the server refused the credentials: libpq
    gives a connection failure no SQLSTATE, so its text is all there is (one place)."""
    return "password authentication failed" in str(exc)


def on_citus(conn: psycopg.Connection[Any]) -> bool:
    """Whether ``conn``'s database has Citus (asked anew: a session may outlive a change)."""
    return conn.execute(HAS_CITUS).fetchone() == (True,)


def connect(conninfo: str, **options: Any) -> psycopg.Connection[Any]:
    """``psycopg.connect``, its failures translated: LoginRefused (fix the settings)
    or DatabaseUnavailable (try again later)."""
    try:
        return psycopg.connect(conninfo, **options)
    except psycopg.OperationalError as exc:
        problem = login_problem(exc)
        assert problem is not None
        raise problem from exc


def raise_if_lost(conn: psycopg.Connection[Any], exc: BaseException) -> None:
    """A broken session is the database's failure, not the work's: raise it as such,
    so the caller reconnects and takes the work again."""
    if conn.broken or conn.closed:
        raise DatabaseUnavailable(f"the database session broke: {exc}") from exc


def login_problem(exc: BaseException) -> DatabaseUnavailable | LoginRefused | None:
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
    fix = 'Check HANDOFF_DATABASE_URL; for the local stack: eval "$(handoff stack env)"'
    if refused_login(found):
        who = f" as {user.group(1)!r}" if user else ""
        return LoginRefused(f"{target} refused the login{who}: wrong password. {fix}")
    if "does not exist" in text:
        return LoginRefused(f"{target} refused the login: {_primary(found)}. {fix}")
    if "Connection refused" in text or "could not connect" in text or "timeout" in text:
        why = f"{target} is not reachable (is it running? `handoff stack up` starts the local one)"
    else:
        why = f"could not connect to {target}: {_primary(found)}"
    return DatabaseUnavailable(f"{why}. {fix}")


@contextmanager
def translated(*, sent: bool = True) -> Iterator[None]:
    """Turn psycopg errors into Handoff's. ``sent``: a lost connection means unknown outcome."""
    try:
        yield
    except psycopg.Error as exc:
        error = translation(exc, sent=sent)
        if error is exc:
            raise  # the caller's own statement failed (a handler's table): its own error
        raise error from exc


def translation(exc: psycopg.Error, *, sent: bool = True) -> Exception:
    """Handoff's error for ``exc`` (its cause), or ``exc`` itself when it is the caller's
    own statement's. What ``translated`` raises; as a value, for an error read from a
    result rather than raised by a call (a queued unit's, core/unit_queue.py)."""
    error: Exception | None
    if isinstance(exc, RETRYABLE):
        error = TransientConflict(
            f"{type(exc).__name__}: the transaction met a concurrent one; retry it as is"
        )
    elif shard_moved(exc):
        error = TransientConflict(
            "the tenant's shard moved to another database node during the call; retry it as is"
        )
    elif exc.sqlstate == REFUSED_UNAWAITED:  # a refused emit that rode with the unit
        error = contract_error(orjson.loads(_primary(exc)))
    else:
        # Handoff's own SQL functions: an error class of core/errors.py declares the
        # SQLSTATE, and the message was written for the caller.
        own = lookup(exc.sqlstate)
        error = own(_primary(exc)) if own is not None else _driver_error(exc, sent=sent)
    if error is None:
        return exc
    error.__cause__ = exc
    return error


def _driver_error(exc: psycopg.Error, *, sent: bool) -> HandoffError | None:
    """PostgreSQL's and the driver's own errors in Handoff's terms, where there are some."""
    if isinstance(exc, psycopg.DataError):  # SQLSTATE class 22: a value the request carried
        return InvalidRequest(
            "a value in the request is out of range or malformed for the database"
        )
    if isinstance(exc, pg.InsufficientPrivilege):
        return NotPermitted(
            "the database refused the operation to this role (service roles may only emit)"
        )
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        # InterfaceError: a connection psycopg already knows is closed.
        if refused_login(exc):
            return Unauthenticated("the database refused the service's login")
        if sent:
            return OutcomeUnknown(
                f"lost the database connection during the request ({_primary(exc)}); "
                "retry it unchanged, with the same event id"
            )
        return DatabaseUnavailable(f"the database is unreachable: {_primary(exc)}")
    return None
