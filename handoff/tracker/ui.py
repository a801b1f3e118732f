"""The tracker's web UI: server-rendered pages over the read model.

Pages: ``/`` (one card per owner, refreshing itself), ``/owners/{owner}``
(oldest first, or overdue), ``/documents/{id}`` (where it is and its
timeline), ``/search``, and sign-in with a service credential, which opens
a session (sessions.py: the browser keeps an opaque id, never the
credential; the pages read only that service's tenant).
"""

from __future__ import annotations

import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from pydantic import TypeAdapter, ValidationError

from handoff.core.errors import (
    CONTRACT_ERRORS,
    HandoffError,
    InvalidRequest,
    NotPermitted,
)
from handoff.core.identity import Credential
from handoff.core.models import Identifier, ServiceName
from handoff.telemetry import tracing
from handoff.tracker import charts, flow_svg, http_errors, operate, sessions, timeline, ui_actions
from handoff.tracker import read_model as reads
from handoff.tracker.auth import Viewer
from handoff.tracker.forms import read_form
from handoff.tracker.read_model import ReadModel
from handoff.tracker.sessions import COOKIE, SIGNIN_COOKIE
from handoff.tracker.settings import TrackerSettings

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=Path(__file__).with_name("templates"))
STATIC = Path(__file__).with_name("static")


def age(delta: timedelta) -> str:
    """A waiting time as people say it: '45 s', '13 min', '2 h 05 min', '3 d 4 h'."""
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def due(at: datetime | None, now: datetime) -> str:
    """A deadline as people say it: 'due in 1 h 14 min', 'overdue by 3 h 02 min'."""
    if at is None:
        return "no deadline"
    return f"overdue by {age(now - at)}" if at < now else f"due in {age(at - now)}"


templates.env.filters["age"] = age
templates.env.globals["due"] = due
templates.env.globals["trace_url"] = tracing.trace_url
templates.env.filters["hhmm"] = lambda at: at.strftime("%H:%M") if at else ""
templates.env.filters["stamp"] = lambda at: at.strftime("%Y-%m-%d %H:%M:%S UTC") if at else ""
templates.env.filters["iso"] = lambda at: at.isoformat() if at else ""


def _model(request: Request) -> ReadModel:
    model: ReadModel = request.app.state.read_model
    return model


def _settings(request: Request) -> TrackerSettings:
    settings: TrackerSettings = request.app.state.tracker_settings
    return settings


def _signin_redirect(request: Request) -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    response = RedirectResponse(f"/signin?next={urllib.parse.quote(target)}", status_code=303)
    response.delete_cookie(COOKIE)
    return response


def _page(
    request: Request, name: str, context: dict[str, Any], status_code: int = 200
) -> HTMLResponse:
    session = sessions.from_cookie(request.cookies.get(COOKIE))
    if session is not None and context.get("reader"):  # the header's sign-out form
        context = {**context, "signout_token": sessions.form_token(session, "signout")}
    return templates.TemplateResponse(request, name, context, status_code=status_code)


def error_page(request: Request, error: HandoffError, status: int) -> Response:
    """A page's error as a page (http_errors decides the status for pages and API alike):
    no session any more: to sign-in; else the error, with a way back from a refusal."""
    if status == 401:
        return _signin_redirect(request)
    titles = {404: "Not found", 422: "Not valid", 413: "Too large"}
    title = titles.get(status) or (f"Refused: {error.code}" if status < 500 else "Unavailable")
    back = None
    if status in (403, 409):  # an action refused: nothing changed; back where it was asked
        back = request.url.path.removesuffix("/handoff")
        if back.startswith("/operate/"):
            back = "/operate"
    context = {"title": title, "message": http_errors.client_message(error, status), "back": back}
    return _page(request, "error.html", context, status)


# Built once: a TypeAdapter is costly to make, and the pages use these on every request.
_OWNER: TypeAdapter[str] = TypeAdapter(ServiceName)
_DOCUMENT_ID: TypeAdapter[str] = TypeAdapter(Identifier)


def _valid(kind: TypeAdapter[str], value: str, what: str) -> str:
    """A path value checked as the API checks it, answered as a page when it is not valid."""
    try:
        return kind.validate_python(value)
    except ValidationError as exc:
        raise InvalidRequest(f"{what} {value[:80]!r} is not valid") from exc


@router.get("/", response_class=HTMLResponse)
async def overview(request: Request, session: Viewer) -> Response:
    reader, (snapshot,) = await _model(request).read(session, reads.owners())
    return _page(
        request,
        "overview.html",
        {"reader": reader, "snapshot": snapshot, "refresh_s": _settings(request).refresh_s},
    )


