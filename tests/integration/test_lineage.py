"""OpenLineage events of real commands, sent over HTTP to an endpoint on 127.0.0.1: a run's START and COMPLETE (one
run id, each topic named by OpenLineage's conventions, the figures the run report has, each event held to
openlineage-python's classes generated from OpenLineage's schema), a partial run's failures, a failed run's FAIL,
the parent run Airflow passes, forget on S3; and an endpoint that refuses or never answers, which changes neither
the exit code nor the output."""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from compaction.cli import EXIT_FAILED, EXIT_INVALID, EXIT_OK, EXIT_PARTIAL
from compaction.lineage import delivery
from compaction.store import Store, TopicPartition
from tests.helpers.cli import invoke, run
from tests.helpers.cluster import free_port
from tests.helpers.lineage import Receiver, problems

NOW = "2026-01-02T00:00:00Z"
NOW_MS = 1_767_312_000_000


def make_store(capsys: pytest.CaptureFixture[str], folder: Path) -> Path:
    """``orders`` (2 partitions) and ``payments`` (1), each partition 4 segments of 250 records, and a configuration
    compacting every topic."""
    store = folder / "store"
    for topic, partitions in (("orders", "2"), ("payments", "1")):
        assert (
            run(
                capsys,
                "generate",
                str(store),
                "--topics",
                topic,
                "--records",
                "2000",
                "--keys",
                "50",
                "--partitions",
                partitions,
                "--segment-records",
                "250",
                "--now",
                NOW,
                "--end-time",
                NOW,
            )[0]
            == 0
        )
    (folder / "c.toml").write_text('"log.cleanup.policy" = "compact"\n')
    return store


def run_job(capsys: pytest.CaptureFixture[str], folder: Path, *flags: str) -> tuple[int, str, str]:
    code, out, err = invoke(
        capsys,
        "run",
        str(folder / "store"),
        "--conf",
        str(folder / "c.toml"),
        "--now",
        NOW,
        "--report",
        str(folder / "report.json"),
        *flags,
    )
    return code, out, err


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch) -> Any:
    with Receiver() as receiver:
        monkeypatch.setenv("OPENLINEAGE_URL", receiver.url)
        yield receiver


def delivered(receiver: Receiver, count: int) -> list[dict[str, Any]]:
    """The events, once ``count`` arrived (a command waits for its events before it returns: they are there)."""
    assert len(receiver.events) == count, receiver.events
    for event in receiver.events:
        assert problems(event) == [], json.dumps(event, indent=1)
    return receiver.events


@pytest.mark.spark
def test_a_run_tells_its_start_and_completion_with_each_topic_and_the_reports_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], endpoint: Receiver, spark: Any
) -> None:
    make_store(capsys, tmp_path)
    code, _, err = run_job(capsys, tmp_path)
    assert code == EXIT_OK and "OpenLineage" not in err
    start, complete = delivered(endpoint, 2)
    assert (start["eventType"], complete["eventType"]) == ("START", "COMPLETE")
    assert start["run"]["runId"] == complete["run"]["runId"]
    assert complete["job"]["namespace"] == "compaction" and complete["job"]["name"] == "compaction.run"
    assert complete["run"]["facets"]["nominalTime"]["nominalStartTime"] == "2026-01-02T00:00:00.000+00:00"
    report = json.loads((tmp_path / "report.json").read_text())
    where = str(tmp_path / "store")
    assert [(d["namespace"], d["name"]) for d in complete["inputs"]] == [
        ("file", f"{where}/orders"),
        ("file", f"{where}/payments"),
    ]
    assert [(d["namespace"], d["name"]) for d in complete["outputs"]] == [
        ("file", f"{where}/orders"),
        ("file", f"{where}/payments"),
    ]
    for output in complete["outputs"]:
        topic = output["name"].rsplit("/", 1)[1]
        partitions = [p for p in report["partitions"] if p["partition"].startswith(f"{topic}-")]
        figures = output["outputFacets"]["compaction_run"]
        assert figures["partitionsCleaned"] == len(partitions) and figures["partitionsFailed"] == 0
        assert figures["recordsBefore"] == sum(p["stats"]["records_before"] for p in partitions)
        assert figures["recordsAfter"] == sum(p["stats"]["records_after"] for p in partitions)
        assert figures["recordsAfter"] < figures["recordsBefore"]
        assert figures["bytesAfter"] == sum(p["stats"]["size_after"] for p in partitions)
        assert figures["versions"] == {p["partition"].rsplit("-", 1)[1]: p["version_after"] for p in partitions}
        assert figures["versions"] == {str(n): 2 for n in range(len(partitions))}
        statistics = output["outputFacets"]["outputStatistics"]
        assert (statistics["rowCount"], statistics["size"]) == (figures["recordsAfter"], figures["bytesAfter"])
        assert [f["name"] for f in output["facets"]["schema"]["fields"]][:4] == ["offset", "timestamp", "key", "value"]
    assert "compaction_failures" not in complete["run"]["facets"]


