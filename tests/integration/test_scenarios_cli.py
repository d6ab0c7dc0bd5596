"""Cleaning scenarios driven through the command line, as a user runs them: append, run, read.

Kafka's transaction scenarios (reference §8.3, T19-T28), the tombstone audit (a deleted key never comes
back under any strategy) and T56's horizon stamping.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from compaction.cli import EXIT_OK, common
from tests.helpers.builders import rec
from tests.helpers.cli import run

pytestmark = pytest.mark.spark

#: The command line's wall clock in these tests, whenever they run: runs start an hour ahead of it, so their
#: horizons come from --now alone (a --now behind the wall clock stamps them from the wall clock); the calls allow a
#: future --now.
WALL = 1_800_000_000_000
NOW = WALL + 3_600_000
DAY = 86_400_000
HOUR = 3_600_000


@pytest.fixture(autouse=True)
def wall_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "wall_clock_ms", lambda: WALL)


class Cli:
    """One store and configuration, used through ``compaction append / run / read / plan``."""

    def __init__(self, tmp_path: Path, capsys: pytest.CaptureFixture[str], conf: str = "") -> None:
        self.store = str(tmp_path / "store")
        self.conf = tmp_path / "conf.toml"
        self.conf.write_text('"log.cleanup.policy" = "compact"\n"log.cleaner.min.cleanable.ratio" = 0.0\n' + conf)
        self.tmp_path, self.capsys, self.files = tmp_path, capsys, 0

    def call(self, *argv: str) -> tuple[int, str]:
        return run(self.capsys, *argv, *(["--allow-future-now"] if "--now" in argv else []))

    def append(self, *rows: dict[str, Any], partition: int = 0, now: int = NOW) -> None:
        self.files += 1
        path = self.tmp_path / f"in-{self.files}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        code, out = self.call("append", self.store, "t", str(partition), str(path), "--now", str(now), "--no-timestamp")
        assert code == EXIT_OK, out

    def run(self, now: int | None = NOW) -> str:
        """A run at ``now`` (None: the wall clock, as a nightly run without --now)."""
        code, out = self.call("run", self.store, "--conf", str(self.conf), *(("--now", str(now)) if now else ()))
        assert code == EXIT_OK, out
        return out

    def plan(self, now: int) -> dict[str, Any]:
        code, out = self.call("plan", self.store, "--conf", str(self.conf), "--now", str(now), "--json")
        assert code == EXIT_OK, out
        return json.loads(out)

    def read(self, partition: int = 0) -> list[dict[str, Any]]:
        code, out = self.call("read", self.store, "t", str(partition))
        assert code == EXIT_OK, out
        return [json.loads(line) for line in out.splitlines()]

    def offsets(self) -> list[int]:
        return [r["offset"] for r in self.read()]

    def keys(self) -> list[str]:
        """Kafka's keysInLog: keys of data records with a value."""
        return [
            r["key"]
            for r in self.read()
            if not r["is_control"] and r["value"] is not None and "key" in r and r["key"] is not None
        ]


def T(producer: int, key: int) -> dict[str, Any]:  # the reference's notation
    return rec(str(key), str(key), producer_id=producer, is_transactional=True)


def C(producer: int) -> dict[str, Any]:
    return {"value": None, "producer_id": producer, "is_control": True, "control_type": "commit"}


def A(producer: int) -> dict[str, Any]:
    return {"value": None, "producer_id": producer, "is_control": True, "control_type": "abort"}


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], spark) -> Cli:
    return Cli(tmp_path, capsys)


def test_t19_an_abort_marker_is_stamped_once_its_records_are_gone_then_removed(cli: Cli) -> None:
    cli.append(T(1, 1), A(1), T(1, 2), T(1, 2), C(1))
    cli.append(rec("active"))
    cli.run()
    assert (cli.keys(), cli.offsets()) == (["2", "active"], [1, 3, 4, 5])
    cli.append(rec("filler"))  # a later pass: the abort marker has no record left before it
    cli.run()
    horizons = {r["offset"]: r["delete_horizon_ms"] for r in cli.read()}
    assert (horizons[1], horizons[4]) == (NOW + DAY, None), "the commit marker still guards @3"
    cli.run(NOW + DAY)
    assert cli.offsets() == [3, 4, 5, 6]


def test_t22_a_committed_transaction_spanning_segments_keeps_its_marker(cli: Cli) -> None:
    cli.append(T(1, 1))
    cli.append(C(1))
    cli.append(rec("active"))
    cli.run()
    cli.run(NOW + DAY + 1)
    assert cli.offsets() == [0, 1, 2]


def test_t24_an_abort_marker_goes_two_passes_after_its_records(cli: Cli) -> None:
    cli.append(T(1, 1), T(1, 2), T(1, 3), A(1), T(1, 3), C(1))
    cli.append(rec("active"))
    cli.run()
    assert (cli.keys(), cli.offsets()) == (["3", "active"], [3, 4, 5, 6])
    cli.append(rec("filler"))
    cli.run()
    cli.run(NOW + DAY + 1)
    assert (cli.keys(), cli.offsets()) == (["3", "active", "filler"], [4, 5, 6, 7])


def test_t28_a_data_key_equal_to_a_marker_key_supersedes_nothing(cli: Cli) -> None:
    commit_key = "AAAAAQ=="  # the bytes of a COMMIT control record's key
    cli.append(
        T(1, 1), C(1), {"key_base64": commit_key, "value": "foo", "producer_id": 2, "is_transactional": True}, C(2)
    )
    cli.append(rec("active"))
    cli.run()
    assert cli.offsets() == [0, 1, 2, 3, 4]


