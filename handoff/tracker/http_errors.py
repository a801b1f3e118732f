"""HTTP status codes for Handoff's errors: assigned here and nowhere else.

Bodies are ``{"code": <error class name>, "message": ..., ...}`` with the
current owner and version where the contract reports them.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from handoff.core import errors as e

log = logging.getLogger("handoff.tracker")

STATUS: dict[type[e.HandoffError], int] = {
    e.InvalidRequest: 422,
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
    e.TransientConflict: 503,
    e.Unavailable: 503,
    e.OutcomeUnknown: 503,
}


def status_of(error: e.HandoffError) -> int:
    for cls in type(error).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def body_of(error: e.HandoffError) -> dict[str, Any]:
    body: dict[str, Any] = {"code": error.code, "message": str(error)}
    if isinstance(error, e.ContractError):
        if error.current_version is not None:
            body["currentVersion"] = error.current_version
        if error.current_owner is not None or isinstance(error, e.OwnershipMismatch):
            body["currentOwner"] = error.current_owner
    return body


def install(app: FastAPI) -> None:
    """Register the handlers that turn errors into coded JSON bodies."""

    @app.exception_handler(e.HandoffError)
    async def _handoff(_: Request, error: e.HandoffError) -> JSONResponse:
        status = status_of(error)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        if status == 503:
            headers = {"Retry-After": "1"}
        return JSONResponse(body_of(error), status_code=status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, error: RequestValidationError) -> JSONResponse:
        problems = [
            {"field": ".".join(str(p) for p in err["loc"] if p != "body"), "problem": err["msg"]}
            for err in error.errors()
        ]
        message = "; ".join(f"{p['field'] or 'body'}: {p['problem']}" for p in problems)
        return JSONResponse(
            {"code": "InvalidRequest", "message": message, "problems": problems}, status_code=422
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, error: StarletteHTTPException) -> JSONResponse:
        codes = {404: "NotFound", 405: "MethodNotAllowed"}
        return JSONResponse(
            {"code": codes.get(error.status_code, "HttpError"), "message": str(error.detail)},
            status_code=error.status_code,
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, error: Exception) -> JSONResponse:
        # A bug, not a client error: log it whole, answer in the same coded shape.
        log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=error)
        return JSONResponse(
            {"code": "InternalError", "message": "the server failed; the error was logged"},
            status_code=500,
        )