@pytest.mark.spark
def test_a_partial_run_completes_with_its_failures_and_without_the_topic_it_could_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], endpoint: Receiver, spark: Any
) -> None:
    make_store(capsys, tmp_path)
    segment = Store.open(str(tmp_path / "store")).manifest(TopicPartition("payments", 0)).segments[0]
    (tmp_path / "store" / "payments" / "0" / segment.path).unlink()
    code, out, _ = run_job(capsys, tmp_path)
    assert code == EXIT_PARTIAL, out
    _, complete = delivered(endpoint, 2)
    assert complete["eventType"] == "COMPLETE", "exit code 3: the run completed, some partitions failed"
    [failure] = complete["run"]["facets"]["compaction_failures"]["failures"]
    assert failure["partition"] == "payments-0" and "MissingObjectError" in failure["error"]
    assert [d["name"].rsplit("/", 1)[1] for d in complete["outputs"]] == ["orders"]
    assert [d["name"].rsplit("/", 1)[1] for d in complete["inputs"]] == ["orders", "payments"]


def test_a_failed_command_tells_its_failure_with_the_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], endpoint: Receiver
) -> None:
    code, out = run(capsys, "run", str(tmp_path / "no-store"), "--now", NOW)
    assert code == EXIT_FAILED
    start, fail = delivered(endpoint, 2)
    assert (start["eventType"], fail["eventType"]) == ("START", "FAIL")
    assert fail["run"]["runId"] == start["run"]["runId"]
    message = fail["run"]["facets"]["errorMessage"]["message"]
    assert "does not exist" in message and message in out
    code, out = run(capsys, "gc", str(tmp_path), "--set", "log.cleaner.min.cleanable.ratio=7")
    assert code == EXIT_INVALID
    fail = delivered(endpoint, 4)[3]
    assert fail["eventType"] == "FAIL" and fail["job"]["name"] == "compaction.gc"
    assert "Value must be no more than 1" in fail["run"]["facets"]["errorMessage"]["message"]


def test_forget_on_s3_names_the_bucket_keeps_the_key_out_and_nests_under_airflows_run(
    s3_store: Store, capsys: pytest.CaptureFixture[str], endpoint: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_run, dag_run = str(uuid.uuid4()), str(uuid.uuid4())
    monkeypatch.setenv("OPENLINEAGE_PARENT_ID", f"default/compaction_nightly.compact/{task_run}")
    monkeypatch.setenv("OPENLINEAGE_ROOT_PARENT_ID", f"default/compaction_nightly/{dag_run}")
    monkeypatch.setenv("OPENLINEAGE_NAMESPACE", "platform")
    monkeypatch.setenv("COMPACTION_LINEAGE_JOB", "orders-store")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIALINEAGETEST00001")  # moto takes any credentials
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "lineage-secret-access-key-0001")
    endpoint_url = s3_store.storage.storage_options["client_kwargs"]["endpoint_url"]
    options = [f"--storage-option=client_kwargs.endpoint_url={endpoint_url}"]
    assert (
        run(
            capsys,
            "generate",
            s3_store.url,
            "--records",
            "100",
            "--keys",
            "10",
            "--partitions",
            "2",
            *options,
            "--now",
            NOW,
        )[0]
        == EXIT_OK
    )
    assert endpoint.events == [], "generate is not told"
    code, out = run(capsys, "forget", s3_store.url, "orders", "--key", "key-0000000003", *options, "--now", NOW)
    assert code == EXIT_OK, out
    _, complete = delivered(endpoint, 2)
    bucket, _, prefix = s3_store.url.removeprefix("s3://").partition("/")
    assert complete["job"] == complete["job"] | {"namespace": "platform", "name": "orders-store.forget"}
    [output] = complete["outputs"]
    assert (output["namespace"], output["name"]) == (f"s3://{bucket}", f"{prefix}/orders".lstrip("/"))
    assert output["outputFacets"]["compaction_forget"]["keysFound"] == 1
    parent = complete["run"]["facets"]["parent"]
    assert (parent["run"]["runId"], parent["job"]["name"]) == (task_run, "compaction_nightly.compact")
    assert (parent["root"]["run"]["runId"], parent["root"]["job"]["name"]) == (dag_run, "compaction_nightly")
    text = json.dumps(endpoint.events)
    assert "key-0000000003" not in text, "no key: an erasure request's key is what must go"
    assert "AKIALINEAGETEST00001" not in text and "lineage-secret-access-key-0001" not in text, "no credential"


