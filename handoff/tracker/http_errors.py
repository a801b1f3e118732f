"""HTTP status codes for Handoff's errors: assigned here and nowhere else.

API bodies are ``{"code": <error class name>, "message": ..., "requestId": ...}``
with the current owner and version where the contract reports them; a web
UI page gets the same status with a page (the renderer ``install`` is given).
Messages are written for clients; what the database or a library said goes
to the log, under the same request id, and never into a response.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from handoff.core import errors as e
from handoff.tracker.request_ids import request_id

log = logging.getLogger("handoff.tracker")

STATUS: dict[type[e.HandoffError], int] = {
    e.InvalidRequest: 422,
    e.UnknownOwner: 422,
    e.Unauthenticated: 401,
    e.SenderMismatch: 403,
    e.NotPermitted: 403,
    e.DocumentNotFound: 404,
    e.OwnershipMismatch: 409,
    e.VersionMismatch: 409,
    e.ConflictingEventReuse: 409,
    e.AlreadyExists: 409,
    e.RunInProgress: 409,
    e.ServiceExists: 409,
    e.ServiceNotFound: 404,
    e.ServiceInUse: 409,
    e.TransientConflict: 503,
    e.Unavailable: 503,
    e.OutcomeUnknown: 503,
    e.QuarantineEntryNotFound: 404,
    e.EffectNotFound: 404,
    e.QuarantineEntryClosed: 409,  # someone decided meanwhile
    e.EffectNotUnresolved: 409,
    e.OperationRefused: 409,
    e.LoginRefused: 503,  # the server's own database settings: it cannot serve
}


def status_of(error: e.HandoffError) -> int:
    for cls in type(error).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


# What a 5xx says: the reason stays in the log (it may name hosts and ports).
SERVER_SIDE = {
    e.TransientConflict: "the request met concurrent work too often; retry it as is",
    e.OutcomeUnknown: "the request may or may not have been applied; "
    "retry the identical request with the same event id",
    e.Unavailable: "the database is unavailable; retry shortly",
}


def client_message(error: e.HandoffError, status: int) -> str:
    if status >= 500:
        for cls, message in SERVER_SIDE.items():
            if isinstance(error, cls):
                return message
        return "the server failed; the error was logged"
    return str(error)


def body_of(error: e.HandoffError) -> dict[str, Any]:
    body: dict[str, Any] = {"code": error.code, "message": client_message(error, status_of(error))}
    if isinstance(error, e.ContractError):
        if error.current_version is not None:
            body["currentVersion"] = error.current_version
        if error.current_owner is not None or isinstance(error, e.OwnershipMismatch):
            body["currentOwner"] = error.current_owner
    return body


def _answer(
    request: Request, body: dict[str, Any], status: int, headers: dict[str, str] | None = None
) -> JSONResponse:
    """A coded error body with this request's id in it."""
    return JSONResponse({**body, "requestId": request_id(request)}, status, headers)


# Paths that answer JSON; every other path is a page of the web UI.
API_PATHS = ("/v1/", "/healthz", "/metrics", "/openapi.json")
PageRenderer = Callable[[Request, e.HandoffError, int], Response]


def _is_page(request: Request) -> bool:
    return not request.url.path.startswith(API_PATHS)


def install(app: FastAPI, page: PageRenderer) -> None:
    """Register the handlers that turn errors into coded JSON bodies, or into ``page``
    for the web UI's paths."""

    @app.exception_handler(e.HandoffError)
    async def _handoff(request: Request, error: e.HandoffError) -> Response:
        status = status_of(error)
        rid = request_id(request)
        if error.__cause__ is not None or status >= 500:
            # The underlying error (database text, connection details) is for
            # operators: logged here, under the id the client was given.
            log.warning(
                "request %s %s %s answered %s %s: %s (cause: %r)",
                rid, request.method, request.url.path, status, error.code, error, error.__cause__,
            )  # fmt: skip
        if _is_page(request):
            return page(request, error, status)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        if status == 503:
            headers = {"Retry-After": "1"}
        return _answer(request, body_of(error), status, headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, error: RequestValidationError) -> Response:
        if any(err["type"] == "json_invalid" for err in error.errors()):
            # Not JSON at all is a malformed request (400), not a failed validation.
            malformed = {"code": "MalformedJson", "message": "the request body is not valid JSON"}
            return _answer(request, malformed, 400)
        problems = [
            {"field": ".".join(str(p) for p in err["loc"] if p != "body"), "problem": err["msg"]}
            for err in error.errors()
        ]
        message = "; ".join(f"{p['field'] or 'body'}: {p['problem']}" for p in problems)
        if _is_page(request):
            return page(request, e.InvalidRequest(message), 422)
        body = {"code": "InvalidRequest", "message": message, "problems": problems}
        return _answer(request, body, 422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, error: StarletteHTTPException) -> Response:
        if _is_page(request) and error.status_code == 404:
            return page(request, e.HandoffError(str(error.detail)), 404)
        codes = {404: "NotFound", 405: "MethodNotAllowed", 413: "ContentTooLarge"}
        body = {"code": codes.get(error.status_code, "HttpError"), "message": str(error.detail)}
        # The exception's headers are part of the answer: a 405's Allow, above all.
        return _answer(request, body, error.status_code, dict(error.headers or {}))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, error: Exception) -> JSONResponse:
        # A bug, not a client error: log it whole, answer in the same coded shape.
        rid = request_id(request)
        log.error(
            "request %s: unhandled error on %s %s", rid, request.method, request.url.path,
            exc_info=error,
        )  # fmt: skip
        body = {"code": "InternalError", "message": "the server failed; the error was logged"}
        # this handler answers outside the request-id middleware
        return _answer(request, body, 500, {"X-Request-Id": rid})