def test_records_within_the_min_compaction_lag_survive_a_run_until_they_are_older(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spark
) -> None:
    cli = Cli(tmp_path, capsys, f'"log.cleaner.min.compaction.lag.ms" = {HOUR}\n')
    cli.append(rec("a", "o1", timestamp=NOW - 3 * HOUR), rec("a", "o2", timestamp=NOW - 3 * HOUR))  # past the lag
    cli.append(rec("a", "y1", timestamp=NOW - HOUR // 2), rec("a", "y2", timestamp=NOW - HOUR // 2))  # within it
    cli.append(rec("z", "active", timestamp=NOW), now=NOW)
    cli.run(NOW)
    assert [(r["offset"], r["value"]) for r in cli.read()] == [(1, "o2"), (2, "y1"), (3, "y2"), (4, "active")], (
        "only the segment past the lag was cleaned: y1 survives though y2 supersedes it, and o2 though y1 does"
    )
    cli.run(NOW + HOUR)  # half an hour past the lag for the second segment
    assert [(r["offset"], r["value"]) for r in cli.read()] == [(3, "y2"), (4, "active")]


def test_t56_a_stamped_horizon_leaves_the_record_timestamps_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spark
) -> None:
    cli = Cli(tmp_path, capsys, '"log.cleaner.delete.retention.ms" = 1\n')
    horizon = NOW
    cli.append(rec("a", timestamp=5), rec("b", None, timestamp=10), rec("c", timestamp=15))
    cli.append(rec("active"))
    cli.run(horizon - 1)
    rows = cli.read()
    assert [(r["timestamp"], r["delete_horizon_ms"]) for r in rows[:3]] == [(5, None), (10, horizon), (15, None)]


@pytest.mark.parametrize(
    ("strategy", "version"),
    [
        ("timestamp", lambda t: {"timestamp": NOW - 1000 + t}),
        ("header", lambda t: {"headers": [{"key": "seq", "value_long": t}]}),
    ],
)
def test_a_deleted_key_never_comes_back_after_its_tombstone_goes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spark, strategy: str, version
) -> None:
    cli = Cli(
        tmp_path,
        capsys,
        f'"log.cleaner.compaction.strategy" = "{strategy}"\n"log.cleaner.compaction.strategy.header" = "seq"\n',
    )
    # k: a value at 300, its tombstone at 500, and a stale value at 100 last in the cleaned range.
    cli.append(rec("k", "v300", **version(300)), rec("k", None, **version(500)), rec("k", "stale", **version(100)))
    for step, now in enumerate((NOW, NOW + DAY, NOW + 2 * DAY)):
        cli.append(rec(f"filler-{step}", **version(1)), now=now)
        cli.run(now)
        assert [r["value"] for r in cli.read() if r.get("key") == "k"] in ([None], []), f"after the pass at {now}"
    assert [r.get("key") for r in cli.read()] == ["filler-0", "filler-1", "filler-2"]


def test_a_tombstone_outlives_its_horizon_while_a_stale_record_of_its_key_waits_beyond_the_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spark
) -> None:
    cli = Cli(tmp_path, capsys, '"log.cleaner.compaction.strategy" = "timestamp"\n')
    cli.append(rec("k", "v", timestamp=NOW - 300), rec("k", None, timestamp=NOW - 100))
    cli.append(rec("active", timestamp=NOW))
    cli.run(NOW)
    # Late, older than the delete, and in the active segment (its first record is recent: not rolled).
    cli.append(rec("k", "stale", timestamp=NOW - 500), now=NOW + DAY)
    cli.run(NOW + DAY)  # the tombstone's horizon has passed, but the stale record is not cleanable yet
    assert [r["value"] for r in cli.read() if r.get("key") == "k"] == [None, "stale"]
    cli.append(rec("active-2", timestamp=NOW + DAY), now=NOW + DAY)
    cli.run(NOW + DAY + 1)  # the stale record is cleanable now: it loses to the tombstone, which then goes
    assert [r for r in cli.read() if r.get("key") == "k"] == []


def test_an_expired_tombstone_that_lost_on_version_goes_and_the_next_plan_selects_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spark
) -> None:
    cli = Cli(tmp_path, capsys, '"log.cleaner.compaction.strategy" = "timestamp"\n')
    cli.append(rec("k", "live", timestamp=NOW - 100), rec("k", None, timestamp=NOW - 300))  # an older tombstone
    cli.append(rec("active", timestamp=NOW))
    cli.run(NOW)
    assert [r["value"] for r in cli.read() if r.get("key") == "k"] == ["live"]
    assert [r["offset"] for r in cli.read()] == [0, 2]
    for now in (NOW, NOW + DAY):
        assert [p["decision"] for p in cli.plan(now)["partitions"]] == ["skip"], f"at {now}"


def test_a_backdated_run_never_shortens_a_tombstones_life_in_real_time(cli: Cli) -> None:
    backfill = WALL - 30 * DAY  # a replay of a night a month ago
    cli.append(rec("k", "v"), rec("k", None), now=backfill)
    cli.append(rec("active"), now=backfill)
    cli.run(backfill)
    horizon = next(r["delete_horizon_ms"] for r in cli.read() if r.get("key") == "k")
    assert horizon == WALL + DAY, "stamped from the wall clock, not from the backdated now"
    cli.append(rec("active-2"))
    cli.run(None)  # tonight's run, minutes after the replay: the delete has lived minutes, not a day
    assert [r["value"] for r in cli.read() if r.get("key") == "k"] == [None]
