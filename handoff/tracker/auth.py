"""Who is calling: the service credential from a bearer header, or a web UI session.

The API's writes accept only the header. Reads also accept the session
cookie that the web UI's sign-in sets (sessions.py), so a signed-in browser
may read the API it sees pages of. The bearer scheme is declared in the
OpenAPI document as a security scheme (``bearerAuth``); the check itself is
Handoff's (a missing or malformed credential is 401 ``Unauthenticated`` with
its reason, the database decides whether a well-formed one is known).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from handoff.core.errors import Unauthenticated
from handoff.core.identity import Credential
from handoff.tracker import sessions
from handoff.tracker.sessions import Session

SCHEME = HTTPBearer(
    auto_error=False,  # the answer is Handoff's coded 401, not FastAPI's
    scheme_name="bearerAuth",
    description="A service credential, the hsvc_….… line `handoff service add` printed.",
)
Bearer = Annotated[HTTPAuthorizationCredentials | None, Depends(SCHEME)]
MISSING = "missing Authorization: Bearer <service credential>"


def bearer(request: Request, given: Bearer) -> Credential:
    if given is None:
        if request.headers.get("authorization"):
            raise Unauthenticated("the Authorization header must be 'Bearer <service credential>'")
        raise Unauthenticated(MISSING)
    return Credential.parse(given.credentials)


def bearer_or_session(request: Request, given: Bearer) -> Credential | Session:
    if given is not None or request.headers.get("authorization"):
        return bearer(request, given)
    session = sessions.from_cookie(request.cookies.get(sessions.COOKIE))
    if session is None:
        raise Unauthenticated(MISSING)
    return session


def signed_in(request: Request) -> Session:
    """The web UI's session (checked by the reads it makes); none: Unauthenticated, which
    a page answers by going to sign-in (ui.error_page)."""
    session = sessions.from_cookie(request.cookies.get(sessions.COOKIE))
    if session is None:
        raise Unauthenticated("sign in first")
    return session


Writer = Annotated[Credential, Depends(bearer)]
Caller = Annotated[Credential | Session, Depends(bearer_or_session)]
Viewer = Annotated[Session, Depends(signed_in)]
