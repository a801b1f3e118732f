"""The web UI's forms, read within bounds.

A form's body is already bounded in bytes (limits.py); here it is also bounded
in fields, decoded strictly as UTF-8, and every value taken once, trimmed.
"""

from __future__ import annotations

import urllib.parse

from fastapi import Request

from handoff.core.errors import InvalidRequest

MAX_FIELDS = 50  # the largest form (hand-on) has nine


async def read_form(request: Request) -> dict[str, str]:
    """The fields of a urlencoded form, first value of each, trimmed."""
    body = await request.body()
    try:
        fields = urllib.parse.parse_qs(
            body.decode("utf-8"), max_num_fields=MAX_FIELDS, strict_parsing=False,
            errors="strict",
        )  # fmt: skip
    except (UnicodeDecodeError, ValueError) as exc:  # ValueError: too many fields
        raise InvalidRequest(f"the form could not be read: {exc}") from exc
    return {name: values[0].strip() for name, values in fields.items() if values}
