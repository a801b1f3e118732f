"""Pytest plugin: headless Chromium through Playwright, for the e2e tests.

Chromium is the machine's own (Debian's ``chromium`` package, which
``make setup`` installs); Playwright only drives it. A missing browser fails
the test with what to do; it is never skipped.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, sync_playwright


def chromium_path() -> str | None:
    for candidate in (os.environ.get("HANDOFF_CHROMIUM"), "chromium", "chromium-browser"):
        if candidate and (found := shutil.which(candidate)):
            return found
    return None


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    path = chromium_path()
    if path is None:
        pytest.fail(
            "no Chromium found: run `make setup` (installs Debian's chromium) "
            "or set HANDOFF_CHROMIUM to a Chromium binary",
            pytrace=False,
        )
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=path, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        yield context.new_page()
    finally:
        context.close()
