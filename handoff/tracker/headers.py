"""Security headers on every answer of the tracker (pages, API, docs, static files).

- ``Content-Security-Policy``: scripts only from this origin, never inline
  (the pages' JavaScript is /static/tracker.js; the API docs' start-up is
  /static/docs.js), nothing framed here, forms posted only here. Inline
  ``style`` attributes stay allowed: the charts and bars are drawn with them.
- ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: same-origin`` (a
  document id in a URL never travels to another site), ``X-Frame-Options``
  for browsers that predate ``frame-ancestors``.
- ``Strict-Transport-Security`` when the request came over HTTPS.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; worker-src 'self' blob:; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
ALWAYS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
]
HSTS = (b"strict-transport-security", b"max-age=31536000")


HeaderList = list[tuple[bytes, bytes]]


class ResponseHeaders:
    """Adds ``headers(scope)`` to every HTTP response (pure ASGI: it runs on every emit)."""

    def __init__(self, app: ASGIApp, headers: Callable[[Scope], HeaderList]) -> None:
        self.app = app
        self.headers = headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extra = self.headers(scope)

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, with_headers)


def security_headers(scope: Scope) -> HeaderList:
    return [*ALWAYS, HSTS] if scope.get("scheme") == "https" else ALWAYS
