"""deploy/: the alert rules and the dashboard parse, name their runbook and data source."""

from __future__ import annotations

import json

import pytest

from tests.observability import (
    DASHBOARD,
    Needs,
    dashboard_expressions,
    needs,
    rules,
    runbook_anchors,
)


def test_every_rule_is_whole_and_names_a_runbook_section_that_exists() -> None:
    anchors = runbook_anchors()
    found = rules()
    assert len(found) >= 8
    names = [rule["alert"] for rule in found]
    assert len(names) == len(set(names))
    for rule in found:
        assert rule["expr"] and rule["labels"]["severity"] in ("page", "ticket"), rule
        assert rule["annotations"]["summary"], rule
        path, _, anchor = rule["annotations"]["runbook"].partition("#")
        assert path == "docs/runbook.md" and anchor in anchors, rule["alert"]


def test_the_conditions_the_runbook_names_each_have_a_rule() -> None:
    used = needs().labels
    for metric in (
        "handoff_relay_oldest_unpublished_age_seconds",
        "handoff_consumer_oldest_pending_seconds",
        "handoff_consumer_quarantined",
        "handoff_effects_unresolved",
        "handoff_audit_breaches",
        "up",
    ):
        assert any(metric in rule["expr"] for rule in rules()), metric
        assert metric in used


def test_every_panel_reads_the_provisioned_data_source() -> None:
    board = json.loads(DASHBOARD.read_text())
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert len(panels) >= 20
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "prometheus"}, panel["title"]
        assert panel["targets"], panel["title"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    assert len(dashboard_expressions()) > len(panels)


def test_the_walker_finds_metrics_labels_and_values_and_refuses_bad_promql() -> None:
    found = Needs()
    found.add(
        'histogram_quantile(0.99, sum by (le, route) (rate(x_bucket{job="a", b=~"$consumer"}'
        "[$__rate_interval]))) / on (route) max(-(y))"
    )
    assert found.labels["x_bucket"] == {"le", "route", "job", "b"}
    assert found.values["x_bucket"] == {("job", "a")}
    assert found.labels["y"] == set()
    with pytest.raises(ValueError):
        found.add("sum by (a (x)")
