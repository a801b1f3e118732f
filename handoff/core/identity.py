"""Service credentials: ``<db_role>.<secret>``, one string for both modes.

Over HTTP it is the bearer token; the server keeps only sha256(secret).
In direct mode the service logs in to PostgreSQL as ``db_role`` with the
secret as its password, and the database derives the sender from that login.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from typing import Protocol

from handoff.core.errors import Unauthenticated

ROLE_PREFIX = "hsvc_"


class Caller(Protocol):
    """Who a call acts as, as the database checks it: the role and sha256 of the secret."""

    @property
    def role(self) -> str: ...

    @property
    def secret_hash(self) -> bytes: ...


@dataclass(frozen=True)
class Principal:
    """A caller without its secret: what a web UI session acts as (tracker/sessions.py)."""

    role: str
    secret_hash: bytes

    def __repr__(self) -> str:
        return f"Principal(role={self.role!r}, secret_hash=***)"


_TOKEN = re.compile(r"^(hsvc_[0-9a-f]{12})\.([A-Za-z0-9_-]{32,128})$")


@dataclass(frozen=True)
class Credential:
    role: str
    secret: str

    @classmethod
    def new(cls) -> Credential:
        return cls(ROLE_PREFIX + secrets.token_hex(6), secrets.token_urlsafe(32))

    @classmethod
    def parse(cls, token: str) -> Credential:
        match = _TOKEN.match(token.strip())
        if match is None:
            raise Unauthenticated(
                "malformed service credential: expected the hsvc_….… string "
                "that `handoff service add` printed"
            )
        return cls(match.group(1), match.group(2))

    @property
    def token(self) -> str:
        return f"{self.role}.{self.secret}"

    @property
    def secret_hash(self) -> bytes:
        return hashlib.sha256(self.secret.encode()).digest()

    def __repr__(self) -> str:  # never print the secret by accident
        return f"Credential(role={self.role!r}, secret=***)"