# The windows the pipeline page offers: minutes → tab label.
PIPELINE_WINDOWS = {15: "Last 15 minutes", 60: "Last hour", 1440: "Last day"}


@router.get("/pipeline", response_class=HTMLResponse)
async def pipeline(request: Request, session: Viewer, minutes: str = "15") -> Response:
    """The flow (flow_svg.py) over the chosen window, then each stage's card: waiting,
    overdue, pace, oldest, quarantined."""
    if not minutes.isdigit() or int(minutes) not in PIPELINE_WINDOWS:
        raise InvalidRequest("minutes must be one of " + ", ".join(map(str, PIPELINE_WINDOWS)))
    reader, view = await _model(request).pipeline(session, int(minutes))
    return _page(
        request,
        "pipeline.html",
        {
            "reader": reader,
            "view": view,
            "flow": flow_svg.draw(view, age),
            "windows": PIPELINE_WINDOWS,
        },
    )


@router.get("/trends", response_class=HTMLResponse)
async def trends(request: Request, session: Viewer, window: str = "hour") -> Response:
    """Backlog and oldest age per owner, arrivals against completions, over time."""

    if window not in reads.WINDOWS:
        raise InvalidRequest("window must be hour or day")
    reader, data = await _model(request).trends(session, window)  # type: ignore[arg-type]
    start, end = data.since, data.as_of
    backlog = [
        charts.Series(o.owner, list(zip(o.at, o.assigned, strict=True))) for o in data.owners
    ]
    oldest = [
        charts.Series(o.owner, [(at, s or 0.0) for at, s in zip(o.at, o.oldest_s, strict=True)])
        for o in data.owners
    ]
    flow = [
        charts.Series("created", list(zip(data.flow_at, data.created, strict=True))),
        charts.Series("completed", list(zip(data.flow_at, data.completed, strict=True))),
    ]
    per = "minute" if data.bucket_s == 60 else f"{data.bucket_s // 60} minutes"
    return _page(
        request,
        "trends.html",
        {
            "reader": reader,
            "window": window,
            "charts": [
                charts.line_chart("Waiting work per owner", backlog, start, end),
                charts.line_chart(
                    "Oldest waiting per owner",
                    oldest,
                    start,
                    end,
                    lambda v: age(timedelta(seconds=v)),
                ),
                charts.line_chart(f"Created and completed per {per}", flow, start, end),
            ],
        },
    )


@router.get("/operate", response_class=HTMLResponse)
async def operate_page(request: Request, session: Viewer) -> Response:
    """Relay backlog, consumer lag, quarantine and unresolved effects, with actions."""
    reader, view = await operate.operate_view(
        _model(request), session, _settings(request), request.app.state.kafka_cluster
    )
    # One form per action, each used once (operate.py).
    actions = [
        *(f"quarantine/{q.id}/{action}" for q in view.quarantine
          if q.consumer == reader.service for action in ("retry", "discard")),
        *(f"effect/{x.id}/resolve" for x in view.unresolved_effects
          if x.owner == reader.service),
    ]  # fmt: skip
    forms = {action: operate.new_form(session, action) for action in actions}
    return _page(
        request,
        "operate.html",
        {
            "reader": reader,
            "view": view,
            "forms": forms,
            "done": request.query_params.get("done"),
            "cap": operate.BACKLOG_CAP,
        },
    )


@router.post("/operate/quarantine/{entry_id}/{action}", response_class=HTMLResponse)
async def operate_quarantine(
    request: Request, session: Viewer, entry_id: int, action: str
) -> Response:
    reader, _ = await _model(request).read(session)
    done = await operate.act_on_quarantine(request, session, reader, entry_id, action)
    return RedirectResponse(f"/operate?done={urllib.parse.quote(done)}", status_code=303)


@router.post("/operate/effects/{intent_id}/resolve", response_class=HTMLResponse)
async def operate_effect(request: Request, session: Viewer, intent_id: int) -> Response:
    reader, _ = await _model(request).read(session)
    done = await operate.act_on_effect(request, session, reader, intent_id)
    return RedirectResponse(f"/operate?done={urllib.parse.quote(done)}", status_code=303)


@router.get("/ui/owner-cards", response_class=HTMLResponse)
async def owner_cards(request: Request, session: Viewer) -> Response:
    """The overview's cards alone: what the page's refresh fetches."""

    snapshot = await _model(request).one(session, reads.owners())
    return _page(request, "_cards.html", {"snapshot": snapshot})


