"""Request bodies bounded before they are read: 413 ``ContentTooLarge``.

A form (the web UI's sign-in, hand-on and operate forms) may be at most
``max_form_bytes``; anything else (the JSON API) at most ``max_json_bytes``.
A request whose Content-Length says more is answered at once, without a
byte of its body read; a body without a length (chunked) is counted as it
arrives and refused the moment it passes the limit. So a 10 MB form can
neither hold the event loop while it is parsed nor stay in memory.

Why not Starlette's RequestBodyLimitMiddleware: it answers in plain text,
and every answer of this API is a coded JSON body (http_errors.py).
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")
CODE = "ContentTooLarge"


def _too_large(limit: int) -> str:
    return f"the request body is larger than {limit:,} bytes"


class BodyLimits:
    def __init__(self, app: ASGIApp, *, max_json_bytes: int, max_form_bytes: int) -> None:
        self.app = app
        self.max_json_bytes = max_json_bytes
        self.max_form_bytes = max_form_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        kind = headers.get("content-type", "").split(";")[0].strip().lower()
        limit = self.max_form_bytes if kind in FORMS else self.max_json_bytes
        length = headers.get("content-length")
        rid = scope.get("state", {}).get("request_id", "")  # request_id_header runs first
        if length is not None and (not length.isascii() or not length.isdigit()):
            body = {"code": "InvalidRequest", "message": "Content-Length is not a number"}
            await JSONResponse({**body, "requestId": rid}, 400)(scope, receive, send)
            return
        if length is not None and int(length) > limit:
            body = {"code": CODE, "message": _too_large(limit), "requestId": rid}
            answer = JSONResponse(body, 413, headers={"Connection": "close"})
            await answer(scope, receive, send)
            return
        taken = 0

        async def bounded() -> Message:
            nonlocal taken
            message = await receive()
            if message["type"] == "http.request":
                taken += len(message.get("body", b""))
                if taken > limit:
                    # An HTTPException: FastAPI passes it on from its body parsing, and
                    # http_errors answers it as 413 ContentTooLarge.
                    raise HTTPException(413, _too_large(limit), {"Connection": "close"})
            return message

        await self.app(scope, bounded, send)
