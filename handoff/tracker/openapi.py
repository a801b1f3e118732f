"""The OpenAPI document: what FastAPI derives from the routes, made to say everything.

FastAPI describes each route's parameters, bodies and success answers. This
adds what the server does besides, so that the document is the whole
contract (schemathesis checks every answer against it in ``make test``):

- every error answer's body (``ErrorBody``: ``code``, ``message``,
  ``requestId``, and the current owner and version where the contract
  gives them), instead of FastAPI's ``HTTPValidationError``, which this API
  never sends;
- the answers no route declares itself: 400 for a body that is not JSON,
  413 for one over the limit, 401 where a credential is needed, 422 for a
  parameter that fails validation, 503 when the database is away;
- the headers answers carry: ``X-Request-Id`` always, ``WWW-Authenticate``
  on a 401, ``Retry-After`` on a 503;
- a JSON value without NUL characters as ``data``'s schema (``JsonValue``),
  which pydantic cannot derive from ``dict[str, Any]``.
"""

from __future__ import annotations

import copy
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from handoff.core.models import MAX_DATA_BYTES, MAX_DATA_DEPTH

DATA_MARK = "x-handoff-data"  # set on the data field's schema (core/models.py)
NO_NUL = {"type": "string", "pattern": "^[^\\u0000]*$"}
_REF = {"$ref": "#/components/schemas/JsonValue"}

ERROR_BODY: dict[str, Any] = {
    "type": "object",
    "title": "ErrorBody",
    "description": "Every error answer: the code is the error's name (e.g. VersionMismatch).",
    "required": ["code", "message"],
    "properties": {
        "code": {"type": "string", "description": "the error, e.g. InvalidRequest"},
        "message": {"type": "string", "description": "what happened, written for the caller"},
        "requestId": {"type": "string", "description": "also in the X-Request-Id header"},
        "currentVersion": {"type": "integer", "description": "the document's version now"},
        "currentOwner": {"type": ["string", "null"], "description": "its owner now"},
        "problems": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"field": {"type": "string"}, "problem": {"type": "string"}},
            },
        },
    },
}
JSON_VALUE: dict[str, Any] = {
    "title": "JsonValue",
    "description": "Any JSON value whose strings and keys contain no NUL (U+0000).",
    "anyOf": [
        {"type": "null"},
        {"type": "boolean"},
        {"type": "number"},
        NO_NUL,
        {"type": "array", "items": _REF},
        {"type": "object", "propertyNames": NO_NUL, "additionalProperties": _REF},
    ],
}
DATA: dict[str, Any] = {
    "type": "object",
    "propertyNames": NO_NUL,
    "additionalProperties": _REF,
    "description": f"business data: a JSON object of at most {MAX_DATA_BYTES // 1024} KiB, "
    f"nested at most {MAX_DATA_DEPTH} levels, numbers finite, strings without NUL",
}

REQUEST_ID = {
    "X-Request-Id": {
        "description": "this request's id: the client's own when it sent a valid one",
        "schema": {"type": "string"},
    }
}
EXTRA = {
    "400": ("MalformedJson: the body is not JSON", {}),
    "401": (
        "Unauthenticated: the credential is missing, malformed, unknown or revoked",
        {"WWW-Authenticate": {"schema": {"type": "string"}}},
    ),
    "413": ("ContentTooLarge: the body is over the limit (HANDOFF_TRACKER_MAX_JSON_BYTES)", {}),
    "422": ("InvalidRequest: a parameter or the body failed validation", {}),
    "431": ("the request line and headers are over HANDOFF_TRACKER_MAX_HEADER_BYTES", {}),
    "503": (
        "the database is unavailable, or concurrent work met the request too often: retry",
        {"Retry-After": {"schema": {"type": "string"}}},
    ),
}


def _error(description: str, headers: dict[str, Any]) -> dict[str, Any]:
    return {
        "description": description,
        "headers": {**REQUEST_ID, **headers},
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
    }


def _codes(path: str, operation: dict[str, Any]) -> list[str]:
    """The answers besides its own that an operation may give."""
    if path == "/healthz":
        return ["431", "503"]
    if path == "/metrics":
        return ["401", "431"]
    codes = ["401", "422", "431", "503"]
    if "requestBody" in operation:
        codes += ["400", "413"]
    return codes


def _data_fields(node: Any) -> None:
    """Replace each schema marked as ``data`` with the documented JSON object."""
    if isinstance(node, dict):
        for key, value in list(node.items()):
            if isinstance(value, dict) and value.get(DATA_MARK):
                node[key] = {"anyOf": [DATA, {"type": "null"}], "description": DATA["description"]}
            else:
                _data_fields(value)
    elif isinstance(node, list):
        for item in node:
            _data_fields(item)


def document(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI document, completed; built once."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    spec = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    schemas["ErrorBody"] = ERROR_BODY
    schemas["JsonValue"] = JSON_VALUE
    _data_fields(schemas)
    for path, item in spec["paths"].items():
        for operation in item.values():
            responses = operation.setdefault("responses", {})
            errors = {c for c in responses if c.startswith(("4", "5"))} | set(
                _codes(path, operation)
            )
            for code in sorted(errors):
                default, headers = EXTRA.get(code, (code, {}))
                responses[code] = _error(responses.get(code, {}).get("description") or default,
                                         headers)  # fmt: skip
            for code, answer in responses.items():
                if code not in errors:
                    answer.setdefault("headers", {}).update(copy.deepcopy(REQUEST_ID))
    app.openapi_schema = spec
    return spec
