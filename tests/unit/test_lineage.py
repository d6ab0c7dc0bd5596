"""Lineage without a server: datasets named by OpenLineage's conventions, what the environment configures, each
command's events held to the classes openlineage-python generates from OpenLineage's schema (and the check failing
on each kind of broken event), a delivery that never changes a command, and nothing of it at all (no import, no
connection) when nothing is configured."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from compaction.erasure.requests import Forgotten
from compaction.lineage import delivery
from compaction.lineage.datasets import DatasetName, dataset_at, topic_dataset
from compaction.lineage.environment import Parent, RunRef, job_name, job_namespace, openlineage_configured, parent_run
from compaction.lineage.events import run_event
from compaction.lineage.figures import FACETS_SCHEMA, CommandLineage, Dataset, Written, of_forget, of_gc, of_publish
from compaction.publish import Target
from compaction.publish.snapshot import PublishResult
from compaction.store import Store
from compaction.store.gc import GcResult
from tests.helpers import ROOT
from tests.helpers.lineage import CLIENT, FACETS, problems

PARENT = Parent(
    RunRef("airflow", "compaction_nightly.compact", str(uuid.uuid4())),
    RunRef("airflow", "compaction_nightly", str(uuid.uuid4())),
)


@pytest.mark.parametrize(
    ("url", "options", "expected"),
    [
        ("s3://bucket/prefix/topics", None, DatasetName("s3://bucket", "prefix/topics/orders")),
        ("s3a://bucket/topics/", None, DatasetName("s3://bucket", "topics/orders")),
        ("gs://bucket/topics", None, DatasetName("gs://bucket", "topics/orders")),
        ("gcs://bucket/topics", None, DatasetName("gs://bucket", "topics/orders")),
        (
            "abfss://box@acct.dfs.core.windows.net/topics",
            None,
            DatasetName("abfss://box@acct.dfs.core.windows.net", "topics/orders"),
        ),
        (
            "abfs://box/topics",
            {"account_name": "acct", "account_key": "secret"},
            DatasetName("abfss://box@acct.dfs.core.windows.net", "topics/orders"),
        ),
        ("hdfs://namenode:8020/data/topics", None, DatasetName("hdfs://namenode:8020", "/data/topics/orders")),
        ("/data/topics", None, DatasetName("file", "/data/topics/orders")),
        ("file:///data/topics", None, DatasetName("file", "/data/topics/orders")),
        ("https://user:password@host:8443/topics", None, DatasetName("https://host:8443", "topics/orders")),
    ],
)
def test_a_topic_is_named_by_openlineage_conventions_for_its_store(
    url: str, options: dict | None, expected: DatasetName
) -> None:
    assert topic_dataset(url, "orders", options) == expected


def test_a_relative_local_store_is_named_by_its_absolute_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert dataset_at("store/orders") == DatasetName("file", str(tmp_path / "store" / "orders"))


def test_openlineage_is_configured_where_its_client_looks_and_off_otherwise(tmp_path: Path) -> None:
    cwd, home = tmp_path / "cwd", tmp_path / "home"
    cwd.mkdir()
    (home / ".openlineage").mkdir(parents=True)

    def configured(**environ: str) -> bool:
        return openlineage_configured(environ, cwd, home)

    assert not configured()
    assert configured(OPENLINEAGE_URL="http://127.0.0.1:5000")
    assert configured(OPENLINEAGE_CONFIG=str(tmp_path / "ol.yml"))
    assert configured(OPENLINEAGE__TRANSPORT__TYPE="console")
    assert not configured(OPENLINEAGE_URL="http://127.0.0.1:5000", OPENLINEAGE_DISABLED="True")
    (home / ".openlineage" / "openlineage.yml").write_text("transport:\n  type: console\n")
    assert configured()
    assert not configured(OPENLINEAGE_DISABLED="true")
    (home / ".openlineage" / "openlineage.yml").unlink()
    (cwd / "openlineage.yml").write_text("transport:\n  type: console\n")
    assert configured()


def test_the_job_is_named_by_the_environment_with_documented_defaults() -> None:
    assert (job_namespace({}), job_name("run", {})) == ("compaction", "compaction.run")
    environ = {"OPENLINEAGE_NAMESPACE": "prod", "COMPACTION_LINEAGE_JOB": "nightly-orders"}
    assert (job_namespace(environ), job_name("gc", environ)) == ("prod", "nightly-orders.gc")


def test_the_parent_run_comes_from_the_variables_an_orchestrator_passes(caplog: pytest.LogCaptureFixture) -> None:
    parent, root = PARENT.run, PARENT.root
    assert (
        parent_run(
            {
                "OPENLINEAGE_PARENT_ID": f"airflow/compaction_nightly.compact/{parent.run_id}",
                "OPENLINEAGE_ROOT_PARENT_ID": f"airflow/compaction_nightly/{root.run_id}",
            }
        )
        == PARENT
    )
    assert parent_run({"OPENLINEAGE_PARENT_ID": f"airflow/compaction_nightly.compact/{parent.run_id}"}) == Parent(
        parent, parent
    ), "without a root, the parent is its own root"
    context = {
        "parent": {
            "run": {"runId": parent.run_id},
            "job": {"namespace": "airflow", "name": parent.name},
            "root": {"run": {"runId": root.run_id}, "job": {"namespace": "airflow", "name": root.name}},
        }
    }
    assert parent_run({"OPENLINEAGE_CONTEXT": json.dumps(context)}) == PARENT
    assert parent_run({}) is None
    with caplog.at_level(logging.WARNING):
        assert parent_run({"OPENLINEAGE_PARENT_ID": "airflow/compact/not-a-uuid"}) is None
        assert parent_run({"OPENLINEAGE_CONTEXT": "{not json"}) is None
    assert "OPENLINEAGE_PARENT_ID 'airflow/compact/not-a-uuid' is not NAMESPACE/JOB/RUN_ID" in caplog.text
    assert "OPENLINEAGE_CONTEXT is not a parent run's JSON" in caplog.text


def _json(event: Any) -> dict[str, Any]:
    from openlineage.client.serde import Serde

    return json.loads(Serde.to_json(event))


def _event(state: str, **kwargs: Any) -> dict[str, Any]:
    return _json(
        run_event(
            state,
            run_id=str(uuid.uuid4()),
            namespace="compaction",
            name="compaction.gc",
            event_ms=1_767_312_000_000,
            nominal_ms=1_767_312_000_000,
            **kwargs,
        )
    )


def test_each_commands_events_hold_to_openlineages_schema() -> None:
    store = Store.open("s3://bucket/topics", {"key": "AKIAIOSFODNN7EXAMPLE", "secret": "wJalrXUtnFEMI/K7MDENG"})
    gc = of_gc(
        store,
        [
            GcResult("orders-0", pruned_versions=[1], deleted_objects=["a", "b"], deleted_bytes=10),
            GcResult("payments-0"),
        ],
        {"orders-1": "manifest orders/1/_manifests/x.json is not valid JSON"},
    )
    forget = of_forget(
        store, "orders", [Forgotten(b"customer-42", (0, 1), tombstones={1: 17}), Forgotten(b"customer-43", (0, 1))]
    )
    publish = of_publish(
        store,
        "orders",
        Target("default", {}, "kafka", 1, 1),
        PublishResult("kafka.orders", 77, {0: 3, 1: 2}, committed=True, data_files=4),
    )
    events = [
        _event("START", parent=PARENT),
        _event("COMPLETE", parent=PARENT, seen=gc),
        _event("COMPLETE", seen=forget),
        _event("COMPLETE", seen=publish),
        _event("FAIL", seen=gc, error="gc skipped orders-1", trace="Traceback ..."),
    ]
    empty = of_publish(
        store, "orders", Target("default", {}, "kafka", 1, 1), PublishResult("kafka.orders", None, {}, committed=False)
    )
    events.append(_event("COMPLETE", seen=empty))
    for event in events:
        assert problems(event) == [], event
    assert "snapshotId" not in events[-1]["outputs"][0]["outputFacets"]["compaction_publish"], (
        "a table without a snapshot has none to name"
    )
    assert [(d["namespace"], d["name"]) for d in events[1]["outputs"]] == [("s3://bucket", "topics/orders")], (
        "written where gc deleted something"
    )
    assert events[1]["outputs"][0]["outputFacets"]["compaction_gc"] | {"_producer": None} == {
        "_producer": None,
        "_schemaURL": f"{FACETS_SCHEMA}#/$defs/CompactionGcOutputDatasetFacet",
        "partitionsCollected": 1,
        "partitionsSkipped": 1,
        "objectsDeleted": 2,
        "bytesDeleted": 10,
        "versionsPruned": 1,
    }
    assert [f["partition"] for f in events[1]["run"]["facets"]["compaction_failures"]["failures"]] == ["orders-1"]
    assert events[2]["outputs"][0]["outputFacets"]["compaction_forget"]["tombstones"] == {"1": 1}
    assert events[3]["outputs"][0]["namespace"] == "iceberg://default"
    assert events[4]["run"]["facets"]["errorMessage"]["message"] == "gc skipped orders-1"
    text = json.dumps(events)
    assert "customer-42" not in text and "AKIA" not in text and "wJalr" not in text, "no key, no credential"


def _run_complete() -> dict[str, Any]:
    """A run's COMPLETE under Airflow, with an output's statistics and its ``compaction_run`` facet."""
    orders = Dataset("s3://bucket", "topics/orders")
    figures = {
        "partitionsCleaned": 2,
        "partitionsFailed": 0,
        "partitionsSkipped": 1,
        "recordsBefore": 100,
        "recordsAfter": 40,
        "bytesBefore": 9000,
        "bytesAfter": 3600,
        "versions": {"0": 2, "1": 3},
    }
    return _event(
        "COMPLETE",
        parent=PARENT,
        seen=CommandLineage(
            [orders],
            [Written(orders, "compaction_run", "CompactionRunOutputDatasetFacet", figures, rows=40, size=3600)],
        ),
    )


def _set(path: str, value: Any) -> Any:
    """A change to an event: the field at ``path`` (dotted, a number indexes a list) set to ``value``, or removed
    with ``...``."""
    *parents, last = path.split(".")

    def change(event: dict[str, Any]) -> None:
        node: Any = event
        for step in parents:
            node = node[int(step)] if step.isdigit() else node[step]
        if value is ...:
            del node[last]
        else:
            node[last] = value

    return change


STATS = "outputs.0.outputFacets.outputStatistics"
OWN = "outputs.0.outputFacets.compaction_run"
NOMINAL = "https://openlineage.io/spec/facets/1-0-1/NominalTimeRunFacet.json#/$defs/NominalTimeRunFacet"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (_set("run.runId", ...), "event.run: missing runId, which Run requires"),
        (_set("run.runId", "run-42"), "event.run.runId: 'run-42' is not a uuid"),
        (_set("eventTime", "2026-01-02"), "event.eventTime: '2026-01-02' is not a date-time"),
        (
            _set("run.facets.nominalTime._producer", ...),
            "event.run.facets.nominalTime: missing _producer, which NominalTimeRunFacet requires",
        ),
        (
            _set(f"{STATS}.rowCount", "40"),
            f'event.{STATS.replace(".0.", "[0].")}.rowCount: expected an integer, got a string ("40")',
        ),
        (
            _set("run.facets.nominalTime._schemaURL", NOMINAL.replace("1-0-1", "1-0-0")),
            f"event.run.facets.nominalTime._schemaURL: '{NOMINAL.replace('1-0-1', '1-0-0')}' is not the schema of "
            f"NominalTimeRunFacet in {CLIENT}, {NOMINAL}",
        ),
        # and the rest of what the check holds an event to
        (_set(f"{STATS}.rowCount", True), "rowCount: expected an integer, got a boolean (true)"),
        (_set(f"{STATS}.size", None), "size: expected an integer, got null (null)"),
        (_set("producer", "compaction 0.1"), "event.producer: 'compaction 0.1' is not a uri"),
        (_set("schemaURL", ...), "event: missing schemaURL, which RunEvent requires"),
        (_set("eventType", "DONE"), "event.eventType: 'DONE' is none of 'START', 'RUNNING', 'COMPLETE'"),
        (_set("job.namespace", 7), "event.job.namespace: expected a string, got an integer (7)"),
        (_set("run.runID", str(uuid.uuid4())), "event.run: unknown field 'runID' (known: runId, facets)"),
        (
            _set("run.facets.parent.root.run.runId", "root"),
            "event.run.facets.parent.root.run.runId: 'root' is not a uuid",
        ),
        (_set("run.facets.parent.job", ...), "event.run.facets.parent: missing job, which ParentRunFacet requires"),
        (
            _set("run.facets.nominaltime", {"_producer": "urn:x", "_schemaURL": NOMINAL, "nominalStartTime": "x"}),
            "event.run.facets.nominaltime: 'nominaltime' is the key of no standard RunFacet the job's events carry",
        ),
        (
            _set(
                "job.facets.nominalTime",
                {"_producer": "urn:x", "_schemaURL": NOMINAL, "nominalStartTime": "2026-01-02T00:00:00Z"},
            ),
            "event.job.facets.nominalTime: 'nominalTime' is the key of no standard JobFacet",
        ),
        (_set(f"{OWN}.partitionsCleaned", -1), "compaction_run.partitionsCleaned: -1 is less than the minimum of 0"),
        (_set(f"{OWN}.versions", ...), "compaction_run: 'versions' is a required property"),
        (_set(f"{OWN}._producer", ...), "compaction_run: missing _producer, which OutputDatasetFacet requires"),
        (
            _set(f"{OWN}.partitionscleaned", 2),
            "compaction_run: unknown field 'partitionscleaned' (known: _producer, _schemaURL, bytesAfter",
        ),
        (
            _set(f"{OWN}._schemaURL", f"{FACETS_SCHEMA}#/$defs/CompactionRunDatasetFacet"),
            f"compaction_run._schemaURL: '{FACETS_SCHEMA}#/$defs/CompactionRunDatasetFacet' names no facet defined in "
            "facets.json",
        ),
        (
            _set(
                "run.facets.compaction_gc",
                {"_producer": "urn:x", "_schemaURL": f"{FACETS_SCHEMA}#/$defs/CompactionGcOutputDatasetFacet"},
            ),
            "event.run.facets.compaction_gc: CompactionGcOutputDatasetFacet extends https://openlineage.io/spec/2-0-2/"
            "OpenLineage.json#/$defs/OutputDatasetFacet in facets.json, where a RunFacet",
        ),
    ],
)
def test_the_check_finds_each_kind_of_broken_event(change: Any, expected: str) -> None:
    event = _run_complete()
    assert problems(event) == [], "whole, the event holds"
    change(event)
    found = problems(event)
    assert len(found) == 1 and expected in found[0], found


def test_compactions_own_facets_are_defined_by_a_valid_schema() -> None:
    import jsonschema

    schema = json.loads(FACETS.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$id"] == FACETS_SCHEMA


def test_a_failing_transport_is_one_warning_and_every_event_is_still_tried(caplog: pytest.LogCaptureFixture) -> None:
    tried: list[str] = []

    class Failing:
        def emit(self, event: str) -> None:
            tried.append(event)
            raise ConnectionError("refused by http://user:hunter2-secret@127.0.0.1:9")

        def close(self, timeout: float) -> bool:
            return True

    sender = delivery.Delivery(Failing, secrets={"hunter2-secret"}, timeout_s=5)
    sender.send(lambda: "START")
    sender.send(lambda: "COMPLETE")
    with caplog.at_level(logging.WARNING):
        sender.close()
    assert tried == ["START", "COMPLETE"]
    [warning] = caplog.records
    assert warning.getMessage() == (
        "2 OpenLineage event(s) not delivered: ConnectionError: refused by "
        "http://user:****@127.0.0.1:9; the command's outcome is not affected"
    )


def test_a_transport_that_never_answers_is_waited_for_no_longer_than_the_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = threading.Event()

    class Hanging:
        def emit(self, event: str) -> None:
            release.wait(30)

    sender = delivery.Delivery(Hanging, timeout_s=0.2)
    sender.send(lambda: "START")
    with caplog.at_level(logging.WARNING):
        sender.close()
    release.set()
    assert [r.getMessage() for r in caplog.records] == [
        "OpenLineage events not delivered within 0.2 s (the transport did not answer; 0 delivered); the command's "
        "outcome is not affected"
    ]


#: Run in a fresh interpreter with nothing configured: forget, gc and a run whose work is retention alone (no Spark),
#: recording every connection opened and whether openlineage or dagster_pipes was imported.
UNCONFIGURED = """
import json, sys
connections = []
sys.addaudithook(lambda event, args: connections.append(repr(args[1])) if event == "socket.connect" else None)
from compaction.cli import main
store, conf = sys.argv[1], sys.argv[2]
codes = [main(["generate", store, "--records", "40", "--keys", "10", "--partitions", "1", "--segment-records", "10",
               "--now", "2026-01-01T00:00:00Z", "--end-time", "2026-01-01T00:00:00Z"]),
         main(["run", store, "--conf", conf, "--now", "2026-01-02T00:00:00Z"]),
         main(["forget", store, "orders", "--key", "key-0000000001", "--now", "2026-01-02T00:00:00Z"]),
         main(["gc", store, "--grace", "0s"])]
