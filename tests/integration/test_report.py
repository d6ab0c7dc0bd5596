"""What a run writes besides the store: the JSON report and the Prometheus gauges, where the user points them
(paths or the store's URLs), with each store's gauges kept apart and the last success on the wall clock."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import s3fs
from prometheus_client.parser import text_string_to_metric_families

from compaction.cli import EXIT_OK, EXIT_PARTIAL
from compaction.store import Store, TopicPartition
from compaction.synthetic import GenerateSpec, generate
from tests.helpers.cli import run
from tests.helpers.pushgateway import Pushgateway
from tests.helpers.s3server import new_bucket, storage_options
from tests.unit.test_report import NOW, NOW_MS, make_store

LAST_SUCCESS = "kafka_log_cleaner_last_success_time_seconds"
UNCLEANABLE = "kafka_log_cleaner_uncleanable_partitions_count"


def break_partition(store_path: Path, store: Store, partition: int) -> None:
    segment = store.manifest(TopicPartition("orders", partition)).segments[0]
    (store_path / "orders" / str(partition) / segment.path).unlink()


def samples(text: str) -> dict[str, dict[str, float]]:
    """metric -> store label -> value."""
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[sample.labels.get("store", "")] = sample.value
    return found


@pytest.fixture
def pushgateway() -> Iterator[Pushgateway]:
    with Pushgateway() as gateway:
        yield gateway


@pytest.mark.s3
@pytest.mark.spark
def test_report_and_metrics_file_given_as_s3_urls_are_written_to_the_bucket(
    spark, s3_endpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    url = new_bucket(s3_endpoint)
    make_store(url, storage_options(s3_endpoint))
    conf = tmp_path / "c.toml"
    conf.write_text(
        f'"log.cleanup.policy" = "compact"\n[cleaner]\n"metrics.textfile" = "{url}/metrics/job.prom"\n'
        f'[store]\noptions = {{ client_kwargs = {{ endpoint_url = "{s3_endpoint}" }} }}\n'
    )
    code, out = run(capsys, "run", url, "--conf", str(conf), "--now", NOW, "--report", f"{url}/reports/run.json")
    assert code == EXIT_OK, out
    assert f"report written to {url}/reports/run.json" in out
    bucket = s3fs.S3FileSystem(**storage_options(s3_endpoint))
    report = json.loads(bucket.cat_file(f"{url}/reports/run.json"))
    assert [p["status"] for p in report["partitions"]] == ["cleaned", "cleaned"]
    assert samples(bucket.cat_file(f"{url}/metrics/job.prom").decode())[UNCLEANABLE] == {url: 0}
    assert list(tmp_path.iterdir()) == [conf], "no local folder called 's3:'"


@pytest.mark.spark
def test_the_last_success_survives_a_partially_failed_run_and_is_on_the_wall_clock(
    spark, tmp_path: Path, capsys: pytest.CaptureFixture[str], pushgateway: Pushgateway
) -> None:
    store = make_store(str(tmp_path / "store"))
    textfile = tmp_path / "metrics" / "compaction.prom"
    conf = tmp_path / "c.toml"
    conf.write_text(
        f'"log.cleanup.policy" = "compact"\n[cleaner]\n"metrics.textfile" = "{textfile}"\n'
        f'"metrics.pushgateway" = "{pushgateway.url}"\n'
    )
    before = time.time()
    assert run(capsys, "run", store.url, "--conf", str(conf), "--now", NOW)[0] == EXIT_OK
    first = samples(textfile.read_text())
    stamped = first[LAST_SUCCESS][store.url]
    assert before <= stamped <= time.time(), "the wall clock when the run finished, not --now (a backfill's time)"
    assert samples(pushgateway.pushes[-1][2])[LAST_SUCCESS][store.url] == stamped

    generate(
        store,
        GenerateSpec(records=600, keys=30, partitions=2, segment_records=100, end_time_ms=NOW_MS - 1),
        now_ms=NOW_MS - 1,
    )
    break_partition(tmp_path / "store", store, 1)
    assert run(capsys, "run", store.url, "--conf", str(conf), "--now", NOW)[0] == EXIT_PARTIAL
    second = samples(textfile.read_text())
    assert second[UNCLEANABLE] == {store.url: 1}
    assert second[LAST_SUCCESS] == {store.url: stamped}, "kept from the last run that cleaned everything"
    method, _, body = pushgateway.pushes[-1]
    assert method == "POST" and LAST_SUCCESS not in body, "pushadd: the Pushgateway keeps the previous value"
    assert samples(body)[UNCLEANABLE] == {store.url: 1}


@pytest.mark.spark
def test_two_stores_metrics_stay_apart(
    spark, tmp_path: Path, capsys: pytest.CaptureFixture[str], pushgateway: Pushgateway
) -> None:
    first, second = make_store(str(tmp_path / "first")), make_store(str(tmp_path / "second"))
    break_partition(tmp_path / "second", second, 0)
    textfile = tmp_path / "compaction.prom"
    conf = tmp_path / "c.toml"
    conf.write_text(
        f'"log.cleanup.policy" = "compact"\n[cleaner]\n"metrics.textfile" = "{textfile}"\n'
        f'"metrics.pushgateway" = "{pushgateway.url}"\n'
    )
    assert run(capsys, "run", first.url, "--conf", str(conf), "--now", NOW)[0] == EXIT_OK
    assert run(capsys, "run", second.url, "--conf", str(conf), "--now", NOW)[0] == EXIT_PARTIAL

    both = samples(textfile.read_text())
    assert both[UNCLEANABLE] == {first.url: 0, second.url: 1}, "one text file, one series per store"
    assert set(both[LAST_SUCCESS]) == {first.url}
    paths = [path for _, path, _ in pushgateway.pushes]

    def group(url: str) -> str:  # the Pushgateway's grouping key: a label value with a '/' is base64url
        return "/metrics/job/compaction/store@base64/" + base64.urlsafe_b64encode(url.encode()).decode()

    assert paths == [group(first.url), group(second.url)], "grouped by job and store: no push replaces another's"


@pytest.mark.spark
@pytest.mark.parametrize("task_max_records", [1_000_000, 100], ids=["in-task", "key-buckets"])
def test_the_report_says_where_the_time_went(
    spark, tmp_path: Path, capsys: pytest.CaptureFixture[str], task_max_records: int
) -> None:
    store = make_store(str(tmp_path / "store"))
    conf = tmp_path / "c.toml"
    conf.write_text(f'"log.cleanup.policy" = "compact"\n[cleaner]\n"task.max.records" = {task_max_records}\n')
    report = tmp_path / "report.json"
    assert run(capsys, "run", store.url, "--conf", str(conf), "--now", NOW, "--report", str(report))[0] == EXIT_OK

    doc = json.loads(report.read_text())
    phases = doc["phases_ms"]
    assert set(phases) == {"plan", "startup", "clean", "commit", "task_read", "task_decide", "task_write"}, phases
    assert all(value >= 0 for value in phases.values()) and phases["task_read"] > 0 and phases["task_write"] > 0
    # The driver's phases happen one after the other inside the run; the tasks' time is within the Spark jobs'.
    assert phases["clean"] + phases["commit"] <= doc["elapsed_ms"] + 1
    assert phases["task_read"] + phases["task_decide"] + phases["task_write"] <= 2 * phases["clean"] * 4 + 50
