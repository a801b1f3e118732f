"""The tracker UI in headless Chromium, over the demo pipeline's documents."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from playwright.sync_api import Page, expect
from rich.console import Console

from handoff.cli._demo_setup import DemoCredentials
from handoff.core.identity import Credential
from tests.fix_contract import ServiceFactory
from tests.tracker_seed import SERVICES, Pipeline, seed


@pytest.fixture
def pipeline(
    service: ServiceFactory, tenant: str, migrated: Any, tmp_path: Path
) -> Iterator[Pipeline]:
    creds = {name: service(name, can_create=name == "routing").token for name in SERVICES}
    demo = DemoCredentials(tenant, creds)
    pipe = Pipeline.open(demo, migrated, tmp_path)
    seed(pipe, 20, Console(quiet=True))
    try:
        yield pipe
    finally:
        pipe.close()


def sign_in(page: Page, api_url: str, token: str) -> None:
    page.goto(f"{api_url}/")
    expect(page).to_have_url(re.compile(r"/signin\?next=/"))
    page.fill("input[name=credential]", token)
    page.click("#signin button[type=submit]")
    expect(page.locator("h1")).to_have_text("Where work is")


def test_overview_owner_document_and_search(page: Page, api_url: str, pipeline: Pipeline) -> None:
    sign_in(page, api_url, pipeline.demo.credentials["viewer"])

    # One card per owner with work; the seed leaves 4 at routing, 6 at review, 6 at finalization.
    cards = page.locator("a.card")
    expect(cards).to_have_count(3)
    review = page.locator("a.card[data-owner=review]")
    expect(review.locator("[data-assigned]")).to_have_text("6")
    expect(review.locator("[data-overdue]")).to_have_text("1 overdue")

    review.click()
    expect(page.locator("h1")).to_have_text("review")
    rows = page.locator("table.docs tbody tr")
    expect(rows).to_have_count(6)
    expect(page.locator("table.docs tbody tr.overdue")).to_have_count(1)
    expect(page.locator("table.docs tbody tr.overdue [data-due]")).to_contain_text("overdue by")

    first = rows.first.locator("a").inner_text()
    rows.first.locator("a").click()
    expect(page.locator("h1")).to_contain_text(first)
    expect(page.locator("#where")).to_contain_text("Waiting for review, assigned to review at")
    timeline = page.locator("#timeline li")
    expect(timeline).to_have_count(2)
    expect(timeline.nth(0)).to_contain_text("routing created it")
    expect(timeline.nth(1)).to_contain_text("routing handed it to review")
    stages = page.locator("#stages tbody tr")
    expect(stages).to_have_count(2)
    expect(stages.nth(0)).to_contain_text("routing")
    expect(stages.nth(1)).to_contain_text("still there")

    # Search: a finished one, then one that does not exist.
    page.fill("input[name=documentId]", "invoice-1009")
    page.press("input[name=documentId]", "Enter")
    expect(page.locator("#where")).to_contain_text("Finished: paid")
    expect(page.locator("#timeline li.accepted")).to_have_count(4)
    page.fill("input[name=documentId]", "invoice-0")
    page.press("input[name=documentId]", "Enter")
    expect(page.locator("h1")).to_have_text("Not found")


def test_rejections_show_on_the_timeline(page: Page, api_url: str, pipeline: Pipeline) -> None:
    sign_in(page, api_url, pipeline.demo.credentials["viewer"])
    # Seed: every eleventh invoice gets a stale attempt; invoice-1012 (i=11) waits at routing.
    page.goto(f"{api_url}/documents/invoice-1012")
    rejected = page.locator("#timeline li.rejected")
    expect(rejected).to_have_count(1)
    expect(rejected).to_contain_text("VersionMismatch")
    # The tenant's rejections page lists every one, newest first, linking to its document.
    page.click("nav.links >> text=Rejections")
    rows = page.locator("#rejections tbody tr")
    expect(rows).to_have_count(pipeline.rejected)
    expect(rows.last).to_contain_text("invoice-1001")


def test_overview_refreshes_by_itself(page: Page, api_url: str, pipeline: Pipeline) -> None:
    sign_in(page, api_url, pipeline.demo.credentials["viewer"])
    routing = page.locator("a.card[data-owner=routing] [data-assigned]")
    expect(routing).to_have_text("4")
    pipeline.create()
    pipeline.create()
    # No reload: the page's own refresh (every second for the test server) shows them.
    expect(routing).to_have_text("6", timeout=20_000)


def test_a_wrong_credential_is_told_so(page: Page, api_url: str) -> None:
    page.goto(f"{api_url}/signin")
    page.fill("input[name=credential]", Credential.new().token)
    page.click("#signin button[type=submit]")
    expect(page.locator("[role=alert]")).to_contain_text("unknown or revoked service credential")
    page.fill("input[name=credential]", "hsvc_0000.nope")
    page.click("#signin button[type=submit]")
    expect(page.locator("[role=alert]")).to_contain_text("malformed service credential")


def _waiting_at_review(pipeline: Pipeline) -> str:
    # The seed's pattern: i % 10 in (2, 3, 4) ends at review; i = 2 is invoice-1003.
    return "invoice-1003"


def test_the_owner_hands_a_document_on_from_its_page(
    page: Page, api_url: str, pipeline: Pipeline
) -> None:
    doc = _waiting_at_review(pipeline)
    sign_in(page, api_url, pipeline.demo.credentials["viewer"])
    page.goto(f"{api_url}/documents/{doc}")
    expect(page.locator("#where")).to_contain_text("assigned to review")
    expect(page.locator("#handoff")).to_have_count(0)  # the viewer does not own it
    page.click("form.who button")  # sign out

    sign_in(page, api_url, pipeline.demo.credentials["review"])
    page.goto(f"{api_url}/documents/{doc}")
    stale = page.context.new_page()  # the same form, opened in a second tab
    stale.goto(f"{api_url}/documents/{doc}")
    page.fill("#handoff input[name=next_owner]", "finalization")
    page.fill("#handoff input[name=status]", "waiting for payment")
    page.click("#handoff button[type=submit]")
    expect(page.locator("#acted")).to_contain_text("Accepted: version")
    expect(page.locator("#where")).to_contain_text("Waiting for payment, assigned to finalization")
    expect(page.locator("#timeline li.accepted").last).to_contain_text(
        "review handed it to finalization"
    )
    expect(page.locator("#handoff")).to_have_count(0)  # review no longer owns it

    # The second tab acts on a version that is gone: refused, nothing changes.
    stale.fill("#handoff input[name=next_owner]", "routing")
    stale.fill("#handoff input[name=status]", "sent back")
    stale.click("#handoff button[type=submit]")
    expect(stale.locator("h1")).to_contain_text("Refused")
    stale.click("text=Back to the document")
    expect(stale.locator("#where")).to_contain_text("assigned to finalization")


def test_a_handoff_form_is_bound_to_its_credential(
    page: Page, api_url: str, pipeline: Pipeline
) -> None:
    doc = _waiting_at_review(pipeline)
    sign_in(page, api_url, pipeline.demo.credentials["review"])
    page.goto(f"{api_url}/documents/{doc}")
    version = page.locator("#handoff input[name=expected_version]").input_value()
    answer = page.request.post(
        f"{api_url}/documents/{doc}/handoff",
        form={"event_id": "ui-forged", "token": "0" * 64, "expected_version": version,
              "event_type": "approved", "next_owner": "finalization", "status": "forged"},
    )  # fmt: skip
    assert answer.status == 403 and "NotPermitted" in answer.text()
    page.reload()
    expect(page.locator("#where")).to_contain_text("assigned to review")


def test_completed_work_newest_first_and_by_id_prefix(
    page: Page, api_url: str, pipeline: Pipeline
) -> None:
    sign_in(page, api_url, pipeline.demo.credentials["viewer"])
    page.click("nav.links >> text=Completed")
    expect(page.locator("h1")).to_have_text("Completed work")
    # The seed finishes i % 10 in (8, 9): invoice-1009, 1010, 1019, 1020; newest first.
    rows = page.locator("#completed tbody tr")
    expect(rows).to_have_count(4)
    expect(rows.first.locator("a")).to_have_text("invoice-1020")
    expect(rows.first).to_contain_text("paid")
    page.fill("#find-completed input[name=idPrefix]", "invoice-101")
    page.press("#find-completed input[name=idPrefix]", "Enter")
    expect(rows).to_have_count(2)
    expect(rows.nth(0).locator("a")).to_have_text("invoice-1010")
    expect(rows.nth(1).locator("a")).to_have_text("invoice-1019")
    rows.nth(0).locator("a").click()
    expect(page.locator("#where")).to_contain_text("Finished: paid")


def test_rejections_filtered_by_code(page: Page, api_url: str, pipeline: Pipeline) -> None:
    sign_in(page, api_url, pipeline.demo.credentials["viewer"])
    page.click("nav.links >> text=Rejections")
    rows = page.locator("#rejections tbody tr")
    total = rows.count()
    assert total > 0
    codes = {rows.nth(i).locator(".badge").inner_text() for i in range(total)}
    wanted = sorted(codes)[0]
    page.select_option("#filter-rejections select[name=code]", wanted)
    page.click("#filter-rejections button[type=submit]")
    expect(page).to_have_url(re.compile(f"code={wanted}"))
    for i in range(rows.count()):
        expect(rows.nth(i).locator(".badge")).to_have_text(wanted)
    page.fill("#filter-rejections input[name=sender]", "nobody-sends-this")
    page.click("#filter-rejections button[type=submit]")
    expect(page.locator("p.empty")).to_contain_text("match these filters")


def _fold(admin: psycopg.Connection[Any]) -> None:
    """The server folds and samples every few seconds; the test does it now (waiting
    for a round of the server's that may be under way: both take the flow_fold row)."""
    with admin.transaction():
        admin.execute("SELECT 1 FROM handoff.flow_fold FOR UPDATE")
        admin.execute("SELECT handoff.fold_flow()")
        admin.execute("SELECT handoff.sample_owners(interval '0 seconds')")


def test_pipeline_stages_in_flow_order_lead_to_their_owner(
    page: Page, api_url: str, pipeline: Pipeline, admin: psycopg.Connection[Any]
) -> None:
    _fold(admin)
    sign_in(page, api_url, pipeline.demo.credentials["viewer"])
    expect(page.locator("[data-owner=review] [data-ages]")).to_contain_text("age p50")
    page.click("nav.links >> text=Pipeline")
    stages = page.locator("li.stage")
    expect(stages).to_have_count(3)
    for i, owner in enumerate(("routing", "review", "finalization")):
        expect(stages.nth(i)).to_have_attribute("data-stage", owner)
    expect(page.locator("[data-stage=review] [data-waiting]")).to_have_text("6")
    expect(page.locator("[data-stage=finalization] .next")).to_contain_text("done")
    page.click("[data-stage=review] a.stage-name")
    expect(page.locator("h1")).to_have_text("review")


def test_pipeline_flow_is_drawn_and_its_nodes_lead_to_their_owner(
    page: Page, api_url: str, pipeline: Pipeline, admin: psycopg.Connection[Any],
    tmp_path: Path,
) -> None:  # fmt: skip
    _fold(admin)
    sign_in(page, api_url, pipeline.demo.credentials["viewer"])
    page.goto(f"{api_url}/pipeline?minutes=60")
    flow = page.locator("svg.flow")
    expect(flow).to_be_visible()
    nodes = flow.locator("g[data-flow-stage]")
    expect(nodes).to_have_count(3)
    # In flow order, left to right, on the screen as drawn.
    xs = [nodes.nth(i).bounding_box()["x"] for i in range(3)]  # type: ignore[index]
    assert xs == sorted(xs) and len(set(xs)) == 3
    expect(flow.locator("[data-flow-stage=review] [data-flow-waiting]")).to_have_text("6")
    expect(flow.locator("path[data-flow-edge='routing → review']")).to_have_count(1)
    expect(flow.locator("g[data-flow-start]")).to_have_count(1)
    expect(flow.locator("g[data-flow-end]")).to_have_count(1)
    expect(page.locator(".tabs a.on")).to_have_text("Last hour")
    page.screenshot(path=str(tmp_path / "pipeline-flow.png"), full_page=True)
    assert (tmp_path / "pipeline-flow.png").stat().st_size > 10_000
    flow.locator("[data-flow-stage=review] a").first.click()
    expect(page.locator("h1")).to_have_text("review")


def test_charts_over_the_last_hour_and_day(
    page: Page, api_url: str, pipeline: Pipeline, admin: psycopg.Connection[Any]
) -> None:
    _fold(admin)
    sign_in(page, api_url, pipeline.demo.credentials["viewer"])
    page.click("nav.links >> text=Over time")
    charts = page.locator("figure.chart")
    expect(charts).to_have_count(3)
    expect(charts.nth(0).locator("polyline")).to_have_count(3)  # one line per owner
    expect(charts.nth(0).locator("[data-series=review] b")).to_have_text("6")
    expect(charts.nth(2).locator("[data-series=created] b")).not_to_have_text("0")
    page.click(".tabs >> text=Last day")
    expect(page).to_have_url(re.compile("window=day"))
    expect(page.locator("figure.chart").nth(0).locator("polyline")).to_have_count(3)


def test_find_by_owner_sorted_by_deadline_and_by_data(
    page: Page, api_url: str, pipeline: Pipeline
) -> None:
    sign_in(page, api_url, pipeline.demo.credentials["viewer"])
    page.click("nav.links >> text=Find")
    form = page.locator("#find-form")
    form.locator("input[name=owner]").fill("review")
    form.locator("button[type=submit]").click()
    rows = page.locator("table.docs tbody tr")
    expect(rows).to_have_count(6)
    page.click("[data-sort=due]")
    expect(page).to_have_url(re.compile("sort=due"))
    expect(rows.first).to_have_class(re.compile("overdue"))  # the earliest deadline is past
    page.click("[data-sort=due]")  # again: latest deadline first
    expect(page).to_have_url(re.compile("order=desc"))
    expect(rows.last).to_have_class(re.compile("overdue"))
    page.goto(f"{api_url}/find")
    page.locator("#find-form input[name=overdue]").check()
    page.locator("#find-form button[type=submit]").click()
    for i in range(rows.count()):
        expect(rows.nth(i)).to_have_class(re.compile("overdue"))
    page.goto(f"{api_url}/find")
    page.locator("#find-form input[name=data]").fill("not json")
    page.locator("#find-form button[type=submit]").click()
    expect(page.locator("h1")).to_have_text("Not valid")


def test_operate_retry_a_quarantined_event_from_the_page(
    page: Page, api_url: str, pipeline: Pipeline, admin: psycopg.Connection[Any], tenant: str
) -> None:
    entry = admin.execute(
        """INSERT INTO handoff.quarantine (tenant_id, consumer, event_id, event_type,
               document_id, run_id, version, topic, kafka_partition, kafka_offset, category,
               error, attempts)
           VALUES (%s, 'review', 'e-poison', 'routed', 'invoice-1003', 1, 2, 't', 0, 1,
                   'handler_error', 'KeyError: amount', 3)
           RETURNING id""",
        (tenant,),
    ).fetchone()[0]  # type: ignore[index]
    sign_in(page, api_url, pipeline.demo.credentials["viewer"])
    page.click("nav.links >> text=Operate")
    row = page.locator(f"[data-quarantine='{entry}']")
    expect(row).to_contain_text("KeyError: amount")
    expect(row.locator("form")).to_have_count(0)  # the viewer does not own it
    page.click("form.who button")

    sign_in(page, api_url, pipeline.demo.credentials["review"])
    page.goto(f"{api_url}/operate")
    expect(page.locator("[data-relay] [data-pending]")).to_be_visible()
    retry = row.locator("form[action$='/retry']")  # retry and discard: a form each
    retry.locator("input[name=reason]").fill("amount added to the schema")
    retry.locator("button", has_text="Retry").click()
    expect(page.locator("[data-done]")).to_contain_text("retry requested")
    expect(row).to_contain_text("retry asked")
    audit = admin.execute(
        "SELECT actor, detail FROM handoff.quarantine_audit WHERE quarantine_id = %s", (entry,)
    ).fetchall()
    assert audit == [("review (tracker)", "amount added to the schema")]


def test_operate_resolve_an_unresolved_effect_from_the_page(
    page: Page, api_url: str, pipeline: Pipeline, admin: psycopg.Connection[Any], tenant: str
) -> None:
    intent = admin.execute(
        """INSERT INTO handoff.effect_intents (tenant_id, consumer, event_id, effect,
               idempotency_key, document_id, run_id, request, fingerprint, state,
               reconciliation, attempts, lookups, owner, error)
           VALUES (%s, 'finalization', 'e-pay', 'pay', %s, 'invoice-1005', 1, '{}', '\\x00',
                   'unknown', 'unresolved', 1, 5, 'finalization', 'lookups failed 5 times')
           RETURNING id""",
        (tenant, f"k-{tenant}"),
    ).fetchone()[0]  # type: ignore[index]
    sign_in(page, api_url, pipeline.demo.credentials["finalization"])
    page.goto(f"{api_url}/operate")
    row = page.locator(f"[data-effect='{intent}']")
    expect(row).to_contain_text("lookups failed 5 times")
    row.locator("select[name=outcome]").select_option("succeeded")
    row.locator("input[name=provider_ref]").fill("pay_777")
    row.locator("input[name=reason]").fill("found in the provider's dashboard")
    row.locator("button", has_text="Resolve").click()
    expect(page.locator("[data-done]")).to_contain_text("resolved as succeeded")
    expect(page.locator(f"[data-effect='{intent}']")).to_have_count(0)  # no longer waiting
    state = admin.execute("SELECT state, reconciliation, provider_ref FROM handoff.effect_intents "
                          "WHERE id = %s", (intent,)).fetchone()  # fmt: skip
    assert state == ("succeeded", "resolved", "pay_777")
