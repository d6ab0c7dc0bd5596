"""A user's first week: habits from Kafka, Spark and the shell give a clear answer, never a silent no-op."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from compaction import __version__
from compaction.cli import EXIT_INVALID, EXIT_OK, EXIT_USAGE
from compaction.cli.types import parse_duration, parse_time
from compaction.store import Store
from compaction.synthetic import GenerateSpec, generate
from tests.helpers.cli import run

NOW = "2026-01-02T00:00:00Z"


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = str(tmp_path_factory.mktemp("usability") / "store")
    store = Store.open(url)
    for topic in ("orders", "payments"):
        generate(
            store,
            GenerateSpec(topics=(topic,), records=400, keys=50, partitions=1, segment_records=100),
            now_ms=parse_time(NOW),
        )
    return url


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("1767225600", "looks like epoch seconds"),
        ("1767225600000000", "looks like epoch microseconds or nanoseconds"),
        ("1767225600000000000", "did you mean 1767225600000000?"),
    ],
)
def test_times_in_the_wrong_unit_are_refused_with_what_was_probably_meant(text: str, hint: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=hint):
        parse_time(text)
    assert parse_time("1767225600000") == parse_time("2026-01-01T00:00:00Z")
    assert parse_time("1000") == 1000, "small synthetic times stay (tests and replays)"


def test_durations_take_a_unit_and_implausible_ones_are_refused() -> None:
    assert parse_duration("7d") == 7 * 86_400_000 and parse_duration("900000ms") == 900_000
    assert parse_duration("36h") == 36 * 3_600_000 and parse_duration("0") == 0
    with pytest.raises(argparse.ArgumentTypeError, match="has no unit: write 7ms, 7s, 7h or 7d"):
        parse_duration("7")
    with pytest.raises(argparse.ArgumentTypeError, match="over 100 years; did you mean 86400000ms"):
        parse_duration("86400000d")
    with pytest.raises(argparse.ArgumentTypeError, match="not a duration"):
        parse_duration("7 days")


@pytest.mark.parametrize(
    "argv",
    [
        ["gc", "STORE", "--keep-versions", "0"],
        ["gc", "STORE", "--grace", "7"],
        ["run", "STORE", "--spark-conf", "spark.executor.memory"],
        ["run", "STORE", "--now", "1767225600"],
        ["generate", "STORE", "--partitions", "-1"],
    ],
)
def test_every_flag_is_checked_by_the_parser_in_one_line(
    capsys: pytest.CaptureFixture[str], store_url: str, argv: list[str]
) -> None:
    code, out = run(capsys, *[store_url if a == "STORE" else a for a in argv])
    assert code == EXIT_USAGE and "Traceback" not in out
    assert out.strip().splitlines()[-1].startswith("compaction ") and "error: argument" in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "--version") == (EXIT_OK, f"compaction {__version__}\n")


def test_topics_take_a_comma_list_and_a_topic_that_is_not_there_is_named(
    capsys: pytest.CaptureFixture[str], store_url: str
) -> None:
    code, out = run(
        capsys,
        "plan",
        store_url,
        "--set",
        "log.cleanup.policy=compact",
        "--now",
        NOW,
        "--json",
        "--topics",
        "orders,payments",
    )
    assert code == EXIT_OK
    assert [p["partition"] for p in json.loads(out[out.index("{") :])["partitions"]] == ["orders-0", "payments-0"]
    code, out = run(capsys, "run", store_url, "--set", "log.cleanup.policy=compact", "--now", NOW, "--topics", "order")
    assert code == EXIT_INVALID
    assert f"--topics 'order' matches no topic of {store_url} (did you mean 'orders'?)" in out


def test_a_run_without_conf_that_would_compact_nothing_is_refused(
    capsys: pytest.CaptureFixture[str], store_url: str
) -> None:
    code, out = run(capsys, "run", store_url, "--now", NOW)
    assert code == EXIT_INVALID
    assert "none of the 2 topic(s) selected has cleanup.policy=compact" in out and "no --conf was given" in out


def test_a_topic_table_naming_no_topic_is_warned_about(
    capsys: pytest.CaptureFixture[str], store_url: str, tmp_path: Path
) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text('[topics."order"]\n"cleanup.policy" = "compact"\n')
    code, out = run(capsys, "run", store_url, "--conf", str(conf), "--now", NOW)
    assert code == EXIT_INVALID, "nothing the configuration asks for exists"
    assert f"configuration [topics.'order'] names no topic of {store_url} (did you mean 'orders'?)" in out


def test_status_verify_and_gc_take_the_configuration(
    capsys: pytest.CaptureFixture[str], store_url: str, tmp_path: Path
) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text('[cleaner]\n"gc.keep.versions" = 1\n"gc.grace.ms" = 0\n[store]\n"retry.budget.ms" = 5000\n')
    for command in ("status", "verify"):
        assert run(capsys, command, store_url, "--conf", str(conf))[0] == EXIT_OK
    versions = Store.open(str(tmp_path / "versions"))
    for _ in range(3):
        generate(versions, GenerateSpec(records=10, keys=5, partitions=1), now_ms=parse_time(NOW))
    code, out = run(capsys, "gc", versions.url, "--conf", str(conf), "--dry-run")
    assert code == EXIT_OK and "pruned manifest versions [1, 2]" in out, "gc.keep.versions=1 from the file"
    bad = tmp_path / "bad.toml"
    bad.write_text('[cleaner]\n"gc.keep.version" = 1\n')
    code, out = run(capsys, "gc", store_url, "--conf", str(bad))
    assert code == EXIT_INVALID and "did you mean 'gc.keep.versions'?" in out


def test_spark_properties_are_taken_as_spark_submit_writes_them() -> None:
    from compaction.cli import build_parser
    from compaction.cli.common import conf_file, spark_properties

    args = build_parser().parse_args(
        [
            "run",
            "STORE",
            "--conf",
            "conf/local.toml",
            "--conf",
            "spark.sql.shuffle.partitions=8",
            "--spark-conf",
            "spark.driver.memory=2g",
        ]
    )
    assert conf_file(args) == "conf/local.toml"
    assert spark_properties(args) == {"spark.sql.shuffle.partitions": "8", "spark.driver.memory": "2g"}
