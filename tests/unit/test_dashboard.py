"""The Grafana dashboard (dashboards/compaction.json) charts only what the job exports, and all of it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pyspark.sql import SparkSession

from compaction.errors import EXIT_OK
from compaction.job import JobOptions, run_job
from compaction.store import Store
from tests.helpers import ROOT
from tests.helpers.settings import settings_with

DASHBOARD = ROOT / "dashboards" / "compaction.json"
#: PromQL words that are not metric names where they stand (functions are recognised by their parenthesis).
KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "and",
    "or",
    "unless",
    "inf",
    "nan",
}
#: Labels a series of the job has: its own, and the one Prometheus gives every pushed or scraped series.
LABELS = {"store", "job"}


def expressions(node: Any) -> Iterator[str]:
    """Every PromQL expression in the dashboard: panel targets and template variable queries."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                yield value
            else:
                yield from expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from expressions(item)


def parse(expr: str) -> tuple[set[str], set[str]]:
    """The metric names and the label names an expression uses."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    labels = {
        name
        for matchers in re.findall(r"\{([^}]*)\}", text)
        for name in re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", matchers)
    }
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range selectors
    grouping = re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", text)
    labels |= {name.strip() for names in grouping for name in names.split(",") if name.strip()}
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    if text.startswith("label_values("):  # Grafana's variable query: label_values(metric, label)
        metric, label = (part.strip() for part in text[len("label_values(") : text.rindex(")")].split(","))
        return {metric}, labels | {label}
    metrics = set()
    for found in re.finditer(r"(?<![\w$.:])[A-Za-z_:][\w:]*", text):
        if found.group() in KEYWORDS or text[found.end() :].lstrip().startswith("("):
            continue
        metrics.add(found.group())
    return metrics, labels


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The metric names a run of the job actually writes (over an empty store, which needs no Spark)."""
    folder = tmp_path_factory.mktemp("exported")
    store = Store.open(str(folder / "store"))

    def no_spark() -> SparkSession:
        raise AssertionError("an empty store needs no Spark")

    settings = settings_with({"cleaner": {"metrics.textfile": str(folder / "m.prom")}})
    code, _ = run_job(store, JobOptions(now_ms=1_767_225_600_000, wall_ms=1_767_225_600_000), settings, no_spark)
    assert code == EXIT_OK
    return {s.name for f in text_string_to_metric_families((folder / "m.prom").read_text()) for s in f.samples}


def test_the_expression_parser_finds_metrics_and_labels() -> None:
    assert parse('time() - max by (store) (a_total{store=~"$store", job!="x"}[5m] offset 1h) > 1e3') == (
        {"a_total"},
        {"store", "job"},
    )
    assert parse("label_values(b_seconds, store)") == ({"b_seconds"}, {"store"})


def test_every_metric_charted_is_one_the_job_exports(exported: set[str]) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    charted: set[str] = set()
    for expr in expressions(dashboard):
        metrics, labels = parse(expr)
        assert metrics, f"{expr!r} charts no metric"
        assert metrics <= exported, f"{expr!r} charts {metrics - exported}, which the job does not export"
        assert labels <= LABELS, f"{expr!r} uses labels {labels - LABELS} the job's series do not have"
        charted |= metrics
    assert charted == exported, f"not charted: {exported - charted}"


def test_every_panel_has_a_query_and_a_unique_id() -> None:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert all(panel["targets"] for panel in panels)
    assert len({panel["id"] for panel in panels}) == len(panels)
