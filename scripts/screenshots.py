"""``make screenshots``: current pictures of the tracker's main pages, for docs/ and the README.

Runs ``handoff demo`` (the event-driven pipeline) on a free port, waits until
the pipeline has paid some invoices, signs in as the demo's viewer (and as
``review`` for the page where the owner acts) in headless Chromium, saves
one PNG per page in docs/screenshots/, and stops the demo with Ctrl-C.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from playwright.sync_api import Page, sync_playwright

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "screenshots"
sys.path.insert(0, str(ROOT))

from handoff.stack.layout import pick_port  # noqa: E402
from tests.fix_browser import chromium_path  # noqa: E402


def _wait(check: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():  # type: ignore[operator]
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise SystemExit(f"screenshots: {what} did not happen within {timeout_s:.0f} s")


def _shoot(page: Page, url: str, name: str) -> None:
    page.goto(url)
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(OUT / f"{name}.png"), full_page=False)
    print(f"  docs/screenshots/{name}.png")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    port = pick_port(18800, set())
    url = f"http://127.0.0.1:{port}"
    home = Path(os.environ.get("HANDOFF_HOME", ROOT / ".handoff"))
    log = (home / "logs" / "screenshots-demo.log").open("wb")
    demo = subprocess.Popen(
        [sys.executable, "-m", "handoff.cli", "demo", "--documents", "80", "--port", str(port)],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        _wait(lambda: httpx.get(f"{url}/healthz", timeout=2).is_success, 240, "the demo")
        creds = json.loads((home / "demo.json").read_text())["credentials"]
        viewer = {"Authorization": f"Bearer {creds['viewer']}"}
        _wait(lambda: httpx.get(f"{url}/v1/completed", headers=viewer, timeout=5).json()["items"],
              120, "a paid invoice")  # fmt: skip
        time.sleep(5)  # let the pipeline spread work over the stages
        path = chromium_path()
        if path is None:
            raise SystemExit("screenshots: no Chromium (make browser installs it)")
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=path, args=["--no-sandbox"])
            context = browser.new_context(viewport={"width": 1280, "height": 800})
            page = context.new_page()
            page.goto(f"{url}/signin#{creds['viewer']}")
            page.wait_for_url(f"{url}/")
            print("writing screenshots:")
            _shoot(page, f"{url}/", "overview")
            _shoot(page, f"{url}/owners/senior-review", "owner")
            _shoot(page, f"{url}/completed", "completed")
            _shoot(page, f"{url}/rejections", "rejections")
            _shoot(page, f"{url}/pipeline", "pipeline")
            _shoot(page, f"{url}/trends", "trends")
            _shoot(page, f"{url}/find?owner=review&sort=due", "find")
            page.context.clear_cookies()
            page.goto(f"{url}/signin#{creds['finalization']}")
            page.wait_for_url(f"{url}/")
            _shoot(page, f"{url}/operate", "operate")
            page.context.clear_cookies()
            page.goto(f"{url}/signin#{creds['review']}")
            page.wait_for_url(f"{url}/")
            _shoot(page, f"{url}/documents/invoice-42", "document")
            browser.close()
    finally:
        demo.send_signal(signal.SIGINT)
        demo.wait(120)
        log.close()


if __name__ == "__main__":
    main()
