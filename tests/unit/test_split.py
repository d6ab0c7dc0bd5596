"""A split partition's stage 1 (the Arrow plan, over ``task.max.records``): without transactions each segment is read
once and its rows handed to their key ranges; with them every range's task reads the range, keeping its own rows.
Either way the log ends as the one-task plan leaves it. Runs in this process (tests/helpers/inline.py)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from compaction.clean import paths
from compaction.clean.cleaner import Cleaner, plan_store
from compaction.clean.payloads import RunRead
from compaction.clean.sizing import segment_runs
from compaction.clean.tasks.decide import decide_handed
from compaction.clean.tasks.facts import hand_out
from compaction.clean.tasks.key_ranges import sample_bounds
from compaction.config import Settings
from compaction.engine.isolation import Failed, run
from compaction.store import Store, TopicPartition
from compaction.store.manifest import SegmentMeta
from compaction.store.objects import Objects
from compaction.synthetic import GenerateSpec, generate
from tests.helpers.builders import keyed
from tests.helpers.inline import InlineSession
from tests.helpers.settings import settings_with

NOW = 1_767_225_600_000
DAY = 86_400_000
TP = TopicPartition("orders", 0)
SIZED = {"log.cleanup.policy": "compact", "log.roll.ms": 60_000, "log.segment.bytes": 131_072}


def settings(task_max_records: int, **kafka: Any) -> Settings:
    return settings_with({**SIZED, **kafka, "cleaner": {"task.max.records": task_max_records}})


def store_of(path: Path, **spec: Any) -> Store:
    store = Store.open(str(path))
    generate(
        store,
        GenerateSpec(
            **{
                "records": 12_000,
                "keys": 900,
                "partitions": 1,
                "segment_records": 1_500,
                "tombstone_ratio": 0.05,
                "keyless_ratio": 0.01,
                "seed": 3,
                "end_time_ms": NOW - DAY,
                **spec,
            }
        ),
        now_ms=NOW - DAY,
    )
    return store


def reads(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[int, str]]:
    """Count each segment's reads in this process: its key sample, its decision columns, or whole."""
    seen: Counter[tuple[int, str]] = Counter()
    original = Objects.read_segment

    def counted(self: Objects, tp: TopicPartition, segment: SegmentMeta, columns: Any = None, **kw: Any) -> pa.Table:
        kind = (
            "whole"
            if columns is None
            else "sample"
            if list(columns) == ["key"]
            else "decision"
            if "key" in columns
            else "other"
        )
        seen[segment.base_offset, kind] += 1
        return original(self, tp, segment, columns, **kw)

    monkeypatch.setattr(Objects, "read_segment", counted)
    return seen


def cleaned(store: Store) -> list[dict[str, Any]]:
    return store.read(TP, columns=["offset", "key", "value", "delete_horizon_ms"]).to_pylist()


@pytest.mark.parametrize(
    ("task_max_records", "transactional"),
    [(2_000, False), (3_000, False), (2_000, True)],
    ids=["many-ranges", "few-ranges", "transactions"],
)
def test_a_split_partition_reads_each_segment_once_if_it_holds_no_transactions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task_max_records: int, transactional: bool
) -> None:
    extra = {"transactional_ratio": 0.3, "abort_ratio": 0.3} if transactional else {}
    whole, split = store_of(tmp_path / "whole", **extra), store_of(tmp_path / "split", **extra)
    Cleaner(InlineSession(), whole, settings(1_000_000)).run(NOW)
    segments = split.manifest(TP).segments
    cleaner = Cleaner(InlineSession(), split, settings(task_max_records))
    plan = plan_store(split, cleaner.settings, NOW)
    key_ranges = cleaner.task(plan.to_clean[0], NOW).split.key_ranges
    assert key_ranges == 4 if task_max_records == 3_000 else key_ranges > 4, f"{key_ranges} key ranges"
    seen = reads(monkeypatch)
    report = cleaner.run(NOW, compaction_plan=plan)
    decision_reads = [seen[s.base_offset, "decision"] for s in segments]
    samples = sum(seen[s.base_offset, "sample"] for s in segments)
    assert not report.failed and report.partitions[0].stats.messages_written < 12_000
    assert cleaned(split) == cleaned(whole)
    once = not transactional
    assert decision_reads == ([1] * len(segments) if once else [key_ranges] * len(segments))
    assert 0 < samples <= 8, "the bounds come from a sample"


