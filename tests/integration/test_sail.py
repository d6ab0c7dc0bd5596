"""The job on Sail, a Spark Connect server without a JVM (.venv-sail, made by `make sail-setup`: pysail with the
pyspark 4.2 it runs, and this checkout installed).

A Sail server runs here as its own process on 127.0.0.1, started from .venv-sail and stopped by its process id;
this process (pyspark 4.3) is its client, as a user's environment would be. Sail takes no artifacts, so the job
says so and runs the package the server's Python has. Every plan of the differential keeps what the reference
model keeps there too; a corrupt partition fails alone; a run on Sail, through a server or `--remote sail` in
the job's own process, commits what a classic run commits (chispa compares the logs record by record).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pyspark
import pytest
from chispa import assert_df_equality

from compaction.clean.cleaner import Cleaner
from compaction.engine.session import spark_session
from compaction.read.scan import scan
from compaction.store import Store, TopicPartition
from tests.helpers import ROOT, SPARK_NOISE, ahead_of_the_wall_clock_ms
from tests.helpers.cluster import free_port
from tests.helpers.settings import settings_with
from tests.integration.test_differential import (
    FORGETTING,
    HISTORY,
    check_history,
    examples,
    setups,
    spark_plan,
    through_cleaner,
)

pytestmark = [pytest.mark.sail, pytest.mark.slow]

SAIL_PYTHON = ROOT / ".venv-sail" / "bin" / "python"
NOW = ahead_of_the_wall_clock_ms()  # so that every run stamps horizons from it
DAY = 86_400_000
CONF = """"log.cleanup.policy" = "compact"
"log.roll.ms" = 60000
[cleaner]
"task.max.records" = 2500
"""
#: Seconds a Sail server may take to listen (about one; more on a loaded machine).
START_S = 60


def _sail_server(folder: Path, *, without_package: bool = False) -> tuple[subprocess.Popen[bytes], str]:
    """A Sail server process on 127.0.0.1 (its Python without this package when ``without_package``)."""
    if not SAIL_PYTHON.exists():
        pytest.fail(f"no Sail at {SAIL_PYTHON}: run `make sail-setup`")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK", "VIRTUAL_ENV"))}
    command = [str(SAIL_PYTHON), "-m", "pysail", "spark", "server", "--ip", "127.0.0.1", "--port", str(port)]
    if without_package:  # -S: no .pth files, so no editable install of this checkout; the rest of site-packages
        purelib = subprocess.run(
            [str(SAIL_PYTHON), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        command.insert(1, "-S")
        env["PYTHONPATH"] = purelib
    log = (folder / f"sail-{port}.log").open("wb")
    server = subprocess.Popen(command, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_S
    while True:
        assert server.poll() is None, (folder / f"sail-{port}.log").read_text()[-3000:]
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, f"sc://127.0.0.1:{port}"
        except OSError:
            assert time.monotonic() < deadline, f"no Sail server on port {port} after {START_S} s"
            time.sleep(0.2)


def _stop(server: subprocess.Popen[bytes]) -> None:
    os.kill(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.kill(server.pid, signal.SIGKILL)
        server.wait()


@pytest.fixture(scope="module")
def sail_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server, url = _sail_server(tmp_path_factory.mktemp("sail"))
    try:
        yield url
    finally:
        _stop(server)


@pytest.fixture(scope="module")
def sail_session(sail_server: str) -> Iterator[Any]:
    """A session of the Sail server; its Python has this checkout installed (checked as the session starts)."""
    session = spark_session(remote=sail_server, ship=False)
    yield session
    session.stop()


@pytest.fixture
def sail(sail_session: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The Sail session, with pyspark's functions building Spark Connect columns (this process may also run the
    shared classic session)."""
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")
    return sail_session


