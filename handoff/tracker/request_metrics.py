"""Every HTTP answer's latency by route, method and status (``handoff_http_request_seconds``).

The route is the path's template (``/v1/documents/{document_id}``), never the
path itself: a label per document would grow without bound. A request no
route matched (a 404 of the router, a static file's miss) is ``unmatched``.
Pure ASGI, like headers.py: it runs on every emit, and a BaseHTTPMiddleware
would cost each request a task.
"""

from __future__ import annotations

import time

from prometheus_client import Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

REQUEST_SECONDS = Histogram(
    "handoff_http_request_seconds",
    "HTTP answers by route template, method and status code, from the request's start "
    "to the answer's last byte",
    ["route", "method", "status"],
    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
UNMATCHED = "unmatched"


class RequestMetrics:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the server answers when the app fails before its answer

        async def noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, noting_status)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or UNMATCHED
            REQUEST_SECONDS.labels(template, scope["method"], str(status)).observe(
                time.perf_counter() - started
            )
