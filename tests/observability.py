"""What the dashboard and the alert rules in deploy/ ask of the metrics.

Every PromQL expression (panel targets, the variable's query, every rule) is
parsed with a real PromQL parser (promql-parser, the Rust one Greptime and
others use) and walked: each selector's metric, the labels its matchers name,
and the labels the aggregations around it group by.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import promql_parser
import yaml

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "handoff.json"
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"
RUNBOOK = ROOT / "docs" / "runbook.md"
# Grafana's variables, as a query would see them.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$consumer": ".*"}
# Series Prometheus makes itself, not a process.
SYNTHETIC = {"up"}


@dataclass
class Needs:
    """Metric → the label names the expressions use with it, and exact label values."""

    labels: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    values: dict[str, set[tuple[str, str]]] = field(default_factory=lambda: defaultdict(set))

    def add(self, expr: str) -> None:
        for name, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(name, value)
        self._walk(promql_parser.parse(expr), frozenset())

    def _walk(self, node: Any, grouped: frozenset[str]) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            self.labels[node.name].update(grouped)
            for matcher in node.matchers.matchers:
                if matcher.name == "__name__":
                    continue
                self.labels[node.name].add(matcher.name)
                if matcher.op == promql_parser.MatchOp.Equal:
                    self.values[node.name].add((matcher.name, matcher.value))
        elif isinstance(node, promql_parser.MatrixSelector):
            self._walk(node.vector_selector, grouped)
        elif isinstance(node, promql_parser.AggregateExpr):
            modifier = node.modifier  # None, or by (...) / without (...)
            if modifier is not None and modifier.type == promql_parser.AggModifierType.By:
                grouped = grouped | frozenset(modifier.labels)
            self._walk(node.expr, grouped)
        elif isinstance(node, promql_parser.BinaryExpr):
            self._walk(node.lhs, grouped)
            self._walk(node.rhs, grouped)
        elif isinstance(node, promql_parser.Call):
            for arg in node.args:
                self._walk(arg, grouped)
        elif hasattr(node, "expr"):  # parentheses, unary minus, subqueries
            self._walk(node.expr, grouped)


def dashboard_expressions() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    found = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    for variable in board["templating"]["list"]:
        # label_values(metric, label) is Grafana's, not PromQL: the metric with that label.
        metric, label = re.fullmatch(
            r"label_values\((\w+),\s*(\w+)\)", variable["query"]["query"]
        ).groups()  # type: ignore[union-attr]
        found.append(f"count by ({label}) ({metric})")
    return found


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def runbook_anchors() -> set[str]:
    """GitHub's anchors of the runbook's headings."""
    anchors = set()
    for line in RUNBOOK.read_text().splitlines():
        if line.startswith("#"):
            text = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return anchors


def needs() -> Needs:
    found = Needs()
    for expr in dashboard_expressions() + [rule["expr"] for rule in rules()]:
        found.add(expr)
    return found


def exported(texts: list[str]) -> tuple[dict[str, set[str]], dict[str, set[tuple[str, str]]]]:
    """Sample name → label names, and → (label, value) pairs, over every scrape."""
    from prometheus_client.parser import text_string_to_metric_families

    labels: dict[str, set[str]] = defaultdict(set)
    values: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for text in texts:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels[sample.name].update(sample.labels)
                values[sample.name].update(sample.labels.items())
    return labels, values
