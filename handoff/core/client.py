"""``HandoffClient``: one API over HTTP or straight against PostgreSQL.

    client = HandoffClient.direct(credential)            # as the service's own DB role
    client = HandoffClient.http("http://127.0.0.1:8000", credential)
    receipt = client.emit(event_id=..., event_type="approved", document_id="invoice-42",
                          next_owner="finalization", status="approved", expected_version=7)

Both return a ``Receipt`` or raise the typed errors of ``handoff.core.errors``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol
from urllib.parse import quote

import httpx
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool, PoolTimeout

from handoff.core import trace_context
from handoff.core.calls import Calls
from handoff.core.emitter import Request, emit_direct, own_tenant
from handoff.core.errors import (
    DatabaseUnavailable,
    OutcomeUnknown,
    TransientConflict,
    Unauthenticated,
    Unavailable,
    contract_error,
)
from handoff.core.identity import Credential
from handoff.core.models import (
    CreateRequest,
    HandoffRequest,
    Receipt,
)
from handoff.core.retry import CONFLICTS
from handoff.core.settings import load_settings


class Transport(Protocol):
    def send(self, request: Request, document_id: str | None = None) -> Receipt: ...

    def close(self) -> None: ...


class DirectTransport:
    """Calls the emit function over a small pool of connections as the service's role.

    Serialization failures and deadlocks that reach the transaction are
    retried here with the identical request (same event id), never surfaced.
    """

    def __init__(self, conninfo: str, *, pool_size: int = 4, conflict_retries: int = 10) -> None:
        self._pool: ConnectionPool[Any] = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True},
            open=False,
            name="handoff-client",
        )
        self._retries = conflict_retries
        self._tenant: str | None = None  # the service's, learned at the first emit
        try:
            self._pool.open(wait=True, timeout=10)
        except PoolTimeout as exc:
            self._pool.close()
            raise DatabaseUnavailable(
                f"could not connect to PostgreSQL at {_where(conninfo)}: check the credential "
                "and HANDOFF_DATABASE_URL"
            ) from exc

    def send(self, request: Request, document_id: str | None = None) -> Receipt:
        def once() -> Receipt:
            try:
                conn = self._pool.getconn()
            except PoolTimeout as exc:
                # No server took a session (a failover in progress, say): nothing was
                # sent, so the identical request may simply be sent again.
                raise DatabaseUnavailable(
                    f"no PostgreSQL session within {self._pool.timeout:.0f} s: {exc}"
                ) from exc
            try:
                if self._tenant is None:
                    self._tenant = own_tenant(conn)
                # The caller's span, if it traces (its own OpenTelemetry or Handoff's).
                trace = trace_context.caller_traceparent()
                return emit_direct(conn, request, document_id, tenant=self._tenant, trace=trace)
            finally:
                self._pool.putconn(conn)

        return replace(CONFLICTS, attempts=self._retries).run(once, retry_on=(TransientConflict,))

    def close(self) -> None:
        self._pool.close()


class HttpTransport:
    """Calls the tracker's emit endpoints with the service's bearer credential."""

    def __init__(self, base_url: str, credential: Credential, *, timeout_s: float = 10.0) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {credential.token}"},
            timeout=timeout_s,
        )

    def send(self, request: Request, document_id: str | None = None) -> Receipt:
        if isinstance(request, HandoffRequest):
            path = "/v1/handoffs"
        elif isinstance(request, CreateRequest):
            path = "/v1/documents"
        else:
            # one path segment whatever the id holds (?, #, %, unicode)
            path = f"/v1/documents/{quote(document_id or '', safe='')}/runs"
        body = request.model_dump(mode="json", by_alias=True)
        try:
            response = self._http.post(path, json=body, headers=trace_context.caller_headers())
        except httpx.ConnectError as exc:
            raise Unavailable(f"cannot reach {self._http.base_url}: {exc}") from exc
        except httpx.HTTPError as exc:  # sent, but no answer: it may have been applied
            raise OutcomeUnknown(
                f"no answer from {self._http.base_url} ({type(exc).__name__}); "
                "retry the identical request with the same event id"
            ) from exc
        if response.status_code in (200, 201):
            return Receipt.model_validate(
                {**response.json(), "replayed": response.status_code == 200}
            )
        raise _http_error(response)

    def close(self) -> None:
        self._http.close()


def _http_error(response: httpx.Response) -> Exception:
    try:
        body = response.json()
    except ValueError:
        body = {}
    message = str(body.get("message") or response.text[:300])
    if response.status_code >= 500:
        return OutcomeUnknown(f"server error {response.status_code}: {message}")
    if response.status_code == 401:
        return Unauthenticated(message)
    return contract_error({**body, "message": message})


def _where(conninfo: str) -> str:
    parts = conninfo_to_dict(conninfo)
    return f"{parts.get('host', '?')}:{parts.get('port', '5432')}/{parts.get('dbname', '?')}"


class HandoffClient(Calls[Receipt]):
    """Create documents and hand them off, as one service."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    @classmethod
    def direct(
        cls, credential: str | Credential, database_url: str | None = None, *, pool_size: int = 4
    ) -> HandoffClient:
        """Connect to PostgreSQL as the service's own role (host and database from settings)."""
        cred = credential if isinstance(credential, Credential) else Credential.parse(credential)
        base = database_url or load_settings().database_url
        conninfo = make_conninfo(base, user=cred.role, password=cred.secret)
        return cls(DirectTransport(conninfo, pool_size=pool_size))

    @classmethod
    def http(
        cls, base_url: str, credential: str | Credential, *, timeout_s: float = 10.0
    ) -> HandoffClient:
        """Talk to ``handoff serve``; a timeout raises ``OutcomeUnknown``."""
        cred = credential if isinstance(credential, Credential) else Credential.parse(credential)
        return cls(HttpTransport(base_url, cred, timeout_s=timeout_s))

    def _send(self, request: Request, document_id: str | None = None) -> Receipt:
        return self._transport.send(request, document_id)

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> HandoffClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