print(json.dumps({"codes": codes, "connections": connections,
                  "imported": sorted(m for m in sys.modules if m.split(".")[0] in ("openlineage", "dagster_pipes"))}))
"""


def test_nothing_is_imported_or_connected_when_nothing_is_configured(tmp_path: Path) -> None:
    conf = tmp_path / "retention.toml"
    conf.write_text('"log.cleanup.policy" = "compact,delete"\n"log.retention.ms" = 3600000\n')
    env = {
        k: v
        for k, v in __import__("os").environ.items()
        if not k.startswith(("OPENLINEAGE", "DAGSTER_PIPES", "COMPACTION_LINEAGE"))
    }
    env["HOME"] = str(tmp_path)  # no ~/.openlineage/openlineage.yml
    done = subprocess.run(
        [sys.executable, "-c", UNCONFIGURED, str(tmp_path / "store"), str(conf)],
        cwd=tmp_path,
        env=env | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["codes"] == [0, 0, 0, 0], done.stdout
    assert "cleaned orders-0" in done.stdout and "tombstone appended" in done.stdout, done.stdout
    assert result["connections"] == [], "no connection at all: no Spark was needed, and lineage is off"
    assert result["imported"] == []


def test_a_command_that_raises_tells_its_failure_and_traceback_masked_through_the_file_transport(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import argparse

    from compaction import lineage

    events = tmp_path / "events.jsonl"
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "file")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__LOG_FILE_PATH", str(events))
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__APPEND", "true")

    def command(told: Any) -> int:
        raise RuntimeError("a bug, near s3://bucket?secret=hunter2-secret")

    with pytest.raises(RuntimeError):
        lineage.observe(argparse.Namespace(command="gc"), {"hunter2-secret"}, command)
    start, fail = (json.loads(line) for line in events.read_text().splitlines())
    assert (start["eventType"], fail["eventType"]) == ("START", "FAIL")
    assert problems(fail) == []
    error = fail["run"]["facets"]["errorMessage"]
    assert error["message"] == "RuntimeError: a bug, near s3://bucket?secret=****"
    assert "Traceback" in error["stackTrace"] and "hunter2" not in error["stackTrace"]


def test_the_console_transport_prints_each_event(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import argparse

    from compaction import lineage

    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "console")
    caplog.set_level(logging.INFO)
    assert lineage.observe(argparse.Namespace(command="forget"), (), lambda told: 0) == 0
    printed = [json.loads(r.getMessage()) for r in caplog.records if r.name == "openlineage.client.transport.console"]
    assert [e["eventType"] for e in printed] == ["START", "COMPLETE"]
    assert printed[0]["run"]["runId"] == printed[1]["run"]["runId"] and printed[1]["job"]["name"] == "compaction.forget"