def test_a_segment_that_cannot_be_read_fails_its_split_partition_with_the_reason(tmp_path: Path) -> None:
    store = store_of(tmp_path / "s")
    before = store.manifest(TP)
    victim = before.segments[5]
    (tmp_path / "s" / "orders" / "0" / victim.path).write_bytes(b"not parquet")
    cleaner = Cleaner(InlineSession(), store, settings(3_000))
    plan = plan_store(store, cleaner.settings, NOW)
    assert cleaner.task(plan.to_clean[0], NOW).split.key_ranges == 4
    report = cleaner.run(NOW, compaction_plan=plan)
    (failed,) = report.failed
    assert victim.path.split("/")[-1] in (failed.error or ""), failed.error
    assert store.manifest(TP).version == before.version, "nothing committed"


def test_every_key_range_decides_from_its_rows_of_every_run_and_a_lost_piece_fails_it(tmp_path: Path) -> None:
    store = store_of(tmp_path / "s")
    cleaner = Cleaner(InlineSession(), store, settings(3_000))
    plan = plan_store(store, cleaner.settings, NOW)
    task = cleaner.task(plan.to_clean[0], NOW)
    task = task.with_bounds(sample_bounds(task))
    segments = segment_runs(task.cleaned.segments, 3_000)
    assert [len(run) for run in segments] == [2, 2, 2, 2]
    runs = [hand_out(RunRead(task=task.of_run(run))) for run in segments]
    assert all(len(run.batches) == task.split.key_ranges == 4 for run in runs), "every run hands each range its rows"
    assert sum(sum(lengths) for run in runs for lengths in run.lengths) == sum(sum(run.read_lengths) for run in runs)
    ranged = task.of_range(2, tuple(run.piece(2) for run in runs))
    verdicts = decide_handed(ranged)
    assert [s.segment_base for s in verdicts.segments] == [s.base_offset for s in task.cleaned.segments]
    with pytest.raises(
        RuntimeError, match=re.escape(f"key range 2 of {TP} got pieces of 6 segment(s) for a range of 8")
    ):
        decide_handed(task.of_range(2, ranged.split.pieces[1:]))  # one run's piece lost
    lost = run(
        hand_out,
        RunRead(
            task=replace(
                task.of_run(segments[0]), context=replace(task.context, store=Store.open(str(tmp_path / "nowhere")))
            )
        ),
    )
    assert isinstance(lost, Failed) and not lost.failure.internal, "a missing object is the store's failure, not a bug"


