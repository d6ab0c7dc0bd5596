"""docs/first-week.md, followed step by step: its shell blocks run as written, one after the other in one bash,
with the reader's values (the bucket, server.properties, /opt/compaction, /etc/compaction, the Pushgateway)
pointing at a moto S3 server, files of the test's own, a Pushgateway stand-in, and an Airflow home like a worker's
(the Airflow of .venv-airflow, its database migrated, a DAGS folder)."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from compaction.store import Store, TopicPartition
from compaction.synthetic import GenerateSpec, generate
from tests.helpers import ROOT
from tests.helpers.pushgateway import Pushgateway
from tests.helpers.s3server import CREDENTIALS, new_bucket, storage_options

pytestmark = [pytest.mark.airflow, pytest.mark.s3, pytest.mark.slow]

AIRFLOW_PYTHON = Path(os.environ.get("COMPACTION_AIRFLOW_PYTHON", ROOT / ".venv-airflow" / "bin" / "python"))
AIRFLOW = AIRFLOW_PYTHON.parent / "airflow"
PAGE = ROOT / "docs" / "first-week.md"
WRITTEN_MS = 1_767_225_600_000  # 2026-01-01, before the page's logical date (2026-01-02)
SERVER_PROPERTIES = """\
# A broker's configuration, as Kafka ships it and an operator edits it.
broker.id=0
listeners=PLAINTEXT://:9092
num.network.threads=3
log.dirs=/var/lib/kafka/data
num.partitions=4
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
log.cleaner.enable=true
log.cleaner.min.cleanable.ratio=0.5
zookeeper.connect=localhost:2181
"""


def shell_blocks(page: str) -> list[str]:
    """The ```bash blocks of the page, in order."""
    return re.findall(r"^```bash\n(.*?)^```$", page, re.MULTILINE | re.DOTALL)


def test_the_page_has_the_three_days() -> None:
    blocks = shell_blocks(PAGE.read_text())
    assert len(blocks) == 3
    assert "compaction warm-up" in blocks[0], "a new environment is prepared once, before its first run"
    assert "compaction plan s3://my-bucket/topics --conf /etc/kafka/server.properties" in blocks[1]
    assert "airflow dags test compaction_nightly" in blocks[2]
    assert "schedule=[ORDERS]" in blocks[2] and "airflow dags unpause orders_report" in blocks[2], (
        "a downstream DAG scheduled on a cleaned topic's asset"
    )


def test_your_first_week_as_written(s3_endpoint: str, tmp_path: Path) -> None:
    if not AIRFLOW.exists():
        pytest.fail(f"no Airflow at {AIRFLOW}: run `make airflow-setup`")
    bucket = new_bucket(s3_endpoint)
    store_url = f"{bucket}/topics"
    store = Store.open(store_url, storage_options(s3_endpoint))
    for topic in ("orders", "payments"):
        generate(
            store,
            GenerateSpec(
                topics=(topic,), records=4000, keys=200, partitions=2, segment_records=1000, end_time_ms=WRITTEN_MS
            ),
            now_ms=WRITTEN_MS,
        )
    kafka = tmp_path / "etc-kafka"
    kafka.mkdir()
    (kafka / "server.properties").write_text(SERVER_PROPERTIES)
    airflow_home = tmp_path / "airflow"
    (airflow_home / "dags").mkdir(parents=True)  # a worker's Airflow: installed, its database ready
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "airflow").symlink_to(AIRFLOW)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW", "PYSPARK", "VIRTUAL_ENV", "PYTHONPATH", "COMPACTION", "AWS_"))
    }
    env.update(
        CREDENTIALS,
        AWS_ENDPOINT_URL=s3_endpoint,
        AWS_EC2_METADATA_DISABLED="true",
        AIRFLOW_HOME=str(airflow_home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        SPARK_LOCAL_IP="127.0.0.1",
        PATH=os.pathsep.join([str(tools), *(p for p in env["PATH"].split(os.pathsep) if ".venv" not in p)]),
    )
    subprocess.run([str(AIRFLOW), "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)

    with Pushgateway() as pushgateway:
        values = {
            "s3://my-bucket": bucket,
            "/etc/kafka/server.properties": str(kafka / "server.properties"),
            "/opt/compaction": str(tmp_path / "opt-compaction"),
            "/etc/compaction": str(tmp_path / "etc"),
            "http://pushgateway:9091": pushgateway.url,
        }
        script = "\n".join(shell_blocks(PAGE.read_text()))
        for written, here in values.items():
            script = script.replace(written, here)
        # The one step a test cannot take as written: pip fetching the wheel's dependencies (pyspark and the
        # rest, hundreds of MB) from an index. The new virtualenv borrows those of .venv instead, so that pip
        # finds them installed; the project itself it gets from the wheel only.
        venv_line = f"python3 -m venv {tmp_path / 'opt-compaction'}\n"
        assert venv_line in script
        script = script.replace(
            venv_line,
            venv_line
            + (
                f"{sys.executable} -c 'import sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path; "
                f"from tests.helpers.jobenv import borrow_dependencies; borrow_dependencies(Path(sys.argv[2]))' "
                f"{ROOT} {tmp_path / 'opt-compaction'}\n"
            ),
        )
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, output[-5000:]

        assert re.search(r"^compaction \d+\.\d+", output, re.MULTILINE), "compaction --version, from the wheel"
        assert "ignoring" in output and "broker.id" in output, "server.properties names the job does not use"
        assert "Found credentials" not in output, "quiet by default"
        for partition in (0, 1):
            orders = store.manifest(TopicPartition("orders", partition))
            assert orders.version == 2 and orders.writer.run_id.startswith("manual__"), "cleaned by the DAG"
            assert store.manifest(TopicPartition("payments", partition)).version == 1, "cleanup.policy=delete"
        [report] = (airflow_home / "compaction-reports" / "compaction_nightly").glob("*.json")
        doc = json.loads(report.read_text())
        assert doc["now_ms"] == 1_767_312_000_000, "--now is the logical date, 2026-01-02"
        assert sorted(p["status"] for p in doc["partitions"]) == ["cleaned", "cleaned", "skipped", "skipped"]
        group = "/metrics/job/compaction/store@base64/" + base64.urlsafe_b64encode(store_url.encode()).decode()
        [(method, path, body)] = pushgateway.pushes
        assert (method, path) == ("POST", group), "grouped by job and store"
        assert f'kafka_log_cleaner_last_success_time_seconds{{store="{store_url}"}}' in body

    # The night left the orders asset updated, which makes the downstream DAG of the page due; payments is not
    # compacted, so its asset is not.
    assets = subprocess.run(
        [str(AIRFLOW_PYTHON), str(ROOT / "tests" / "helpers" / "airflow_runner.py"), "--assets"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    [line] = [line for line in assets.stdout.splitlines() if line.startswith("ASSETS ")] or [assets.stderr[-3000:]]
    queued = json.loads(line.removeprefix("ASSETS "))
    assert [e["uri"] for e in queued["asset_events"]] == [f"{store_url}/orders"]
    assert queued["asset_events"][0]["extra"] == doc["topics"]["orders"]
    assert queued["due"] == ["orders_report"], "scheduled on the orders asset, and unpaused as the page says"
