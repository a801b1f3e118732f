"""``handoff sandbox-provider``: the sandbox payments API over HTTP.

    POST /v1/payments                  Idempotency-Key header; {amount, currency, reference,
                                       description?, metadata?} -> 201 (402 when declined)
    GET  /v1/payments/by-key/{key}     the status lookup: the payment made with that key, or 404
    GET  /v1/payments?reference=R      payments, oldest first (evidence for a rehearsal)
    POST /_sandbox/faults              arm a fault (sandbox/faults.py); GET lists, DELETE clears
    GET  /healthz

Built on the standard library's threading HTTP server rather than an ASGI
stack because two of its faults need the socket itself: "drop" closes the
connection after the payment is made and before any byte of the answer,
and "refuse" closes the listening socket, so callers meet a real
ECONNREFUSED, not an error page.
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import orjson

from handoff.sandbox.errors import SandboxRefusal
from handoff.sandbox.faults import ON_PAYMENT, Fault, Faults, from_header, parse
from handoff.sandbox.store import Store, fingerprint

log = logging.getLogger("handoff.sandbox")

KEY = re.compile(r"^[\x21-\x7e]{1,255}$")
CURRENCY = re.compile(r"^[A-Z]{3}$")
PAYMENT_FIELDS = {"amount", "currency", "reference", "description", "metadata"}


def _whole(text: str, name: str, low: int, high: int) -> int:
    if not (text.isascii() and text.isdigit() and len(text) <= 19) or not low <= int(text) <= high:
        raise SandboxRefusal(f"{name} must be a whole number from {low} to {high}")
    return int(text)


def validate_payment(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise SandboxRefusal("the body must be a JSON object")
    unknown = set(body) - PAYMENT_FIELDS
    if unknown:
        raise SandboxRefusal(
            f"unknown fields: {', '.join(sorted(unknown))}",
        )
    amount = body.get("amount")
    if not isinstance(amount, int) or isinstance(amount, bool) or not 0 < amount <= 10**12:
        raise SandboxRefusal(
            "amount must be an integer from 1 to 10^12 (minor units)",
        )
    if not isinstance(body.get("currency"), str) or not CURRENCY.match(body["currency"]):
        raise SandboxRefusal(
            "currency must be three capital letters, e.g. EUR",
        )
    reference = body.get("reference")
    if not isinstance(reference, str) or not 1 <= len(reference) <= 500:
        raise SandboxRefusal(
            "reference must be a string of 1-500 characters",
        )
    if "metadata" in body and not isinstance(body["metadata"], dict):
        raise SandboxRefusal("metadata must be a JSON object")
    return body


class Sandbox:
    """The server: a listener that can be taken down and brought back (``refuse``)."""

    def __init__(self, host: str, port: int, data: Path, *, latency_ms: int = 0) -> None:
        self.host, self.port = host, port
        self.store = Store(data / "payments.sqlite3")
        self.faults = Faults()
        self.latency_s = latency_ms / 1000
        self._server: _Server | None = None
        self._stopping = threading.Event()
        self._refusing_until = 0.0
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.clients_gone = 0  # answers whose client had closed the connection
        self.bind()

    def bind(self) -> None:
        self._server = _Server((self.host, self.port), _Handler, self)
        self.port = self._server.server_address[1]  # a port of 0 is chosen once, then kept

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def serve(self) -> None:
        while not self._stopping.is_set():
            assert self._server is not None
            self._server.serve_forever(poll_interval=0.1)
            self._server.server_close()
            self._server = None
            wait = self._refusing_until - time.monotonic()
            if self._stopping.wait(max(wait, 0)):
                return
            self.bind()
            log.info("accepting connections again on %s", self.url)

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
        self.store.close()

    def refuse(self, for_s: float) -> None:
        """Close the listening socket and every open connection for ``for_s`` seconds."""
        self._refusing_until = time.monotonic() + for_s
        log.warning("refusing connections for %.1f s (fault)", for_s)
        server = self._server
        if server is not None:
            threading.Thread(target=server.shutdown, daemon=True).start()
        with self._lock:
            for conn in list(self._connections):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)

    def track(self, conn: socket.socket, open_: bool) -> None:
        with self._lock:
            (self._connections.add if open_ else self._connections.discard)(conn)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # keep-alive connections must not hold a shutdown up

    def __init__(self, address: tuple[str, int], handler: type, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up waiting (its timeout) closed the socket under the
        # answer: an everyday event for a provider, counted, not a traceback each.
        problem = sys.exc_info()[1]
        if isinstance(problem, ConnectionError):
            self.sandbox.clients_gone += 1
            log.debug("client %s went away before its answer: %s", client_address, problem)
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # Headers and body go out as two writes: with Nagle's algorithm and
        # the client's delayed ACK, every answer would wait ~40 ms (measured).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.sandbox.track(self.connection, True)

    def finish(self) -> None:
        self.server.sandbox.track(self.connection, False)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.client_address[0], *args)

    # -- plumbing ----------------------------------------------------------------

    def _answer(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = orjson.dumps(body)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        if length > 1_000_000:
            raise SandboxRefusal("the body is larger than 1 MB", status=413, code="TooLarge")
        raw = self.rfile.read(length) if length else b""
        try:
            return orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError as exc:
            raise SandboxRefusal(f"the body is not JSON: {exc}") from exc

    def _route(self, method: str) -> None:
        url = urlsplit(self.path)
        try:
            handler = ROUTES.get((method, url.path))
            if handler is None and method == "GET" and url.path.startswith(BY_KEY):
                self._lookup(unquote(url.path[len(BY_KEY) :]))
                return
            if handler is None:
                raise SandboxRefusal(f"no route {method} {url.path}", status=404, code="NotFound")
            handler(self, parse_qs(url.query))
        except SandboxRefusal as exc:
            self._answer(exc.status, {"code": exc.answer_code, "message": str(exc)})

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    # -- the API -------------------------------------------------------------------

    def _pay(self, _query: dict[str, list[str]]) -> None:
        sandbox = self.server.sandbox
        key = self.headers.get("Idempotency-Key")
        if key is None or not KEY.match(key):
            raise SandboxRefusal(
                "an Idempotency-Key header of 1-255 visible characters",
            )
        request = validate_payment(self._body())
        header = self.headers.get("Sandbox-Fault")
        fault: Fault | None = from_header(header) if header else None  # InvalidFault: 400
        fault = fault or sandbox.faults.take(ON_PAYMENT, request["reference"])
        if sandbox.latency_s:
            time.sleep(sandbox.latency_s)
        if fault and fault.kind == "delay":
            time.sleep(fault.delay_ms / 1000)
        if fault and fault.kind == "error":
            self._answer(503, {"code": "Unavailable", "message": "injected fault: not processed"})
            return
        existing = sandbox.store.by_key(key)
        if existing is not None and existing.fingerprint != fingerprint(request):
            raise SandboxRefusal(
                f"key {key} was used with other parameters (payment {existing.id})",
                status=409,
                code="IdempotencyKeyReuse",
            )
        payment, created = sandbox.store.create(
            key, request, declined=bool(fault and fault.kind == "decline")
        )
        if created and (trace := self.headers.get("traceparent")):
            # A real provider would continue the trace; the sandbox says which it was in.
            log.info("payment %s made in trace context %s", payment.id, trace[:55])
        if fault and fault.kind == "drop":
            log.warning("payment %s made; dropping the answer (fault)", payment.id)
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if not created and payment.fingerprint != fingerprint(request):
            raise SandboxRefusal(
                f"key {key} was used with other parameters", status=409, code="IdempotencyKeyReuse"
            )
        headers = {} if created else {"Idempotent-Replayed": "true"}
        status = payment.http_status if created or payment.http_status != 201 else 200
        self._answer(status, payment.body(), headers)

    def _lookup(self, key: str) -> None:
        sandbox = self.server.sandbox
        if sandbox.faults.take(("lookup_error",), None):
            self._answer(503, {"code": "Unavailable", "message": "injected fault: lookup failed"})
            return
        payment = sandbox.store.by_key(key)
        if payment is None:
            raise SandboxRefusal(f"no payment was made with key {key}", status=404, code="NotFound")
        self._answer(200, payment.body())

    def _list(self, query: dict[str, list[str]]) -> None:
        """Payments in the order they were made; ``next`` is the ``after`` of the next page
        (null on the last)."""
        reference = query.get("reference", [None])[0]
        limit = _whole(query.get("limit", ["100"])[0] or "100", "limit", 1, 1000)
        after = _whole(query.get("after", ["0"])[0] or "0", "after", 0, 2**63 - 1)
        payments, last = self.server.sandbox.store.list(reference, limit, after)
        more = len(payments) == limit
        self._answer(200, {"payments": [p.body() for p in payments],
                           "next": str(last) if more else None})  # fmt: skip

    def _arm(self, _query: dict[str, list[str]]) -> None:
        fault = parse(self._body())  # InvalidFault: 400
        if fault.kind == "refuse":  # answered first: refusing closes the very port
            self._answer(201, fault.to_json())
            self.close_connection = True
            self.server.sandbox.refuse(fault.for_s)
            return
        # Armed before the answer: a caller's next request must meet it (answering
        # first let a quick payment slip past its fault, seen once in a full run).
        self.server.sandbox.faults.arm(fault)
        self._answer(201, fault.to_json())

    def _faults(self, _query: dict[str, list[str]]) -> None:
        self._answer(200, {"faults": self.server.sandbox.faults.listing()})

    def _clear(self, _query: dict[str, list[str]]) -> None:
        self._answer(200, {"cleared": self.server.sandbox.faults.clear()})

    def _health(self, _query: dict[str, list[str]]) -> None:
        sandbox = self.server.sandbox
        self._answer(200, {"status": "ok", "payments": sandbox.store.count(),
                           "clientsGone": sandbox.clients_gone})  # fmt: skip


BY_KEY = "/v1/payments/by-key/"
ROUTES = {
    ("POST", "/v1/payments"): _Handler._pay,
    ("GET", "/v1/payments"): _Handler._list,
    ("POST", "/_sandbox/faults"): _Handler._arm,
    ("GET", "/_sandbox/faults"): _Handler._faults,
    ("DELETE", "/_sandbox/faults"): _Handler._clear,
    ("GET", "/healthz"): _Handler._health,
}
