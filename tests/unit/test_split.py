"""A split partition's stage 1 (the Arrow plan, over ``task.max.records``): without transactions each segment is read
once and its rows handed to their key ranges; with them every range's task reads the range, keeping its own rows.
Either way the log ends as the one-task plan leaves it. Runs in this process (tests/helpers/inline.py)."""

from __future__ import annotations

import re
import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from compaction.clean import paths
from compaction.clean.cleaner import Cleaner, plan_store
from compaction.clean.payloads import RunRead
from compaction.clean.sizing import segment_runs
from compaction.clean.tasks.decide import decide_handed
from compaction.clean.tasks.facts import hand_out
from compaction.config import Settings
from compaction.engine.isolation import Failed, run
from compaction.store import Store, TopicPartition
from compaction.store.manifest import SegmentMeta
from compaction.store.objects import Objects
from compaction.store.verify import verify
from compaction.synthetic import GenerateSpec, generate
from tests.helpers import Lines
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
    """Count each segment's reads of partition TP in this process: its keys alone, its decision columns, or whole."""
    seen: Counter[tuple[int, str]] = Counter()
    original = Objects.read_segment

    def counted(self: Objects, tp: TopicPartition, segment: SegmentMeta, columns: Any = None, **kw: Any) -> pa.Table:
        kind = (
            "whole"
            if columns is None
            else "keys"
            if list(columns) == ["key"]
            else "decision"
            if "key" in columns
            else "other"
        )
        if tp == TP:
            seen[segment.base_offset, kind] += 1
        return original(self, tp, segment, columns, **kw)

    monkeypatch.setattr(Objects, "read_segment", counted)
    return seen


def cleaned(store: Store, tp: TopicPartition = TP) -> list[dict[str, Any]]:
    return store.read(tp, columns=["offset", "key", "value", "delete_horizon_ms"]).to_pylist()


def megabytes(size: int) -> str:
    """A size as progress lines give it: in MB of 2**20 bytes, to a tenth."""
    return f"{size / 2**20:,.1f} MB"


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
    stages, lines = RecordingStages(), Lines()
    cleaner = Cleaner(stages, split, settings(task_max_records), progress=lines)
    plan = plan_store(split, cleaner.settings, NOW)
    key_ranges = cleaner.task(plan.to_clean[0], NOW).split.key_ranges
    assert key_ranges == 4 if task_max_records == 3_000 else key_ranges > 4, f"{key_ranges} key ranges"
    seen = reads(monkeypatch)
    report = cleaner.run(NOW, compaction_plan=plan)
    decision_reads = [seen[s.base_offset, "decision"] for s in segments]
    keys_alone = sum(seen[s.base_offset, "keys"] for s in segments)
    assert not report.failed and report.partitions[0].stats.messages_written < 12_000
    assert cleaned(split) == cleaned(whole)
    once = not transactional
    assert decision_reads == ([1] * len(segments) if once else [key_ranges] * len(segments))
    assert keys_alone == 0, "a row's key range is its key's hash: no sample of the keys is read first"
    # A task per key range (each holds about task.max.records), and with one read of each run a task per run (each
    # of more than task.max.records / 20 records): none packed together.
    runs = len(segment_runs(segments, task_max_records))
    decided = [bins for body, bins in stages.stages if body in ("decide_range", "decide_handed")]
    assert decided == [[1] * key_ranges]
    assert [bins for body, bins in stages.stages if body == "hand_out"] == ([] if transactional else [[1] * runs])
    name = "key ranges" if transactional else "key ranges, handed over"
    assert (
        f"deciding survivors in 1 partition(s) with {key_ranges} key range(s), {len(segments)} segment(s), "
        f"{megabytes(plan.to_clean[0].work_bytes)} ({name})"
    ) in lines


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


