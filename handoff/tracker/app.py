"""The tracker's ASGI application: ``create_app()``, served by ``handoff serve``."""

from __future__ import annotations

import asyncio
import gc
import hmac
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from datetime import timedelta
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from psycopg_pool import AsyncConnectionPool

import handoff
from handoff.core.db import PING
from handoff.core.errors import DatabaseUnavailable, Unauthenticated
from handoff.core.settings import HandoffSettings, load_settings
from handoff.tracker import (
    emit_api,
    http_errors,
    lag_sampler,
    lag_sql,
    openapi,
    query_api,
    read_sql,
    ui,
)
from handoff.tracker.headers import ResponseHeaders, security_headers
from handoff.tracker.limits import BodyLimits
from handoff.tracker.read_model import ReadModel
from handoff.tracker.request_ids import request_id_header
from handoff.tracker.request_metrics import RequestMetrics
from handoff.tracker.sessions import Sessions
from handoff.tracker.settings import TrackerSettings

log = logging.getLogger("handoff.tracker")


YAML = "application/yaml"
FOLD_LIMIT = 100_000  # outbox rows per flow fold; a backlog is folded in several


async def _maintain_forever(
    pool: AsyncConnectionPool[Any], tracker: TrackerSettings, sessions: Sessions
) -> None:
    """Keep the read side's folded rows current: flow, minute samples, deadline hours;
    and delete ended web UI sessions.

    A missed round only makes pages staler or counts slower, never wrong; the
    next round catches up (several trackers: one folds, the others skip).
    """
    loop = asyncio.get_running_loop()
    next_due_fold = loop.time()
    while True:
        try:
            async with pool.connection() as conn:
                while True:  # a backlog of outbox rows: fold until caught up
                    cur = await conn.execute(read_sql.FOLD_FLOW, {"limit": FOLD_LIMIT})
                    row = await cur.fetchone()
                    if row is None or row[0] < FOLD_LIMIT:
                        break
                await conn.execute(read_sql.SAMPLE_OWNERS)
                if loop.time() >= next_due_fold:
                    await conn.execute(read_sql.FOLD_DUE_COUNTS)
                    next_due_fold = loop.time() + tracker.fold_interval_s
                    await sessions.purge()
        except Exception as exc:
            log.warning("read-side maintenance failed (will retry): %s", exc)
        await asyncio.sleep(tracker.flow_interval_s)


def create_app(
    settings: HandoffSettings | None = None,
    *,
    pool_size: int = 16,
    tracker: TrackerSettings | None = None,
    topics_document: str | None = None,
) -> FastAPI:
    """The API and UI; ``topics_document`` is the AsyncAPI YAML served at /asyncapi.yaml
    (the composition root builds it from the relay's settings: cli/bootstrap.py)."""
    settings = settings or load_settings()
    tracker = tracker or TrackerSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            settings.database_url,
            min_size=2,
            max_size=pool_size,
            kwargs={"autocommit": True},
            open=False,
            name="tracker",
        )
        await pool.open(wait=True, timeout=15)
        app.state.pool = pool
        async with pool.connection() as conn:
            row = await (await conn.execute(read_sql.BYTE_ORDER)).fetchone()
        app.state.read_model = ReadModel(pool, byte_order=bool(row and row[0]))
        app.state.tracker_settings = tracker
        app.state.settings = settings
        cluster = app.state.kafka_cluster = lag_sql.cluster_of(settings.kafka_bootstrap)
        app.state.sessions = Sessions(
            pool,
            lifetime=timedelta(seconds=tracker.session_lifetime_s),
            idle=timedelta(seconds=tracker.session_idle_s),
        )
        folding = asyncio.create_task(_maintain_forever(pool, tracker, app.state.sessions))

        async def lag_failed(why: str) -> None:
            async with pool.connection(timeout=5) as conn:
                await conn.execute(lag_sql.FAILING, {"cluster": cluster, "error": why})

        sampling = (
            asyncio.create_task(lag_sampler.supervise(settings, tracker, lag_failed))
            if tracker.lag_interval_s > 0
            else None
        )
        # Everything made so far (the app, its routes, templates, models) lives
        # as long as the process: out of the collector's way, so a full
        # collection during a request scans only what requests made.
        gc.freeze()
        try:
            yield
        finally:
            for task in (folding, sampling):
                if task is not None:
                    task.cancel()
                    with suppress(asyncio.CancelledError):
                        await task
            await pool.close()

    # FastAPIOffline serves the Swagger UI and ReDoc assets from its package,
    # not from a CDN: /docs works on an offline or on-prem machine.
    app = FastAPIOffline(
        # The docs pages are the tracker's own (ui.py), without inline script;
        # FastAPIOffline still serves their assets from its package.
        docs_url=None,
        redoc_url=None,
        title="Handoff",
        version=handoff.__version__,
        description="Explicit service ownership of work: emit handoffs, query where work is.",
        lifespan=lifespan,
    )
    app.openapi = lambda: openapi.document(app)  # type: ignore[method-assign]
    http_errors.install(app, ui.error_page)
    app.add_middleware(
        BodyLimits, max_json_bytes=tracker.max_json_bytes, max_form_bytes=tracker.max_form_bytes
    )
    app.add_middleware(ResponseHeaders, headers=security_headers)
    app.add_middleware(RequestMetrics)
    # outermost: every answer has its request id
    app.add_middleware(ResponseHeaders, headers=request_id_header)
    app.include_router(emit_api.router)
    app.include_router(query_api.router)
    app.include_router(ui.router)
    app.mount("/static", StaticFiles(directory=ui.STATIC), name="static")

    @app.get("/healthz", tags=["ops"], summary="Liveness, with a database round trip")
    async def healthz(request: Request) -> JSONResponse:
        try:
            async with request.app.state.pool.connection(timeout=2) as conn:
                await conn.execute(PING)
        except Exception as exc:
            raise DatabaseUnavailable(f"database check failed: {exc}") from exc
        return JSONResponse({"status": "ok"})

    @app.get(
        "/metrics",
        tags=["ops"],
        summary="Prometheus metrics",
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {}}}},
    )
    async def metrics(request: Request) -> Response:
        if tracker.metrics_token is not None:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {tracker.metrics_token}".encode()):
                raise Unauthenticated("/metrics needs Authorization: Bearer <metrics token>")
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    if topics_document is not None:
        document = topics_document

        @app.get(
            "/asyncapi.yaml",
            tags=["ops"],
            summary="The AsyncAPI 3 document of the topics the relay publishes",
            response_class=Response,
            responses={200: {"content": {YAML: {}}}},
        )
        async def asyncapi_document() -> Response:
            return Response(document, media_type=YAML)

    return app
