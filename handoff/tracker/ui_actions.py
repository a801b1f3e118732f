"""Acting from the tracker: the owner of a document hands it on from its page.

A signed-in service that owns a document sees a form on the document's page
(event, next owner or none to finish, status); submitting it is one call of
the emit contract as that service, recorded in the document's history like
any other handoff, with the service as its sender. The contract decides:
a stale page (someone acted meanwhile) answers with the current version, and
nothing is changed.

Writes from the browser ride on the session cookie, so each form carries a
token only the session can make (sessions.form_token), bound to the
document and the form's event id, and the cookie is SameSite=Strict. The
event id is minted when the page is rendered: submitting the same form twice
answers the same receipt (the emit's own idempotency), so this form, unlike
the operate page's, may be sent again.
"""

from __future__ import annotations

import re
import urllib.parse
import uuid

from fastapi import Request
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError

from handoff.core.errors import InvalidRequest
from handoff.core.models import HandoffRequest
from handoff.tracker import sessions
from handoff.tracker.emit_api import emit_retrying
from handoff.tracker.forms import read_form
from handoff.tracker.sessions import Session


def _purpose(document_id: str, event_id: str) -> str:
    return f"handoff\x1f{document_id}\x1f{event_id}"


def new_form(session: Session, document_id: str) -> dict[str, str]:
    """The hidden fields of a fresh handoff form."""
    event_id = f"ui-{uuid.uuid4()}"
    return {
        "event_id": event_id,
        "token": sessions.form_token(session, _purpose(document_id, event_id)),
    }


_NUMBER = re.compile(r"[0-9]{1,10}")  # ASCII digits only: str.isdigit() also takes "²"


def _number(text: str, what: str) -> int | None:
    """A version or run from the form: None when empty; InvalidRequest unless 1 to 2^31-1."""
    if not text:
        return None
    if _NUMBER.fullmatch(text) is None or not 1 <= int(text) <= 2**31 - 1:
        raise InvalidRequest(f"{what} {text[:20]!r} is not a number from 1 to 2147483647")
    return int(text)


async def hand_off(request: Request, session: Session, document_id: str) -> Response:
    """Check the form, emit as the signed-in service, go back to the document."""
    form = await read_form(request)
    event_id = form.get("event_id", "")
    sessions.check_token(session, _purpose(document_id, event_id), form.get("token", ""))
    version = _number(form.get("expected_version", ""), "expected version")
    if version is None:
        raise InvalidRequest("expected version missing from the form; reload the page")
    try:
        body = HandoffRequest(
            run_id=_number(form.get("run_id", ""), "run"),
            event_id=event_id,
            event_type=form.get("event_type", ""),
            document_id=document_id,
            next_owner=form.get("next_owner") or None,
            status=form.get("status", ""),
            expected_version=version,
        )
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise InvalidRequest(problems) from exc
    principal = await request.app.state.sessions.principal(session)
    receipt = await emit_retrying(request.app.state.pool, principal, body)
    target = f"/documents/{urllib.parse.quote(document_id, safe='')}?acted={receipt.version}"
    return RedirectResponse(target + "#timeline", status_code=303)