@router.get("/owners/{owner}", response_class=HTMLResponse)
async def owner(
    request: Request, session: Viewer, owner: str, view: str = "all", after: str | None = None
) -> Response:
    name = _valid(_OWNER, owner, "owner")
    listing = reads.owner_overdue if view == "overdue" else reads.owner_documents
    reader, (page, snapshot) = await _model(request).read(
        session, listing(name, 50, after), reads.owners()
    )
    counts = next((c for c in snapshot.owners if c.owner == name), None)
    return _page(
        request,
        "owner.html",
        {
            "reader": reader,
            "owner": name,
            "view": "overdue" if view == "overdue" else "all",
            "page": page,
            "counts": counts,
            "now": snapshot.as_of,
            "first_page": after is None,
        },
    )


@router.get("/documents/{document_id}", response_class=HTMLResponse)
async def document(
    request: Request, session: Viewer, document_id: str, run: int | None = None
) -> Response:
    doc_id = _valid(_DOCUMENT_ID, document_id, "document id")
    # One snapshot for the three (REPEATABLE READ): the timeline matches the state.
    reader, (doc, versions, rejected) = await _model(request).read(
        session,
        reads.document(doc_id, run),
        reads.versions(doc_id, run, reads.MAX_PAGE, None),
        reads.rejections(doc_id, 50, None),
        repeatable=True,
    )
    mine = doc.owner is not None and doc.owner == reader.service
    return _page(
        request,
        "document.html",
        {
            "reader": reader,
            "doc": doc,
            "history": reads.history_page(doc, versions, reads.MAX_PAGE),
            "entries": timeline.of(versions, rejected.items),
            "stages": timeline.stages(versions),
            "now": datetime.now(doc.updated_at.tzinfo),
            "form": ui_actions.new_form(session, doc_id) if mine else None,
            "acted": request.query_params.get("acted"),
        },
    )


@router.post("/documents/{document_id}/handoff", response_class=HTMLResponse)
async def document_handoff(request: Request, session: Viewer, document_id: str) -> Response:
    """The owner's decision from the document page, through the emit contract."""

    doc_id = _valid(_DOCUMENT_ID, document_id, "document id")
    return await ui_actions.hand_off(request, session, doc_id)


def _when(value: str, what: str) -> datetime | None:
    """A time from a filter form (the browser's datetime-local: no zone, taken as UTC)."""
    if not value.strip():
        return None
    try:
        at = datetime.fromisoformat(value.strip())
    except ValueError as exc:
        raise InvalidRequest(f"{what}: {value[:40]!r} is not a date and time") from exc
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at


@router.get("/rejections", response_class=HTMLResponse)
async def rejections(
    request: Request,
    session: Viewer,
    after: str | None = None,
    code: str = "",
    sender: str = "",
    since: str = "",
    until: str = "",
) -> Response:
    """Every rejected attempt of the tenant, newest first: where to look when a service is stuck."""

    only = reads.RejectionFilter(
        code.strip() or None,
        _valid(_OWNER, sender.strip(), "sender") if sender.strip() else None,
        _when(since, "since"),
        _when(until, "until"),
    )
    reader, (page,) = await _model(request).read(session, reads.rejections(None, 50, after, only))
    filters = {"code": code.strip(), "sender": sender.strip(), "since": since.strip(),
               "until": until.strip()}  # fmt: skip
    return _page(
        request,
        "rejections.html",
        {
            "reader": reader,
            "page": page,
            "first_page": after is None,
            "filters": filters,
            "query": urllib.parse.urlencode({k: v for k, v in filters.items() if v}),
            "codes": sorted(CONTRACT_ERRORS),
        },
    )


_FIND_FIELDS = ("idPrefix", "owner", "state", "status", "overdue", "assignedSince",
                "assignedUntil", "data", "sort", "order")  # fmt: skip


@router.get("/find", response_class=HTMLResponse)
async def find(request: Request, session: Viewer, after: str | None = None) -> Response:
    """Find documents by id prefix, owner, state, status, deadline, assignment time and data."""

    form = {k: request.query_params.get(k, "").strip() for k in _FIND_FIELDS}
    owner = _valid(_OWNER, form["owner"], "owner") if form["owner"] else None
    sort = form["sort"] or ("assigned" if owner else "id")
    only = reads.FindFilter(
        id_prefix=form["idPrefix"][:200],
        owner=owner,
        state=form["state"] or "active",  # type: ignore[arg-type]
        status=form["status"] or None,
        overdue=form["overdue"] in ("1", "on", "true"),
        assigned_since=_when(form["assignedSince"], "assigned since"),
        assigned_until=_when(form["assignedUntil"], "assigned until"),
        contains=reads.parse_contains(form["data"]),
        sort=sort,  # type: ignore[arg-type]
        descending=form["order"] == "desc",
    )
    model = _model(request)
    reader, (page, snapshot) = await model.read(
        session, reads.find(only, 50, after, model.byte_order), reads.owners()
    )
    kept = {k: v for k, v in form.items() if v and k not in ("sort", "order")}
    return _page(
        request,
        "find.html",
        {
            "reader": reader,
            "page": page,
            "form": form,
            "sort": sort,
            "descending": only.descending,
            "owners": [c.owner for c in snapshot.owners],
            "query": urllib.parse.urlencode({**kept, "sort": sort, "order": form["order"]}),
            "kept": urllib.parse.urlencode(kept),
            "first_page": after is None,
            "now": snapshot.as_of,
            "budget": reads.FIND_BUDGET,
        },
    )