@pytest.mark.parametrize("plan", ["arrow", "arrow-split", "window", "aggregate"])
def test_every_plan_on_sail_plans_and_keeps_exactly_what_the_reference_model_does(
    sail: Any, plan: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Split partitions (with and without transactions) take their payloads in their rows."""
    name, split = spark_plan(plan, monkeypatch)
    examples(
        3,
        HISTORY,
        lambda setup, history: check_history(
            setup, lambda _: through_cleaner(sail, name, setup.settings(split=split)), history, split=split
        ),
        {"examples that cleaned": 1},
        setups(),
    )


@pytest.mark.parametrize("plan", ["arrow-split", "aggregate"])
def test_log_segments_on_sail_keep_exactly_what_the_reference_model_keeps(
    sail: Any, plan: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kafka-python's batches, parsed by kafka-python after every run."""
    name, split = spark_plan(plan, monkeypatch)
    examples(
        2,
        HISTORY,
        lambda setup, history: check_history(
            setup, lambda _: through_cleaner(sail, name, setup.settings(split=split)), history, kafka=True, split=split
        ),
        {"examples that cleaned": 1},
        setups(),
    )


@pytest.mark.parametrize("plan", ["arrow", "window"])
def test_erasure_requests_on_sail_remove_the_keys_older_records_and_nothing_else(sail: Any, plan: str) -> None:
    """Erasure histories, Parquet and ``.log``."""
    examples(
        2,
        FORGETTING.flatmap(lambda history: st.tuples(st.just(history), st.booleans())),
        lambda setup, drawn: check_history(
            setup, lambda _: through_cleaner(sail, plan, setup.settings()), drawn[0], kafka=drawn[1]
        ),
        {"examples that cleaned": 1},
    )


def _generate(path: Path) -> None:
    """Two topics: orders as Parquet, payments as zstd .log batches; transactions with aborts, tombstones."""
    for topic, extra in (("orders", []), ("payments", ["--format", "kafka", "--compression", "zstd"])):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "compaction.cli",
                "generate",
                str(path),
                "--topics",
                topic,
                "--partitions",
                "2",
                "--records",
                "12000",
                "--keys",
                "700",
                "--segment-records",
                "1500",
                "--tombstone-ratio",
                "0.05",
                "--keyless-ratio",
                "0.01",
                "--transactional-ratio",
                "0.2",
                "--abort-ratio",
                "0.3",
                "--end-time",
                str(NOW - DAY),
                "--now",
                str(NOW - DAY),
                "--allow-future-now",
                "--seed",
                "5",
                *extra,
            ],
            check=True,
            capture_output=True,
            timeout=300,
        )


