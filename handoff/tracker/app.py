"""The tracker's ASGI application: ``create_app()``, served by ``handoff serve``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from psycopg_pool import AsyncConnectionPool

import handoff
from handoff.core.db import PING
from handoff.core.errors import DatabaseUnavailable
from handoff.core.settings import HandoffSettings, load_settings
from handoff.tracker import emit_api, http_errors


def create_app(settings: HandoffSettings | None = None, *, pool_size: int = 16) -> FastAPI:
    settings = settings or load_settings()

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
        try:
            yield
        finally:
            await pool.close()

    app = FastAPI(
        title="Handoff",
        version=handoff.__version__,
        description="Explicit service ownership of work: emit handoffs, query where work is.",
        lifespan=lifespan,
    )
    http_errors.install(app)
    app.include_router(emit_api.router)

    @app.get("/healthz", tags=["ops"], summary="Liveness, with a database round trip")
    async def healthz(request: Request) -> JSONResponse:
        try:
            async with request.app.state.pool.connection(timeout=2) as conn:
                await conn.execute(PING)
        except Exception as exc:
            raise DatabaseUnavailable(f"database check failed: {exc}") from exc
        return JSONResponse({"status": "ok"})

    @app.get("/metrics", tags=["ops"], summary="Prometheus metrics")
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return app