@router.get("/completed", response_class=HTMLResponse)
async def completed(
    request: Request,
    session: Viewer,
    after: str | None = None,
    id_prefix: Annotated[str, Query(alias="idPrefix")] = "",
) -> Response:
    """Finished work, newest first, or found by the start of its id."""

    prefix = id_prefix.strip()[:200] or None
    reader, (page,) = await _model(request).read(session, reads.completed(50, after, prefix))
    return _page(
        request,
        "completed.html",
        {
            "reader": reader,
            "page": page,
            "prefix": prefix or "",
            "first_page": after is None,
            "now": datetime.now(UTC),
        },
    )


@router.get("/docs", response_class=HTMLResponse)
async def swagger_ui(request: Request) -> Response:
    """The API's interactive docs (Swagger UI), its assets served from a package."""
    return _page(request, "docs.html", {"kind": "Swagger UI"})


@router.get("/redoc", response_class=HTMLResponse)
async def redoc(request: Request) -> Response:
    return _page(request, "docs.html", {"kind": "ReDoc"})


@router.get("/search")
async def search(document_id: Annotated[str, Query(alias="documentId")] = "") -> Response:
    wanted = document_id.strip()
    if not wanted:
        return RedirectResponse("/", status_code=303)
    return RedirectResponse(f"/documents/{urllib.parse.quote(wanted, safe='')}", status_code=303)


@router.get("/signin", response_class=HTMLResponse)
async def signin_form(request: Request, next: str = "/") -> Response:
    return _signin_page(request, _local(next), None, 200)


def _signin_page(request: Request, target: str, error: str | None, status: int) -> Response:
    """The sign-in form, with a fresh double-submit value in the form and a cookie."""
    value = sessions.new_signin_value()
    context = {"next": target, "error": error, "signin_value": value}
    response = _page(request, "signin.html", context, status)
    response.set_cookie(SIGNIN_COOKIE, value, httponly=True, samesite="strict",
                        secure=_secure(request), max_age=3600, path="/signin")  # fmt: skip
    return response


@router.post("/signin", response_class=HTMLResponse)
async def signin(request: Request) -> Response:
    form = await read_form(request)
    target = _local(form.get("next", "/"))
    try:
        sessions.check_signin_value(request.cookies.get(SIGNIN_COOKIE), form.get("signin", ""))
        opened, _, _ = await request.app.state.sessions.open(
            Credential.parse(form.get("credential", ""))
        )
    except HandoffError as error:
        status = 403 if isinstance(error, NotPermitted) else 401
        return _signin_page(request, target, str(error), status)
    settings = _settings(request)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        COOKIE,
        opened.id,
        httponly=True,
        samesite="strict",
        secure=_secure(request),
        max_age=int(settings.session_lifetime_s),
    )
    response.delete_cookie(SIGNIN_COOKIE, path="/signin")
    return response


@router.post("/signout")
async def signout(request: Request) -> Response:
    """End the session. Its form carries the session's token: no other site signs you out."""
    session = sessions.from_cookie(request.cookies.get(COOKIE))
    if session is not None:
        form = await read_form(request)
        try:
            sessions.check_token(session, "signout", form.get("token", ""))
        except NotPermitted as error:
            return _page(request, "error.html", {"title": "Refused", "message": str(error),
                                                 "back": "/"}, 403)  # fmt: skip
        await request.app.state.sessions.end(session)
    response = RedirectResponse("/signin", status_code=303)
    response.delete_cookie(COOKIE)
    return response


def _secure(request: Request) -> bool:
    """Whether the session cookie is Secure: as set, else when the request came over
    HTTPS (uvicorn takes the scheme from a trusted proxy's X-Forwarded-Proto)."""
    setting = _settings(request).secure_cookie
    return request.url.scheme == "https" if setting is None else setting


def _local(target: str) -> str:
    """Only same-site paths after sign-in (no open redirect)."""
    return target if target.startswith("/") and not target.startswith("//") else "/"
