"""``handoff demo``: seeds through the services' clients, serves the tracker until Ctrl-C."""

from __future__ import annotations

import json
import signal
from typing import Any

import httpx

from handoff.core.client import HandoffClient
from handoff.core.settings import HandoffSettings
from handoff.stack.layout import pick_port
from handoff.stack.local import LocalStack
from tests.fix_contract import serving


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


def test_demo_seeds_serves_and_stops_on_ctrl_c(
    local_stack: LocalStack, migrated: HandoffSettings
) -> None:
    port = pick_port(18600, set())
    url = f"http://127.0.0.1:{port}"
    log = local_stack.layout.log_file("test-demo")
    args = ["demo", "--documents", "15", "--port", str(port)]
    with serving(local_stack, "test-demo", args, port=port, timeout_s=90) as proc:
        printed = log.read_text()
        assert "seeding invoices" in printed
        assert "15/15" in printed
        assert f"{url}/signin#hsvc_" in printed
        demo = json.loads((local_stack.layout.home / "demo.json").read_text())
        viewer = {"Authorization": f"Bearer {demo['credentials']['viewer']}"}
        owners = httpx.get(f"{url}/v1/owners", headers=viewer, timeout=10).json()["owners"]
        assert {"routing", "review", "finalization"} <= {o["owner"] for o in owners}
        overview = httpx.get(
            f"{url}/", cookies={"handoff_credential": demo["credentials"]["viewer"]}, timeout=10
        )
        assert overview.status_code == 200 and "Where work is" in overview.text
        readme_walkthrough(url, demo, migrated)
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        assert proc.wait(30) == 0, log.read_text()
    assert "demo moved work" in log.read_text()
