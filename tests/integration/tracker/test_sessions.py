"""Web UI sessions through a real ``handoff serve``: the cookie holds an opaque id, never
the credential; sign-in and sign-out cannot be forged; sign-out, rotation, revocation,
removal, the idle timeout and the expiry end a session; every answer carries the security
headers; the cookie is Secure behind an HTTPS proxy; /metrics may require a token."""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import psycopg
import pytest

from handoff.core.identity import Credential
from handoff.core.services import remove_service, revoke_service, rotate_service
from handoff.stack.layout import pick_port
from handoff.stack.local import LocalStack
from handoff.tracker import session_sql
from handoff.tracker.headers import CSP
from handoff.tracker.sessions import COOKIE
from tests.fix_contract import ServiceFactory, serving, signed_in


@pytest.fixture
def viewer(service: ServiceFactory) -> Credential:
    return service("viewer")


def _signed_out(client: httpx.Client) -> bool:
    answer = client.get("/")
    return answer.status_code == 303 and answer.headers["location"].startswith("/signin")


def test_the_cookie_holds_an_opaque_id_and_the_database_only_its_hash(
    api_url: str, viewer: Credential, admin: psycopg.Connection[Any], tenant: str
) -> None:
    with signed_in(api_url, viewer) as ui:
        cookie = ui.cookies[COOKIE]
        assert viewer.secret not in cookie and viewer.role not in cookie
        assert len(cookie) >= 40
        assert ui.get("/").status_code == 200
        assert ui.get("/v1/owners").status_code == 200  # the API's reads take it too
        rows = admin.execute(
            "SELECT id_hash FROM handoff.ui_sessions WHERE tenant_id = %s", (tenant,)
        ).fetchall()
        assert rows == [(hashlib.sha256(cookie.encode()).digest(),)]
        assert "handoff_credential" not in ui.cookies


def test_a_sign_in_without_the_forms_value_is_refused(api_url: str, viewer: Credential) -> None:
    # Another site can post the form, but cannot know the value in the sign-in cookie.
    with httpx.Client(base_url=api_url) as browser:
        forged = browser.post("/signin", data={"credential": viewer.token, "signin": "guess"})
        assert forged.status_code == 403 and COOKIE not in forged.cookies
        browser.get("/signin")  # the cookie is set, but the form's value is missing
        forged = browser.post("/signin", data={"credential": viewer.token})
        assert forged.status_code == 403 and COOKIE not in forged.cookies


def test_sign_out_needs_the_sessions_token_and_ends_the_session(
    api_url: str, viewer: Credential, admin: psycopg.Connection[Any], tenant: str
) -> None:
    with signed_in(api_url, viewer) as ui:
        forged = ui.post("/signout", data={"token": "0" * 64})
        assert forged.status_code == 403 and not _signed_out(ui)
        token = re.search(r'name="token" value="([0-9a-f]{64})"', ui.get("/").text)
        assert token, "no sign-out form on the page"
        kept = ui.cookies[COOKIE]
        assert ui.post("/signout", data={"token": token.group(1)}).status_code == 303
        ui.cookies.set(COOKIE, kept)  # the old id, replayed: it ended
        assert _signed_out(ui)
    left = admin.execute("SELECT count(*) FROM handoff.ui_sessions WHERE tenant_id = %s",
                         (tenant,)).fetchone()  # fmt: skip
    assert left == (0,)


@pytest.mark.parametrize("change", ["rotate", "revoke", "remove"])
def test_rotating_revoking_or_removing_the_service_ends_its_sessions(
    api_url: str, viewer: Credential, admin: psycopg.Connection[Any], tenant: str, change: str
) -> None:
    acts: dict[str, Callable[..., Any]] = {
        "rotate": rotate_service, "revoke": revoke_service, "remove": remove_service,
    }  # fmt: skip
    with signed_in(api_url, viewer) as ui:
        assert not _signed_out(ui)
        acts[change](admin, "viewer", tenant=tenant)
        assert _signed_out(ui)


@pytest.mark.parametrize(
    "expire",
    [
        "UPDATE handoff.ui_sessions SET last_seen_at = now() - interval '2 hours'",
        "UPDATE handoff.ui_sessions SET expires_at = now() - interval '1 second'",
    ],
)
def test_an_idle_or_expired_session_ends(
    api_url: str, viewer: Credential, admin: psycopg.Connection[Any], tenant: str, expire: str
) -> None:
    with signed_in(api_url, viewer) as ui:
        assert not _signed_out(ui)
        admin.execute(f"{expire} WHERE tenant_id = %s", (tenant,))  # type: ignore[arg-type]
        assert _signed_out(ui)
    # The ended session's row stays until the tracker's sweep deletes it (on Citus
    # too, where the sweep's first form was refused).
    count = "SELECT count(*) FROM handoff.ui_sessions WHERE tenant_id = %s"
    assert admin.execute(count, (tenant,)).fetchone() == (1,)
    admin.execute(session_sql.PURGE)
    assert admin.execute(count, (tenant,)).fetchone() == (0,)


@pytest.mark.parametrize("path", ["/", "/signin", "/v1/owners", "/docs", "/redoc",
                                  "/static/tracker.js", "/no/such/page", "/healthz"])  # fmt: skip
def test_every_answer_has_the_security_headers(api_url: str, viewer: Credential, path: str) -> None:
    with signed_in(api_url, viewer) as ui:
        answer = ui.get(path)
    assert answer.headers["content-security-policy"] == CSP
    assert "script-src 'self';" in CSP and "frame-ancestors 'none'" in CSP
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["referrer-policy"] == "same-origin"
    assert answer.headers["x-frame-options"] == "DENY"
    if answer.headers.get("content-type", "").startswith("text/html"):
        # No inline script anywhere: every <script> has a src.
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", answer.text), answer.text[:500]


def test_the_cookie_is_secure_behind_an_https_proxy(api_url: str, viewer: Credential) -> None:
    plain = httpx.get(f"{api_url}/signin")
    assert "secure" not in plain.headers["set-cookie"].lower()
    proxied = {"X-Forwarded-Proto": "https"}  # from 127.0.0.1: a trusted proxy
    page = httpx.get(f"{api_url}/signin", headers=proxied)
    assert "secure" in page.headers["set-cookie"].lower()
    value = re.search(r'name="signin" value="([^"]+)"', page.text)
    assert value
    # As a browser behind the proxy would send it (httpx keeps Secure cookies off http).
    headers = {**proxied, "Cookie": f"handoff_signin={value.group(1)}"}
    answer = httpx.post(f"{api_url}/signin", headers=headers,
                        data={"credential": viewer.token, "signin": value.group(1)})  # fmt: skip
    assert answer.status_code == 303
    cookie = next(c for c in answer.headers.get_list("set-cookie") if c.startswith(COOKIE))
    assert "secure" in cookie.lower() and "httponly" in cookie.lower()
    assert "samesite=strict" in cookie.lower()
    assert answer.headers["strict-transport-security"].startswith("max-age=")


def test_metrics_may_require_a_token(local_stack: LocalStack, migrated: Any) -> None:
    port, token = pick_port(18790, set()), uuid.uuid4().hex
    with serving(local_stack, "metrics-api", ["serve", "--port", str(port)], port=port,
                 HANDOFF_TRACKER_METRICS_TOKEN=token):  # fmt: skip
        url = f"http://127.0.0.1:{port}/metrics"
        assert httpx.get(url).status_code == 401
        assert (
            httpx.get(url, headers={"Authorization": "Bearer wrong-token-wrong"}).status_code == 401
        )
        answer = httpx.get(url, headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 200 and "handoff_emits_total" in answer.text
