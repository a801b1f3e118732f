"""Web UI sessions: an opaque id in an HttpOnly cookie, never the credential.

Sign-in checks the credential once and opens a session (migration 0014):
the browser keeps a random 256-bit id, the database keeps only its sha256
with the service, an absolute expiry and an idle timeout. Sign-out,
rotating, revoking or removing the service end it. Every page reads
through the session (``handoff.ui_reader_session``), so the credential,
which is also the service's database password, never sits in a browser.

Forgery: the cookie is SameSite=Strict and HttpOnly, and every form also
carries a token only this session can make, an HMAC keyed by the session
id over what the form does (``form_token``). Sign-in itself has no session
yet: its form carries a random value that must equal a cookie set with
the form (double submit), so another site cannot sign a browser in as a
service of its choosing. Operate forms are single-use: a form's nonce is
recorded when it is used (``use_once``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from psycopg_pool import AsyncConnectionPool

from handoff.core.db import translated
from handoff.core.errors import NotPermitted, Unauthenticated
from handoff.core.identity import Credential, Principal
from handoff.tracker import session_sql as q

COOKIE = "handoff_session"
SIGNIN_COOKIE = "handoff_signin"  # the sign-in form's double-submit value
_ID = 32  # bytes of randomness in a session id


@dataclass(frozen=True)
class Session:
    """The browser's session id (from its cookie); what the database knows is its hash."""

    id: str

    @property
    def id_hash(self) -> bytes:
        return hashlib.sha256(self.id.encode()).digest()

    def __repr__(self) -> str:  # never print the id by accident
        return "Session(***)"


def from_cookie(value: str | None) -> Session | None:
    """The session a cookie names (not yet checked), or None for no or a malformed one."""
    if not value or len(value) > 100 or not value.isascii():
        return None
    return Session(value)


def form_token(session: Session, purpose: str) -> str:
    """A token only this session can make, for one purpose (a form and its subject)."""
    return hmac.new(session.id.encode(), purpose.encode(), hashlib.sha256).hexdigest()


def check_token(session: Session, purpose: str, token: str) -> None:
    if not token or not hmac.compare_digest(form_token(session, purpose), token):
        raise NotPermitted("this form was not issued to you for this; reload the page")


def new_signin_value() -> str:
    return secrets.token_urlsafe(24)


def check_signin_value(cookie: str | None, field: str) -> None:
    """Sign-in's forgery check: the form's value equals the cookie set with the form."""
    if not cookie or not field or not hmac.compare_digest(cookie, field):
        raise NotPermitted("the sign-in form expired or came from another site; reload it")


class Sessions:
    """Opening, finding and ending sessions, on the API's pool."""

    def __init__(
        self, pool: AsyncConnectionPool[Any], *, lifetime: timedelta, idle: timedelta
    ) -> None:
        self._pool, self.lifetime, self.idle = pool, lifetime, idle

    async def open(self, credential: Credential) -> tuple[Session, str, str]:
        """A new session for an active credential: it, the tenant and the service.

        Unauthenticated for an unknown or revoked credential."""
        session = Session(secrets.token_urlsafe(_ID))
        params = {
            "role": credential.role,
            "secret_hash": credential.secret_hash,
            "id_hash": session.id_hash,
            "lifetime": self.lifetime,
            "idle": self.idle,
        }
        with translated(sent=False):
            async with self._pool.connection() as conn:
                row = await (await conn.execute(q.OPEN, params)).fetchone()
        if row is None:
            raise Unauthenticated("unknown or revoked service credential")
        return session, row[0], row[1]

    async def principal(self, session: Session) -> Principal:
        """Who the session acts as (for an emit in its name); Unauthenticated if it ended."""
        with translated(sent=False):
            async with self._pool.connection() as conn:
                row = await (await conn.execute(q.FIND, {"id_hash": session.id_hash})).fetchone()
        if row is None:
            raise Unauthenticated("your session ended; sign in again")
        return Principal(role=row[2], secret_hash=bytes(row[3]))

    async def use_once(self, session: Session, nonce: str) -> None:
        """Record a one-time form's use; NotPermitted if it was used already."""
        with translated(sent=False):
            async with self._pool.connection() as conn:
                cur = await conn.execute(q.USE_FORM, {"id_hash": session.id_hash, "nonce": nonce})
                used = await cur.fetchone()
        if used is None:
            raise NotPermitted("this form was used already; reload the page to act again")

    async def end(self, session: Session) -> None:
        with translated(sent=False):
            async with self._pool.connection() as conn:
                await conn.execute(q.END, {"id_hash": session.id_hash})

    async def purge(self) -> int:
        """Delete sessions past their expiry or idle timeout (the maintenance loop's)."""
        async with self._pool.connection() as conn:
            cur = await conn.execute(q.PURGE)
            return int(cur.rowcount)
