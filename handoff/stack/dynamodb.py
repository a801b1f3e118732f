"""DynamoDB for the AWS twin: moto's server mode, a real HTTP process (Apache-2.0).

Started only on request (``handoff stack up --with dynamodb``). boto3 talks
to it over HTTP as to AWS. It is a functional stand-in: it keeps the
contract's semantics (conditions, transactions, GSIs, streams), not AWS's
performance, so no figure measured on it is presented as DynamoDB's.
DynamoDB Local is not used (its licence).
"""

from __future__ import annotations

import importlib.util
import sys

import httpx

from handoff.core.errors import PrerequisiteMissing
from handoff.stack.layout import pick_port
from handoff.stack.part import Part
from handoff.stack.procs import home_marker, running_pid, spawn, stop_pid

REGION = "eu-west-1"


class DynamoDB(Part):
    name = "dynamodb"

    def _port(self) -> int:
        ports = self.state.ports
        if not ports.dynamodb:  # a stack recorded before DynamoDB existed: choose now
            ports.dynamodb = pick_port(self.layout.settings.dynamodb_port, ports.all())
            self.layout.save_state(self.state)
        return ports.dynamodb

    def url(self) -> str:
        return f"http://127.0.0.1:{self._port()}"

    def address(self) -> str:
        return self.url()

    def prepare(self) -> None:
        if importlib.util.find_spec("moto") is None:
            raise PrerequisiteMissing(
                "DynamoDB for the AWS twin needs moto's server: pip install 'handoff[dynamodb]' "
                "(make setup installs it)"
            )

    def start(self) -> None:
        spawn(
            [
                sys.executable,
                "-m",
                "handoff.stack._moto",
                str(self._port()),
                home_marker(self.layout.home),
            ],
            log=self.log,
            pid_file=self.layout.pid_file(self.name),
            cwd=self.layout.part_dir(self.name),
        )

    def pid(self) -> int | None:
        return running_pid(self.layout.pid_file(self.name), home_marker(self.layout.home))

    def problem(self) -> str | None:
        try:
            answer = httpx.post(
                self.url(),
                timeout=2,
                headers={
                    "X-Amz-Target": "DynamoDB_20120810.ListTables",
                    "Content-Type": "application/x-amz-json-1.0",
                    "Authorization": "AWS4-HMAC-SHA256 Credential=local/20260101/"
                    f"{REGION}/dynamodb/aws4_request, SignedHeaders=host, "
                    "Signature=local",
                },
                content=b"{}",
            )
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        return None if answer.status_code == 200 else f"ListTables answered {answer.status_code}"

    def stop(self) -> None:
        if (pid := self.pid()) is not None:
            stop_pid(pid, timeout_s=15)
        self.layout.pid_file(self.name).unlink(missing_ok=True)


def client(url: str, service: str = "dynamodb") -> object:
    """A boto3 client (``dynamodb`` or ``dynamodbstreams``) for the local server (any
    credentials; moto ignores them)."""
    import boto3

    return boto3.client(
        service,
        endpoint_url=url,
        region_name=REGION,
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