def _run(python: Path | str, store: Path, conf: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK"))}
    return subprocess.run(
        [
            str(python),
            "-m",
            "compaction.cli",
            "run",
            str(store),
            "--conf",
            str(conf),
            "--now",
            str(NOW),
            "--allow-future-now",
            *flags,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.spark
def test_a_run_on_sail_commits_what_a_classic_run_commits(spark: Any, sail_server: str, tmp_path: Path) -> None:
    """Through a Sail server (which takes no artifacts: the job says so once), and with `--remote sail` in the job's
    own process; each on a copy of the same store, against a classic run on a third."""
    server, local, classic = tmp_path / "server", tmp_path / "local", tmp_path / "classic"
    _generate(server)
    shutil.copytree(server, local)
    shutil.copytree(server, classic)
    conf = tmp_path / "run.toml"
    conf.write_text(CONF)

    through = _run(sys.executable, server, conf, "--remote", sail_server)
    assert through.returncode == 0, through.stdout[-3000:] + through.stderr[-3000:]
    assert through.stderr.count("takes no artifacts") == 1, through.stderr
    inside = _run(SAIL_PYTHON, local, conf, "--remote", "sail")
    assert inside.returncode == 0, inside.stdout[-3000:] + inside.stderr[-3000:]
    for done in (through, inside):
        assert "4 partition(s) cleaned, 0 failed" in done.stdout
        assert not SPARK_NOISE.search(done.stderr), f"a successful run printed on stderr:\n{done.stderr[-4000:]}"
    report = Cleaner(spark, Store.open(str(classic)), settings_with(conf=str(conf))).run(NOW)
    assert not report.failed

    expected = Store.open(str(classic))
    for path in (server, local):
        store = Store.open(str(path))
        assert store.topic_partitions() == expected.topic_partitions()
        for tp in store.topic_partitions():
            ours, theirs = store.manifest(tp), expected.manifest(tp)
            assert (ours.version, ours.first_dirty_offset, ours.log_start_offset) == (
                theirs.version,
                theirs.first_dirty_offset,
                theirs.log_start_offset,
            ), (path.name, tp)
            assert [(s.base_offset, s.next_offset, s.live_records, s.format) for s in ours.segments] == [
                (s.base_offset, s.next_offset, s.live_records, s.format) for s in theirs.segments
            ], (path.name, tp)
        for topic in ("orders", "payments"):
            assert_df_equality(
                scan(store, topic).to_spark(spark), scan(expected, topic).to_spark(spark), ignore_row_order=True
            )


def test_a_corrupt_partition_fails_alone_on_sail(sail_server: str, tmp_path: Path) -> None:
    store = tmp_path / "store"
    _generate(store)
    conf = tmp_path / "run.toml"
    conf.write_text(CONF)
    bad = TopicPartition("orders", 1)
    segment = Store.open(str(store)).manifest(bad).segments[0]
    victim = store / "orders" / "1" / "segments" / Path(segment.path).name
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte: its checksum no longer matches
    victim.write_bytes(bytes(data))

    done = _run(sys.executable, store, conf, "--remote", sail_server)
    assert done.returncode == 3, done.stdout[-3000:] + done.stderr[-3000:]
    assert "3 partition(s) cleaned, 1 failed" in done.stdout
    assert "orders-1" in done.stdout and "checksum" in done.stdout.lower()
    versions = {tp: Store.open(str(store)).manifest(tp).version for tp in Store.open(str(store)).topic_partitions()}
    assert versions[bad] == 1, "nothing of the failed partition is committed"
    assert all(version == 2 for tp, version in versions.items() if tp != bad), versions


def test_a_server_without_the_package_and_without_artifacts_fails_in_one_line(tmp_path: Path) -> None:
    server, url = _sail_server(tmp_path, without_package=True)
    try:
        store = tmp_path / "store"
        _generate(store)
        conf = tmp_path / "run.toml"
        conf.write_text(CONF)
        done = _run(sys.executable, store, conf, "--remote", url)
    finally:
        _stop(server)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        f"error: the Spark Connect server {url} takes no artifacts (Sail does not), and its Python has no compaction "
        "package: install compaction 0.1.0 in the Python the server runs (the wheel of `make dist`), or run on a "
        "server that takes them (Spark's own Spark Connect server)"
    ]
    assert {Store.open(str(store)).manifest(tp).version for tp in Store.open(str(store)).topic_partitions()} == {1}


def test_remote_sail_is_refused_in_one_line_where_sail_cannot_run(tmp_path: Path) -> None:
    """The default installation has pyspark 4.3, which Sail 0.7 refuses; Sail runs each task once."""
    store = tmp_path / "store"
    _generate(store)
    conf = tmp_path / "run.toml"
    conf.write_text(CONF)
    here = _run(sys.executable, store, conf, "--remote", "sail")
    assert here.returncode == 1
    assert here.stderr.splitlines() == [
        "error: --remote sail needs pyspark 4.0 to 4.2.x, which Sail 0.7 runs, and this environment has pyspark "
        f"{pyspark.__version__}: pip install "
        "'compaction[sail]' in a virtualenv of its own (pysail, with pyspark 4.0 to 4.2.x)"
    ]
    retried = _run(SAIL_PYTHON, store, conf, "--remote", "sail", "--spark-conf", "spark.task.maxFailures=4")
    assert retried.returncode == 4
    assert retried.stderr.splitlines() == [
        "error: spark.task.maxFailures=4: Sail runs each task once, in its own process, so no task is retried or "
        "speculated there; drop the setting, or run on Spark (--master, or a Spark Connect server)"
    ]


# The data source compaction on Sail: batch read and write, the SQL functions; no streaming, no discovery ----------


@pytest.fixture(scope="module")
def sail_store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.helpers import readstore

    return readstore.built_locally(tmp_path_factory)


def test_the_data_source_reads_writes_and_answers_sql_on_sail(sail: Any, sail_store: Any, tmp_path: Path) -> None:
    from compaction.spark import register
    from tests.helpers.readstore import TOPIC, cli_table

    register(sail)  # Sail discovers no data source: registered
    log = cli_table(sail_store, tmp_path)
    frame = sail.read.format("compaction").load(sail_store.url)
    got = frame.select("partition", "offset", "key", "value").toArrow()
    assert sorted(
        zip(*(got.column(c).to_pylist() for c in ("partition", "offset", "key", "value")), strict=True)
    ) == sorted(zip(*(log.column(c).to_pylist() for c in ("partition", "offset", "key", "value")), strict=True))
    assert frame.where("partition = 1 AND offset < 100").count() == sum(
        1
        for p, o in zip(log.column("partition").to_pylist(), log.column("offset").to_pylist(), strict=True)
        if p == 1 and o < 100
    )
    url = str(tmp_path / "written")
    Store.open(url).create_topic(TOPIC, 3, now_ms=NOW)
    frame.write.format("compaction").mode("append").save(url)
    copied = sail.read.format("compaction").load(url).select("partition", "offset", "value").toArrow()
    assert sorted(
        zip(*(copied.column(c).to_pylist() for c in ("partition", "offset", "value")), strict=True)
    ) == sorted(zip(*(log.column(c).to_pylist() for c in ("partition", "offset", "value")), strict=True))
    status = sail.sql(f"SELECT partition, records FROM compaction_status('{url}') ORDER BY partition").collect()
    assert [r.records for r in status] == [log.column("partition").to_pylist().count(p) for p in range(3)]


def test_sail_runs_no_streaming_data_source(sail: Any, sail_store: Any) -> None:
    """What docs/spark.md says Sail 0.7 leaves out: a streaming read (and write) of a Python data source."""
    from compaction.spark import register

    register(sail)
    with pytest.raises(Exception):  # noqa: B017 (whichever error Sail gives)
        sail.readStream.format("compaction").load(sail_store.url).writeStream.format("memory").queryName(
            "sail_stream"
        ).start().awaitTermination(30)
