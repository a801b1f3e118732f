"""``handoff demo``: the event-driven pipeline under the engine of ``handoff run``,
the tracker, and Ctrl-C stopping the processes in order."""

from __future__ import annotations

import json
import signal
from typing import Any

import httpx
import psutil
import psycopg

from handoff.core.client import HandoffClient
from handoff.core.identity import Credential
from handoff.core.settings import HandoffSettings
from handoff.stack.layout import pick_port
from handoff.stack.local import LocalStack
from handoff.stack.procs import wait_until
from tests.fix_contract import serving, signed_in


def readme_walkthrough(url: str, demo: dict[str, Any], settings: HandoffSettings) -> None:
    """The README's example, as written, with the demo's review credential."""
    viewer = {"Authorization": f"Bearer {demo['credentials']['viewer']}"}
    history = httpx.get(f"{url}/v1/documents/invoice-42/history", headers=viewer, timeout=10)
    assert history.status_code == 200, history.text
    at_seven = history.json()["items"][6]
    assert (at_seven["version"], at_seven["ownerAfter"]) == (7, "review")
    review = HandoffClient.direct(demo["credentials"]["review"], settings.database_url)
    with review:
        # a fixed event id: a second run of this test gets the original receipt
        receipt = review.emit(
            event_id="readme-invoice-42-approved",
            event_type="approved",
            document_id="invoice-42",
            next_owner="finalization",
            status="approved",
            expected_version=7,
        )
    assert (receipt.version, receipt.owner) == (8, "finalization")


def _paid(settings: HandoffSettings, tenant: str, document: str | None = None) -> int:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM handoff.document_state WHERE tenant_id = %s"
            " AND status = 'paid' AND (%s::text IS NULL OR document_id = %s)",
            (tenant, document, document),
        ).fetchone()
    return int(row[0]) if row else 0


def test_demo_runs_the_event_driven_pipeline_serves_and_stops_on_ctrl_c(
    local_stack: LocalStack, migrated: HandoffSettings
) -> None:
    port = pick_port(18600, set())
    url = f"http://127.0.0.1:{port}"
    log = local_stack.layout.log_file("test-demo")
    args = ["demo", "--documents", "15", "--port", str(port)]
    with serving(local_stack, "test-demo", args, port=port, timeout_s=180) as proc:
        printed = log.read_text()
        assert "seeding invoices" in printed
        assert "15/15" in printed
        assert f"{url}/signin#hsvc_" in printed
        demo = json.loads((local_stack.layout.home / "demo.json").read_text())
        tenant = demo["tenant"]
        viewer = {"Authorization": f"Bearer {demo['credentials']['viewer']}"}
        # The consumers route, approve small amounts and pay them at the provider.
        assert wait_until(lambda: _paid(migrated, tenant) > 0, 120), log.read_text()[-4000:]
        owners = httpx.get(f"{url}/v1/owners", headers=viewer, timeout=10).json()["owners"]
        assert "review" in {o["owner"] for o in owners}
        with signed_in(url, Credential.parse(demo["credentials"]["viewer"])) as ui:
            overview = ui.get("/")
        assert overview.status_code == 200 and "Where work is" in overview.text
        readme_walkthrough(url, demo, migrated)
        # Approved by a person, invoice-42 is paid by finalization through the ledger.
        assert wait_until(lambda: _paid(migrated, tenant, "invoice-42") == 1, 120)
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) >= 7  # sandbox, relay, four consumers, intake
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        assert proc.wait(60) == 0, log.read_text()[-4000:]
    text = log.read_text()
    stops = [line.split("|", 1)[1].strip() for line in text.splitlines()
             if "run |" in line and line.rstrip().endswith(": stopping")]  # fmt: skip
    assert stops[0] == "intake: stopping" and stops[-1] == "sandbox: stopping"
    assert all(not c.is_running() or c.status() == psutil.STATUS_ZOMBIE for c in children)