def test_a_night_on_a_large_compacted_partition_checks_its_clean_runs_against_the_dirty_keys_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A compacted partition (a unique clean section of several segments, tombstones with their horizons, keyless
    # records), then a night of updates, new keys and tombstones: cleaned against its dirty keys, or in one task.
    spec = {"records": 12_000, "keys": 6_000}
    night = GenerateSpec(
        records=600,
        keys=6_300,
        partitions=1,
        segment_records=300,
        tombstone_ratio=0.05,
        keyless_ratio=0.01,
        seed=4,
        end_time_ms=NOW - DAY // 2,
    )
    stores = {}
    for name in ("whole", "mapped"):
        stores[name] = store_of(tmp_path / name, **spec)
        assert not Cleaner(InlineSession(), stores[name], settings(1_000_000)).run(NOW - DAY // 2).failed
        generate(stores[name], night, now_ms=NOW - DAY // 2)
    compacted = stores["mapped"].manifest(TP)
    clean = [s for s in compacted.segments if s.next_offset <= compacted.first_dirty_offset]
    assert compacted.clean_keys_unique and len(clean) >= 3
    monkeypatch.setattr(paths, "DIRTY_KEYS_FROM_BYTES", 0)
    nightly = {"log.cleaner.min.cleanable.ratio": 0.01}
    cleaner = Cleaner(InlineSession(), stores["mapped"], settings(2_000, **nightly))
    plan = plan_store(stores["mapped"], cleaner.settings, NOW)
    task = cleaner.task(plan.to_clean[0], NOW)
    assert paths.path_of(task) is paths.AGAINST_DIRTY_KEYS and task.split.key_ranges == 1, "the dirty keys alone count"
    seen = reads(monkeypatch)
    report = cleaner.run(NOW, compaction_plan=plan)
    assert not report.failed
    read_once = all(seen[s.base_offset, "decision"] == 1 and not seen[s.base_offset, "other"] for s in clean)
    monkeypatch.setattr(paths, "DIRTY_KEYS_FROM_BYTES", 1 << 40)
    whole = Cleaner(InlineSession(), stores["whole"], settings(1_000_000, **nightly)).run(NOW)
    assert not whole.failed
    assert cleaned(stores["mapped"]) == cleaned(stores["whole"])
    layouts = {
        name: [
            (s.base_offset, s.record_count, s.deletes.count if s.deletes else 0) for s in store.manifest(TP).segments
        ]
        for name, store in stores.items()
    }
    assert layouts["mapped"] == layouts["whole"]
    vectors = [s for s in stores["mapped"].manifest(TP).segments if s.deletes is not None]
    assert vectors and report.partitions[0].stats.segments.deletion_vectors_written == len(vectors)
    assert report.partitions[0].stats.bytes_written == whole.partitions[0].stats.bytes_written, (
        "the vectors the deciding tasks wrote count in the bytes written"
    )
    assert read_once, "each clean segment read once: its deletion vector comes from the read that decided it"


class RecordingStages(InlineSession):
    """The stages in this process, noting the bins of each stage: (its task body, the units in each task)."""

    def __init__(self) -> None:
        super().__init__()
        self.stages: list[tuple[str, list[int]]] = []

    def map_tasks(self, body: Any, bins: Any, threads: int = 1) -> Any:
        self.stages.append((getattr(body, "__name__", ""), [len(b) for b in bins]))
        return super().map_tasks(body, bins, threads)


def test_apply_jobs_are_packed_by_the_records_they_rewrite(tmp_path: Path) -> None:
    """Three segments each lose a record in a pass split into key ranges: each rewrite holds more records than a
    task packs together (task.max.records / 20, at least one record), so each gets a task of its own; the progress
    line says what the stage applies."""
    store = Store.open(str(tmp_path))
    for i in range(3):
        store.append(TP, keyed(f"k{i}a=1 k{i}b=1 k{i}c=1 k{i}d=1"), now_ms=NOW)
    store.append(TP, keyed("k0a=2 k1a=2 k2a=2"), now_ms=NOW)
    store.append(TP, keyed("active=1"), now_ms=NOW)
    stages = RecordingStages()
    config = settings_with(
        {
            "log.cleanup.policy": "compact",
            "log.cleaner.min.cleanable.ratio": 0.0,
            "log.segment.bytes": 300,
            "cleaner": {"task.max.records": 8, "deletion.vector.max.ratio": 0},
        }
    )
    lines: list[str] = []
    report = Cleaner(stages, store, config, progress=lines.append).run(NOW)
    assert not report.failed, [r.error for r in report.failed]
    assert [bins for body, bins in stages.stages if body == "apply_listed"] == [[1, 1, 1]]
    assert "applying: 3 rewrite(s) of 3 segment(s), 0 deletion vector(s)" in lines


def test_units_are_packed_largest_first_into_tasks_of_a_twentieth_of_task_max_records() -> None:
    """Small units share a task until it holds task.max.records / 20 records (at least one), the largest first; a unit
    larger than that has a task of its own."""
    runner = paths.Runner(InlineSession(), task_max_records=100)  # tasks of up to 5 records

    def weight(unit: str) -> int:
        return int(unit[1:])

    assert runner.packed(["a3", "b1", "c1", "d2", "e4", "f6"], weight) == [["f6"], ["e4"], ["a3", "d2"], ["b1", "c1"]]
    assert runner.packed(["a5", "b1"], weight) == [["a5"], ["b1"]]
    assert paths.Runner(InlineSession(), task_max_records=20).packed(["a1", "b1"], weight) == [["a1"], ["b1"]]
    assert paths.Runner(InlineSession(), task_max_records=19).packed(["a1", "b1"], weight) == [["a1"], ["b1"]]
