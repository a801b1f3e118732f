"""Acting from the tracker: the owner of a document hands it on from its page.

A signed-in service that owns a document sees a form on the document's page
(event, next owner or none to finish, status); submitting it is one call of
the emit contract as that service, recorded in the document's history like
any other handoff, with the service as its sender. The contract decides:
a stale page (someone acted meanwhile) answers with the current version, and
nothing is changed.

Writes from the browser ride on the sign-in cookie, so each form carries a
token bound to the credential, the document and the form's event id (an
HMAC keyed by the credential's secret, which no other site can compute),
and the cookie is SameSite=Strict. The event id is minted when the page is
rendered: submitting the same form twice answers the same receipt.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import urllib.parse
import uuid

from fastapi import Request
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError

from handoff.core.errors import InvalidRequest, NotPermitted
from handoff.core.identity import Credential
from handoff.core.models import HandoffRequest
from handoff.tracker.emit_api import emit_retrying


def form_token(credential: Credential, document_id: str, event_id: str) -> str:
    message = f"{document_id}\x1f{event_id}".encode()
    return hmac.new(credential.secret.encode(), message, hashlib.sha256).hexdigest()


def new_form(credential: Credential, document_id: str) -> dict[str, str]:
    """The hidden fields of a fresh handoff form."""
    event_id = f"ui-{uuid.uuid4()}"
    return {"event_id": event_id, "token": form_token(credential, document_id, event_id)}


def _field(form: dict[str, list[str]], name: str) -> str:
    return (form.get(name) or [""])[0].strip()


_NUMBER = re.compile(r"[0-9]{1,10}")  # ASCII digits only: str.isdigit() also takes "²"


def _number(text: str, what: str) -> int | None:
    """A version or run from the form: None when empty; InvalidRequest unless 1 to 2^31-1."""
    if not text:
        return None
    if _NUMBER.fullmatch(text) is None or not 1 <= int(text) <= 2**31 - 1:
        raise InvalidRequest(f"{what} {text[:20]!r} is not a number from 1 to 2147483647")
    return int(text)


async def hand_off(request: Request, credential: Credential, document_id: str) -> Response:
    """Check the form, emit as the signed-in service, go back to the document."""
    form = urllib.parse.parse_qs((await request.body()).decode(errors="replace"))
    event_id = _field(form, "event_id")
    token = _field(form, "token")
    if not event_id or not hmac.compare_digest(
        form_token(credential, document_id, event_id), token
    ):
        raise NotPermitted("this form was not issued to you for this document; reload the page")
    version = _number(_field(form, "expected_version"), "expected version")
    if version is None:
        raise InvalidRequest("expected version missing from the form; reload the page")
    next_owner = _field(form, "next_owner") or None
    run = _number(_field(form, "run_id"), "run")
    try:
        body = HandoffRequest(
            run_id=run,
            event_id=event_id,
            event_type=_field(form, "event_type"),
            document_id=document_id,
            next_owner=next_owner,
            status=_field(form, "status"),
            expected_version=version,
        )
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise InvalidRequest(problems) from exc
    receipt = await emit_retrying(request.app.state.pool, credential, body)
    target = f"/documents/{urllib.parse.quote(document_id, safe='')}?acted={receipt.version}"
    return RedirectResponse(target + "#timeline", status_code=303)