def same_output(text: str, folder: Path) -> list[str]:
    """A run's output lines without what differs between two runs of the same store: its folder, its durations, the
    names of its objects, the order in which partitions finish."""
    text = re.sub(r"[0-9a-f]{32}", "ID", re.sub(r"\d+\.\d+ s\b", "T s", text.replace(str(folder), "FOLDER")))
    return sorted(re.sub(r"^\[\d+/\d+\] ", "", line) for line in text.splitlines())


@pytest.mark.spark
@pytest.mark.parametrize("hang", [False, True], ids=["refused", "never answers"])
def test_an_endpoint_that_fails_changes_neither_the_exit_code_nor_the_output(
    hang: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, spark: Any
) -> None:
    alone, told = tmp_path / "alone", tmp_path / "told"
    for folder in (alone, told):
        folder.mkdir()
        make_store(capsys, folder)
        segment = Store.open(str(folder / "store")).manifest(TopicPartition("payments", 0)).segments[0]
        (folder / "store" / "payments" / "0" / segment.path).unlink()
    started = time.perf_counter()
    expected = run_job(capsys, alone)
    alone_s = time.perf_counter() - started
    monkeypatch.setattr(delivery, "DELIVERY_TIMEOUT_S", 3.0)
    with Receiver(hang=True) as receiver:
        monkeypatch.setenv("OPENLINEAGE_URL", receiver.url if hang else f"http://127.0.0.1:{free_port()}")
        started = time.perf_counter()
        code, out, err = run_job(capsys, told)
        waited = time.perf_counter() - started
    assert code == expected[0] == EXIT_PARTIAL
    assert same_output(out, told) == same_output(expected[1], alone)
    [warning] = [line for line in err.splitlines() if "compaction.lineage" in line]
    assert "OpenLineage events not" in warning and "not affected" in warning, err
    assert same_output("\n".join(line[24:] for line in err.splitlines() if line != warning), told) == same_output(
        "\n".join(line[24:] for line in expected[2].splitlines()), alone
    ), "one warning line, no other"
    if hang:
        assert receiver.requests >= 1 and "within 3 s" in warning
    # Unbounded, the client's retries (6 attempts of 5 s for each of 2 events) would hold the command a minute.
    assert waited < alone_s + 3 + 20, "the command waited for its events no longer than the timeout"
    assert (
        json.loads((told / "report.json").read_text())["topics"]
        == json.loads((alone / "report.json").read_text())["topics"]
    )


def test_publish_tells_the_topic_it_read_and_the_iceberg_table_it_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], endpoint: Receiver
) -> None:
    store = tmp_path / "store"
    assert (
        run(capsys, "generate", str(store), "--records", "200", "--keys", "20", "--partitions", "2", "--now", NOW)[0]
        == EXIT_OK
    )
    conf = tmp_path / "c.toml"
    conf.write_text(
        f'[publish]\ncatalog = "lake"\n"type" = "sql"\n"uri" = "sqlite:///{tmp_path}/catalog.db"\n'
        f'"warehouse" = "file://{tmp_path}/warehouse"\n'
    )
    code, out = run(capsys, "publish", str(store), "orders", "--conf", str(conf))
    assert code == EXIT_OK, out
    _, complete = delivered(endpoint, 2)
    assert complete["job"]["name"] == "compaction.publish"
    assert [(d["namespace"], d["name"]) for d in complete["inputs"]] == [("file", f"{store}/orders")]
    [table] = complete["outputs"]
    assert (table["namespace"], table["name"]) == ("iceberg://lake", "default.orders")
    facet = table["outputFacets"]["compaction_publish"]
    assert facet["committed"] is True and facet["versions"] == {"0": 1, "1": 1} and facet["snapshotId"]
