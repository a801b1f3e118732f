"""Serving the tracker: uvicorn, with the limits a server facing untrusted clients needs.

Bodies are bounded by the application (limits.py): a request that says or
sends more is answered 413 before the body is read.
What uvicorn's HTTP protocol lacks is a bound on the request head, so this
module adds two, on the same httptools protocol uvicorn runs by default:

- the request line and headers must arrive within ``header_timeout_s`` of the
  request's first byte (or of the connection's opening): a client that trickles
  a header a byte at a time (slowloris) is answered 408 and disconnected,
  instead of holding a connection and its buffers for ever;
- they must fit in ``max_header_bytes``: more is answered 431.

Both answers are written by the protocol itself, before any application code
runs, and close the connection.
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from handoff.tracker.settings import TrackerSettings

_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


class _HeadTooLarge(Exception):
    """Raised from a parser callback: httptools stops and uvicorn answers (see below)."""


class BoundedHead(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline and a size limit on the request head."""

    header_timeout_s = 10.0
    max_header_bytes = 16 * 1024

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0
        self._refusal: int | None = None

    # -- the deadline ------------------------------------------------------------------

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_too_slow)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self._refuse(408, "the request's headers did not arrive in time")

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()  # a connection that never sends a request is closed as well

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = 0
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    # -- the size ----------------------------------------------------------------------

    def _count(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > self.max_header_bytes:
            self._refusal = 431
            raise _HeadTooLarge

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        super().on_header(name, value)

    def send_400_response(self, msg: str) -> None:
        # uvicorn answers 400 to any parser error; one raised by _count is a 431.
        if self._refusal is None:
            super().send_400_response(msg)
        else:
            self._refuse(self._refusal, "the request line and headers are too large")

    def _refuse(self, status: int, why: str) -> None:
        self._disarm()
        body = why.encode()
        head = [f"HTTP/1.1 {status} ".encode() + _REASONS[status] + b"\r\n"]
        defaults = self.server_state.default_headers  # server, date
        head += [name + b": " + value + b"\r\n" for name, value in defaults]
        head.append(b"content-type: text/plain; charset=utf-8\r\n")
        head.append(b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body))
        self.transport.write(b"".join(head) + body)
        self.transport.close()


def config(app: FastAPI, host: str, port: int, tracker: TrackerSettings) -> uvicorn.Config:
    """uvicorn's configuration for the tracker: the bounded head, proxies as set."""
    protocol = type(
        "TrackerHttp",
        (BoundedHead,),
        {
            "header_timeout_s": tracker.header_timeout_s,
            "max_header_bytes": tracker.max_header_bytes,
        },
    )
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol,
        log_level="warning",
        # uvicorn's records go to the root logger, in the process's one format
        # (HANDOFF_LOG_FORMAT): handoff serve configures it (telemetry/logs.py).
        log_config=None,
        # X-Forwarded-Proto/For are believed only from these addresses (uvicorn's
        # default is 127.0.0.1): a Secure cookie and client addresses behind a proxy.
        proxy_headers=True,
        forwarded_allow_ips=tracker.forwarded_allow_ips,
        timeout_keep_alive=5,
    )


def serve(app: FastAPI, host: str, port: int, tracker: TrackerSettings) -> None:
    uvicorn.Server(config(app, host, port, tracker)).run()