def compacted_then_a_night(path: Path, partitions: int = 1) -> Store:
    """Compacted partitions (a unique clean section of several segments, tombstones with their horizons, keyless
    records), then a night of updates, new keys and tombstones."""
    store = store_of(path, records=12_000 * partitions, keys=6_000 * partitions, partitions=partitions)
    assert not Cleaner(InlineSession(), store, settings(1_000_000)).run(NOW - DAY // 2).failed
    night = GenerateSpec(
        records=600 * partitions,
        keys=6_300 * partitions,
        partitions=partitions,
        segment_records=300,
        tombstone_ratio=0.05,
        keyless_ratio=0.01,
        seed=4,
        end_time_ms=NOW - DAY // 2,
    )
    generate(store, night, now_ms=NOW - DAY // 2)
    return store


NIGHTLY = {"log.cleaner.min.cleanable.ratio": 0.01}
AGAINST = f"({paths.AGAINST_DIRTY_KEYS.name})"


def test_a_night_on_large_compacted_partitions_checks_their_clean_runs_against_the_dirty_keys_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two partitions cleaned against their dirty keys, or each in one task: the same logs, objects and figures.
    stores = {name: compacted_then_a_night(tmp_path / name, partitions=2) for name in ("whole", "mapped")}
    tps = [TP, TopicPartition("orders", 1)]
    compacted = stores["mapped"].manifest(TP)
    clean = [s for s in compacted.segments if s.next_offset <= compacted.first_dirty_offset]
    assert compacted.clean_keys_unique and len(clean) >= 3
    monkeypatch.setattr(paths, "DIRTY_KEYS_FROM_BYTES", 0)
    stages, lines = RecordingStages(), Lines()
    cleaner = Cleaner(stages, stores["mapped"], settings(2_000, **NIGHTLY), progress=lines)
    plan = plan_store(stores["mapped"], cleaner.settings, NOW)
    assert [cleaner.task(p, NOW).split.key_ranges for p in plan.to_clean] == [1, 1], "the dirty keys alone count"
    seen = reads(monkeypatch)
    report = cleaner.run(NOW, compaction_plan=plan)
    assert not report.failed, [r.error for r in report.failed]
    read_once = all(seen[s.base_offset, "decision"] == 1 and not seen[s.base_offset, "other"] for s in clean)
    deciding = [line for line in lines if line.startswith("deciding survivors")]
    found = re.fullmatch(r"deciding survivors in 2 partition\(s\) in (\d+) run\(s\), (.*)", deciding[0])
    segments = sum(len(p.segments) for p in plan.to_clean)
    size = megabytes(sum(p.work_bytes for p in plan.to_clean))
    assert found and found.group(2) == f"{segments} segment(s), {size} {AGAINST}", deciding
    runs = int(found.group(1))
    assert runs > 4 and [bins for body, bins in stages.stages if body == "clean_run"] == [[1] * runs], (
        "a run holds more than task.max.records / 20 records: a task each"
    )
    assert [body for body, _ in stages.stages] == ["clean_run"], (
        "one stage: the dirty sections rewritten by the tasks that decide them, the clean segments' vectors written"
    )
    dirty_runs = {f"{p.partition} run {p.first_dirty_offset}" for p in plan.to_clean}
    assert set(stages.units[0][:2]) == dirty_runs, "the dirty runs' tasks first: they decide and rewrite every record"
    monkeypatch.setattr(paths, "DIRTY_KEYS_FROM_BYTES", 1 << 40)
    stages, lines = RecordingStages(), Lines()
    whole = Cleaner(stages, stores["whole"], settings(2_000, **NIGHTLY), progress=lines).run(NOW)
    assert not whole.failed
    # Each partition holds more than task.max.records / 20 records: a task of its own.
    assert [line for line in lines if line.startswith("cleaning")] == [
        f"cleaning 2 partition(s) in 2 task(s), {segments} segment(s), {size} (plan: arrow)"
    ]
    assert [bins for body, bins in stages.stages if body == "clean_in_task"] == [[1, 1]]
    for tp in tps:
        assert cleaned(stores["mapped"], tp) == cleaned(stores["whole"], tp)
    layouts = {
        name: [
            [(s.base_offset, s.record_count, s.deletes.count if s.deletes else 0) for s in store.manifest(tp).segments]
            for tp in tps
        ]
        for name, store in stores.items()
    }
    assert layouts["mapped"] == layouts["whole"]
    for tp in tps:
        vectors = [s for s in stores["mapped"].manifest(tp).segments if s.deletes is not None]
        mapped, alone = (next(p for p in r.partitions if p.partition == str(tp)) for r in (report, whole))
        assert vectors and mapped.stats.segments.deletion_vectors_written == len(vectors)
        assert mapped.stats.segments == alone.stats.segments, "either way the same segments rewritten and vectors"
        assert mapped.stats.bytes_written == alone.stats.bytes_written, (
            "the vectors the deciding tasks wrote count in the bytes written"
        )
    assert read_once, "each clean segment read once: its deletion vector comes from the read that decided it"


def test_clean_segments_too_changed_for_a_deletion_vector_are_rewritten_after_the_dirty_section_was_in_its_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no deletion vectors allowed, the clean segments that lose records go to the apply stage while the dirty
    section is rewritten by the task that decides it: both commit together, and the log holds what the one-task plan
    leaves (the dirty section's new segments laid out apart from the clean ones)."""
    stores = {name: compacted_then_a_night(tmp_path / name) for name in ("whole", "mapped")}
    no_vectors = {**NIGHTLY, "cleaner": {"task.max.records": 2_000, "deletion.vector.max.ratio": 0}}
    monkeypatch.setattr(paths, "DIRTY_KEYS_FROM_BYTES", 0)
    stages = RecordingStages()
    report = Cleaner(stages, stores["mapped"], settings_with({**SIZED, **no_vectors})).run(NOW)
    assert not report.failed, [r.error for r in report.failed]
    assert [body for body, _ in stages.stages] == ["clean_run", "apply_listed"]
    monkeypatch.setattr(paths, "DIRTY_KEYS_FROM_BYTES", 1 << 40)
    assert not Cleaner(InlineSession(), stores["whole"], settings_with({**SIZED, **no_vectors})).run(NOW).failed
    assert cleaned(stores["mapped"]) == cleaned(stores["whole"])
    manifest = stores["mapped"].manifest(TP)
    assert not any(s.deletes for s in manifest.segments)
    (stats,) = [p.stats for p in report.partitions if p.partition == str(TP)]
    assert stats.segments.deletion_vectors_written == 0 and stats.segments.segments_written > 1
    assert [p for r in verify(stores["mapped"]) for p in r.problems] == []


def test_only_a_clean_section_larger_than_the_threshold_under_the_offset_strategy_is_checked_against_dirty_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clean section's live bytes (every segment up to the dirty section's start) against the threshold, strictly
    larger; and only under the offset strategy, where a dirty record beats every clean one of its key."""
    compacted_then_a_night(tmp_path / "night")
    manifest = Store.open(str(tmp_path / "night")).manifest(TP)
    clean_bytes = sum(s.live_size_bytes for s in manifest.segments if s.next_offset <= manifest.first_dirty_offset)

    def path_taken(name: str, threshold: int, **kafka: Any) -> str:
        shutil.copytree(tmp_path / "night", tmp_path / name)
        store = Store.open(str(tmp_path / name))
        monkeypatch.setattr(paths, "DIRTY_KEYS_FROM_BYTES", threshold)
        lines = Lines()
        report = Cleaner(InlineSession(), store, settings(2_000, **NIGHTLY, **kafka), progress=lines).run(NOW)
        assert not report.failed, [r.error for r in report.failed]
        (stage,) = [line for line in lines if line.startswith(("deciding", "cleaning"))]
        return "against the dirty keys" if stage.endswith(AGAINST) else "whole" if "(plan: arrow)" in stage else stage

    assert path_taken("above", clean_bytes - 1) == "against the dirty keys"
    assert path_taken("at", clean_bytes) == "whole"
    assert path_taken("timestamps", 0, **{"log.cleaner.compaction.strategy": "timestamp"}) == "whole"


class RecordingStages(InlineSession):
    """The stages in this process, noting the bins of each stage: (its task body, the units in each task)."""

    def __init__(self) -> None:
        super().__init__()
        self.stages: list[tuple[str, list[int]]] = []
        self.units: list[list[str]] = []  # each stage's units, in the order of its tasks

    def map_tasks(self, body: Any, bins: Any, threads: int = 1) -> Any:
        self.stages.append((getattr(body, "__name__", ""), [len(b) for b in bins]))
        self.units.append([unit.ident for b in bins for unit in b])
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
    lines = Lines()
    report = Cleaner(stages, store, config, progress=lines).run(NOW)
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


def overwrite_keeping_the_size(path: Path, size: int) -> int:
    """Overwrite a Parquet segment with its first nine tenths of rows in ``size`` bytes (padded with metadata);
    returns how many rows it holds now."""
    table = pq.read_table(path)
    cut = table.slice(0, table.num_rows * 9 // 10)
    pad = 0
    for _ in range(50):
        with pq.ParquetWriter(path, cut.schema, compression="zstd") as writer:
            writer.write_table(cut)
            writer.add_key_value_metadata({"pad": "x" * pad})
        missing = size - path.stat().st_size
        if missing == 0:
            return cut.num_rows
        pad += missing if missing > 0 else -1
    raise AssertionError(f"could not pad {path} to {size} bytes")


def test_a_segment_overwritten_while_its_key_ranges_read_it_fails_only_its_partition(tmp_path: Path) -> None:
    """With transactions every key range reads the whole range: a segment overwritten between two ranges' reads
    (a hostile or broken writer) gives them different rows, so its partition fails, saying so, and commits nothing;
    the other partition is cleaned as in one task."""
    extra = {"records": 24_000, "keys": 1_800, "partitions": 2, "transactional_ratio": 0.3, "abort_ratio": 0.3}
    store, whole = store_of(tmp_path / "split", **extra), store_of(tmp_path / "whole", **extra)
    assert not Cleaner(InlineSession(), whole, settings(1_000_000)).run(NOW).failed
    victim = store.manifest(TP).segments[2]
    path = tmp_path / "split" / "orders" / "0" / victim.path

    class Overwritten(InlineSession):
        """Runs a stage's tasks one at a time; after the first key range of partition TP read it, the segment is
        overwritten with fewer rows in as many bytes (a read of some columns checks an object's size only)."""

        def map_tasks(self, body: Any, bins: Any, threads: int = 1) -> Any:
            if getattr(body, "__name__", "") != "decide_range":
                return super().map_tasks(body, bins, threads)
            outcomes = []
            for units in bins:
                outcomes += super().map_tasks(body, [units], threads)
                if any(unit.tp == TP for unit in units) and not overwritten:
                    overwritten.append(overwrite_keeping_the_size(path, victim.size_bytes))
            return outcomes

    overwritten: list[int] = []

    before = store.manifest(TP)
    report = Cleaner(Overwritten(), store, settings(3_000)).run(NOW)
    (failed,) = report.failed
    assert failed.partition == str(TP) and re.fullmatch(
        rf"SegmentChangedError: the key ranges of {TP} read \[\d+, \d+\] live rows of segment {victim.path}: it "
        r"changed while they read it",
        failed.error or "",
    ), failed.error
    assert store.manifest(TP).version == before.version, "nothing committed"
    other = TopicPartition("orders", 1)
    assert [p.partition for p in report.partitions if p.status.value == "cleaned"] == [str(other)]
    assert cleaned(store, other) == cleaned(whole, other)
