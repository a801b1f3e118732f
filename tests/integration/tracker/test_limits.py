"""Bounded requests, against a ``handoff serve`` of this module's own: bodies over the
limit answered 413 before they are read (by Content-Length, or counted when chunked),
request heads bounded in time (408) and size (431), malformed JSON a 400 with its code,
and the server's memory flat under large bodies."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import psutil
import pytest

from handoff.core.identity import Credential
from handoff.stack.layout import pick_port
from handoff.stack.local import LocalStack
from tests.fix_contract import ServiceFactory, serving

TEN_MB = 10 * 1024 * 1024


@pytest.fixture(scope="module")
def server(migrated: Any, local_stack: LocalStack) -> Iterator[tuple[str, psutil.Process]]:
    port = pick_port(18700, set())
    with serving(
        local_stack, "limits-api", ["serve", "--port", str(port)], port=port,
        HANDOFF_TRACKER_HEADER_TIMEOUT_S="1",
    ) as proc:  # fmt: skip
        yield f"http://127.0.0.1:{port}", psutil.Process(proc.pid)


@pytest.fixture
def url(server: tuple[str, psutil.Process]) -> str:
    return server[0]


@pytest.fixture
def writer(service: ServiceFactory) -> Credential:
    return service("intake", can_create=True)


def _raw(url: str, head: bytes, body: bytes = b"", *, wait_s: float = 10) -> bytes:
    """Send ``head`` and ``body`` on a socket of its own; what the server answers."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait_s) as sock:
        sock.sendall(head + body)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
        return answer


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def test_a_large_form_is_413_before_its_body_arrives(url: str) -> None:
    # Headers announce 10 MB; only 1 KB is sent: the answer cannot wait for the rest.
    head = (f"POST /signin HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-"
            f"urlencoded\r\nContent-Length: {TEN_MB}\r\n\r\n").encode()  # fmt: skip
    assert _status(_raw(url, head, b"a=1&" * 256)) == 413


def test_a_large_emit_is_413_with_its_code(url: str, writer: Credential) -> None:
    body = b'{"eventId": "' + b"x" * (2 * 1024 * 1024) + b'"}'
    headers = {"Authorization": f"Bearer {writer.token}", "Content-Type": "application/json"}
    answer = httpx.post(f"{url}/v1/documents", content=body, headers=headers, timeout=15)
    assert answer.status_code == 413
    assert answer.json()["code"] == "ContentTooLarge"

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while read
        yield b'{"eventId": "'
        for _ in range(40):
            yield b"x" * 65536
        yield b'"}'

    answer = httpx.post(f"{url}/v1/documents", content=chunks(), headers=headers, timeout=15)
    assert answer.status_code == 413


def test_bodies_within_the_limit_are_served(url: str, writer: Credential) -> None:
    body = {"eventId": str(uuid.uuid4()), "documentId": "d-1", "owner": "intake",
            "status": "new", "data": {"note": "y" * 60_000}}  # fmt: skip
    headers = {"Authorization": f"Bearer {writer.token}"}
    assert httpx.post(f"{url}/v1/documents", json=body, headers=headers).status_code == 201


def test_many_large_bodies_leave_memory_flat_and_the_server_answering(
    server: tuple[str, psutil.Process], writer: Credential
) -> None:
    url, proc = server
    before = proc.memory_info().rss
    headers = {"Authorization": f"Bearer {writer.token}", "Content-Type": "application/json"}
    big = b'{"eventId": "' + b"x" * TEN_MB + b'"}'
    form = {"Content-Type": "application/x-www-form-urlencoded"}

    def emit(_: int) -> int:
        try:
            return httpx.post(f"{url}/v1/documents", content=big, headers=headers,
                              timeout=30).status_code  # fmt: skip
        except httpx.HTTPError:  # the server may close before taking all 10 MB
            return 413

    def sign_in(_: int) -> int:
        try:
            return httpx.post(f"{url}/signin", content=b"a=1&" * (TEN_MB // 4), headers=form,
                              timeout=30).status_code  # fmt: skip
        except httpx.HTTPError:
            return 413

    with ThreadPoolExecutor(24) as pool:
        emits = pool.map(emit, range(20))
        forms = pool.map(sign_in, range(4))
        assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
        assert set(emits) == {413} and set(forms) == {413}
    grown = (proc.memory_info().rss - before) / 2**20
    assert grown < 40, f"the server grew by {grown:.0f} MiB on bodies it refused"


def test_malformed_json_is_400_with_its_code(url: str, writer: Credential) -> None:
    headers = {"Authorization": f"Bearer {writer.token}", "Content-Type": "application/json"}
    answer = httpx.post(f"{url}/v1/documents", content=b'{"eventId": ', headers=headers)
    assert answer.status_code == 400
    assert answer.json()["code"] == "MalformedJson"


def test_a_head_that_trickles_is_408(url: str) -> None:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        answer = b""
        for _ in range(20):  # a header line every half second: never complete
            try:
                sock.sendall(b"X-Slow: 1\r\n")
            except OSError:
                break
            sock.settimeout(0.5)
            try:
                chunk = sock.recv(4096)
            except TimeoutError:
                continue
            answer += chunk
            if not chunk or b"\r\n\r\n" in answer:
                break
    assert _status(answer) == 408, answer[:200]
    assert time.monotonic() - started < 9  # closed by the 1 s limit, not by the test's loop


def test_a_connection_that_sends_nothing_is_closed(url: str) -> None:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        answer = sock.recv(4096)  # blocks until the server answers and closes
    assert _status(answer) == 408


def test_a_huge_head_is_431(url: str) -> None:
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Big: " + b"y" * 70_000 + b"\r\n\r\n"
    assert _status(_raw(url, head)) == 431
    many = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-A: 1\r\n" * 9000 + b"\r\n"
    assert _status(_raw(url, many)) == 431
    assert httpx.get(f"{url}/healthz").status_code == 200
