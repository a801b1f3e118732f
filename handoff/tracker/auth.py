"""Who is calling: the service credential, from a bearer header or the UI's cookie.

The API's writes accept only the header. Reads also accept the HttpOnly
cookie that the web UI's sign-in sets, so the pages and their refreshes need
no JavaScript access to the secret. The one write the cookie authorises is
the owner's form on a document page, which also carries a token bound to the
credential (tracker/ui_actions.py).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from handoff.core.errors import Unauthenticated
from handoff.core.identity import Credential

COOKIE = "handoff_credential"


def _from_header(authorization: str) -> Credential:
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Unauthenticated("the Authorization header must be 'Bearer <service credential>'")
    return Credential.parse(token)


def bearer(
    authorization: Annotated[str | None, Header(description="Bearer <service credential>")] = None,
) -> Credential:
    if not authorization:
        raise Unauthenticated("missing Authorization: Bearer <service credential>")
    return _from_header(authorization)


def bearer_or_cookie(
    request: Request,
    authorization: Annotated[str | None, Header(description="Bearer <service credential>")] = None,
) -> Credential:
    if authorization:
        return _from_header(authorization)
    token = request.cookies.get(COOKIE)
    if token:
        return Credential.parse(token)
    raise Unauthenticated("missing Authorization: Bearer <service credential>")


Writer = Annotated[Credential, Depends(bearer)]
Reader = Annotated[Credential, Depends(bearer_or_cookie)]
