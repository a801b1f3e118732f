"""A request id for every HTTP request: in the ``X-Request-Id`` response header,
in every error body (``requestId``) and in the server's log lines about it.

A client may send its own ``X-Request-Id`` (1-64 characters of
``A-Za-z0-9._-``) to correlate with its logs; anything else is replaced by a
fresh one. Pure ASGI, not a ``BaseHTTPMiddleware``: emits are the hot path.
"""

from __future__ import annotations

import re
import uuid

from starlette.requests import Request
from starlette.types import Scope

from handoff.tracker.headers import HeaderList

HEADER = "x-request-id"
_VALID = re.compile(r"[A-Za-z0-9._-]{1,64}")


def request_id(request: Request) -> str:
    """The id of this request (set by the middleware; a fresh one if it did not run)."""
    found = request.scope.get("state", {}).get("request_id")
    return str(found) if found else uuid.uuid4().hex


def request_id_header(scope: Scope) -> HeaderList:
    """The caller's ``X-Request-Id`` when it is a plain token, else a fresh one: kept in
    the scope's state for the log and the error bodies, and answered in the header."""
    given = next(
        (value.decode("latin-1") for key, value in scope["headers"] if key == HEADER.encode()),
        "",
    )
    rid = given if _VALID.fullmatch(given) else uuid.uuid4().hex
    scope.setdefault("state", {})["request_id"] = rid
    return [(HEADER.encode(), rid.encode())]
