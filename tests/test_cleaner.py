"""The clean pass on the store: Kafka's record-level scenarios (reference §8), isolation, concurrency, reruns."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from compaction.cleaner import PLANS, Cleaner, _Work, plan_store
from compaction.config import Settings
from compaction.generate import GenerateSpec, generate
from compaction.layout import ApplyPolicy, SegmentOutcome, plan_jobs
from compaction.manifest import Manifest, SegmentMeta
from compaction.report import RunReport
from compaction.segment import records
from compaction.store import Store, TopicPartition, Writer
from compaction.verify import verify

pytestmark = pytest.mark.spark

TP = TopicPartition("t", 0)
NOW = 1_800_000_000_000
DAY = 86_400_000
SETTINGS = Settings.load(overrides={"log.cleanup.policy": "compact", "log.cleaner.min.cleanable.ratio": 0.0},
                         environ={})


@pytest.fixture(params=PLANS)
def plan(request: pytest.FixtureRequest) -> str:
    return request.param


def clean(spark, store: Store, plan: str, now: int = NOW, settings: Settings = SETTINGS,  # type: ignore[no-untyped-def]
          **kwargs: Any) -> RunReport:
    report = Cleaner(spark, store, settings, dedupe_plan=plan).run(now, **kwargs)
    problems = [p for r in verify(store) for p in r.problems]
    assert problems == [], problems
    return report


def rec(offset: int, key: str | None, value: str | None = "v", **fields: Any) -> dict[str, Any]:
    return {"offset": offset, "key": key, "value": value, **fields}


def append(store: Store, *rows: dict[str, Any], tp: TopicPartition = TP, now: int = NOW) -> Manifest:
    return store.append(tp, records(rows), now_ms=now)


def layout(store: Store, segments: list[tuple[int, int, list[dict[str, Any]]]], tp: TopicPartition = TP) -> Manifest:
    """Commit segments with exact offset ranges ``(base, next, rows)`` (Kafka's logs can have gaps at ends)."""
    metas = [store.write_segment(tp, records(rows), base, end, created_ms=NOW) for base, end, rows in segments]
    end = metas[-1].next_offset
    return store.commit(tp, lambda _: {"log_start_offset": metas[0].base_offset, "log_end_offset": end,
                                       "last_stable_offset": end, "first_dirty_offset": metas[0].base_offset,
                                       "segments": tuple(metas)}, writer=Writer(), operation="append", now_ms=NOW)


def offsets(store: Store, tp: TopicPartition = TP) -> list[int]:
    return store.read(tp, columns=["offset"]).column("offset").to_pylist()


def keys(store: Store, tp: TopicPartition = TP) -> list[str]:
    """Kafka's keysInLog: keys of data records with a value, in offset order."""
    return [r["key"].decode() for r in store.read(tp).to_pylist()
            if not r["is_control"] and r["value"] is not None and r["key"] is not None]


def T(producer: int, offset: int, key: int) -> dict[str, Any]:  # the reference's notation
    return rec(offset, str(key), str(key), producer_id=producer, is_transactional=True)


def C(producer: int, offset: int) -> dict[str, Any]:
    return rec(offset, None, None, producer_id=producer, is_control=True, control_type="commit")


def A(producer: int, offset: int) -> dict[str, Any]:
    return rec(offset, None, None, producer_id=producer, is_control=True, control_type="abort")


def test_t1_keys_with_a_later_version_go_and_others_survive(spark, local_store: Store, plan: str) -> None:  # type: ignore[no-untyped-def]
    for base in (0, 14, 28):
        append(local_store, *(rec(i, str(i), str(i)) for i in range(base, base + 14)))
    append(local_store, *(rec(42 + i, str(k), "new") for i, k in enumerate((1, 3, 5, 7, 9))))
    append(local_store, rec(47, "active"))
    report = clean(spark, local_store, plan)
    expected = [str(i) for i in range(42) if i not in (1, 3, 5, 7, 9)] + ["1", "3", "5", "7", "9", "active"]
    assert keys(local_store) == expected
    assert report.partitions[0].stats["dropped"] == {"superseded": 5}
    assert local_store.manifest(TP).first_dirty_offset == 47


def test_t7_checkpoint_moves_past_offset_gaps(spark, local_store: Store, plan: str) -> None:  # type: ignore[no-untyped-def]
    layout(local_store, [(0, 11, [rec(i, str(i)) for i in range(10)]), (11, 12, [rec(11, "a")])])
    clean(spark, local_store, plan)
    assert local_store.manifest(TP).first_dirty_offset == 11
    other = TopicPartition("t", 1)
    layout(local_store, [(0, 15, [rec(i, str(i)) for i in range(10)]),
                         (15, 30, [rec(i, str(i)) for i in range(15, 25)]), (30, 31, [rec(30, "a")])], tp=other)
    clean(spark, local_store, plan)
    assert local_store.manifest(other).first_dirty_offset == 30
    assert offsets(local_store, other) == [*range(10), *range(15, 25), 30]


@pytest.mark.parametrize("keyless", ["keep", "drop"])
def test_t9_keyless_records_are_kept_or_dropped_and_counted(spark, local_store: Store, keyless: str) -> None:  # type: ignore[no-untyped-def]
    append(local_store, *(rec(i, None, f"v{i}") for i in range(5)))
    append(local_store, *(rec(i, str(i)) for i in range(5, 10)))
    append(local_store, rec(10, "active"))
    settings = Settings.load(overrides={"log.cleanup.policy": "compact", "cleaner": {"keyless.records": keyless}},
                             environ={})
    report = clean(spark, local_store, "window", settings=settings)
    stats = report.partitions[0].stats
    if keyless == "keep":
        assert offsets(local_store) == list(range(11))
        assert stats["invalid_messages_read"] == 0
    else:
        assert offsets(local_store) == list(range(5, 11))
        assert stats["invalid_messages_read"] == 5 and stats["dropped"] == {"keyless": 5}


def test_t10_tombstones_remove_their_keys_and_stay_with_a_horizon(spark, local_store: Store, plan: str) -> None:  # type: ignore[no-untyped-def]
    append(local_store, *(rec(i, str(i), str(i)) for i in range(14)))
    append(local_store, rec(14, "14", "14"), *(rec(15 + j, str(2 * j), None) for j in range(8)))
    append(local_store, *(rec(i, str(i), str(i)) for i in range(23, 30)))
    append(local_store, rec(30, "active"))
    clean(spark, local_store, plan)
    remaining = keys(local_store)
    assert not {str(k) for k in range(0, 15, 2)} & set(remaining)
    table = local_store.read(TP)
    tombstones = [r for r in table.to_pylist() if r["value"] is None]
    assert [r["offset"] for r in tombstones] == list(range(15, 23))
    assert {r["delete_horizon_ms"] for r in tombstones} == {NOW + DAY}


def test_t11_tombstone_horizon_comes_from_cleaning_time_not_record_time(spark, local_store: Store, plan: str) -> None:  # type: ignore[no-untyped-def]
    append(local_store, rec(0, "0", "0", timestamp=NOW + DAY + 10_000))
    append(local_store, rec(1, "filler-1"))
    clean(spark, local_store, plan)
    append(local_store, rec(2, "0", None, timestamp=NOW - DAY - 10_000))
    append(local_store, rec(3, "filler-3"))
    clean(spark, local_store, plan)
    append(local_store, rec(4, "1", "1"))
    append(local_store, rec(5, "filler-5"))
    clean(spark, local_store, plan)
    rows = local_store.read(TP).to_pylist()
    assert [(r["offset"], r["value"], r["delete_horizon_ms"]) for r in rows[:2]] == [
        (1, b"v", None), (2, None, NOW + DAY)]


def test_t12_tombstone_expires_over_later_runs_even_without_new_data(spark, local_store: Store, plan: str) -> None:  # type: ignore[no-untyped-def]
    append(local_store, rec(0, "k", "1"))
    append(local_store, rec(1, "k", None))
    append(local_store, rec(2, "active"))
    clean(spark, local_store, plan, now=NOW)
    assert offsets(local_store) == [1, 2]
    before = local_store.manifest(TP).version
    report = clean(spark, local_store, plan, now=NOW + DAY - 1)
    assert local_store.manifest(TP).version == before and report.totals["cleaned"] == 0
    report = clean(spark, local_store, plan, now=NOW + DAY)
    assert report.partitions[0].reason == "tombstones expired: delete horizon passed"
    assert report.partitions[0].stats["dropped"] == {"tombstone_expired": 1}
    assert offsets(local_store) == [2]
    assert local_store.manifest(TP).log_end_offset == 3, "the offset range is kept when records go"


def test_t16_transaction_aware_cleaning(spark, local_store: Store, plan: str) -> None:  # type: ignore[no-untyped-def]
    append(local_store, T(1, 0, 1), T(1, 1, 2), T(2, 2, 2), T(2, 3, 3), T(1, 4, 3), T(1, 5, 4), A(1, 6), C(2, 7),
           T(1, 8, 2), C(1, 9))
    append(local_store, rec(10, "active"))
    report = clean(spark, local_store, plan)
    assert keys(local_store) == ["3", "2", "active"]
    assert offsets(local_store) == [3, 6, 7, 8, 9, 10]
    assert report.partitions[0].stats["dropped"] == {"aborted": 4, "superseded": 1}


def test_t17_transactions_spanning_segments(spark, local_store: Store, plan: str) -> None:  # type: ignore[no-untyped-def]
    append(local_store, T(1, 0, 1), T(1, 1, 2), T(3, 2, 2), T(3, 3, 3), T(2, 4, 3), T(2, 5, 4))
    append(local_store, T(2, 6, 5), T(2, 7, 6), T(3, 8, 6), T(3, 9, 7), T(1, 10, 7), T(1, 11, 8), A(2, 12),
           T(3, 13, 8), T(3, 14, 9), C(3, 15), T(1, 16, 9), T(1, 17, 10), A(1, 18))
    clean(spark, local_store, plan)
    assert keys(local_store) == ["2", "3", "5", "6", "6", "7", "7", "8", "8", "9", "9", "10"]
    manifest = append(local_store, T(2, 19, 11), T(1, 20, 12))
    assert manifest.last_stable_offset == 19, "the open transactions bound the cleanable range"
    clean(spark, local_store, plan)
    assert keys(local_store) == ["2", "3", "6", "7", "8", "9", "11", "12"]


def test_t18_commit_marker_is_stamped_once_its_records_are_gone_then_removed(spark, local_store: Store,  # type: ignore[no-untyped-def]
                                                                             plan: str) -> None:
    append(local_store, T(1, 0, 1), T(1, 1, 2), T(1, 2, 3), C(1, 3))
    append(local_store, T(1, 4, 2), C(1, 5))
    append(local_store, rec(6, "filler-6"))
    clean(spark, local_store, plan)
    assert keys(local_store) == ["1", "3", "2", "filler-6"]
    assert offsets(local_store) == [0, 2, 3, 4, 5, 6]
    append(local_store, T(1, 7, 1), T(1, 8, 3), C(1, 9))
    append(local_store, rec(10, "filler-10"))
    clean(spark, local_store, plan)
    assert offsets(local_store) == [3, 4, 5, 6, 7, 8, 9, 10], "@3 stays: this pass still read its records"
    append(local_store, rec(11, "filler-11"))
    clean(spark, local_store, plan)
    horizons = {r["offset"]: r["delete_horizon_ms"] for r in local_store.read(TP).to_pylist()}
    assert horizons[3] == NOW + DAY and horizons[5] is None, "only the marker with no records left is stamped"
    clean(spark, local_store, plan, now=NOW + DAY)
    assert offsets(local_store) == [4, 5, 6, 7, 8, 9, 10, 11]


def test_a_corrupt_partition_is_uncleanable_and_the_others_commit(spark, local_store: Store) -> None:  # type: ignore[no-untyped-def]
    partitions = [TopicPartition("t", i) for i in range(3)]
    for tp in partitions:
        append(local_store, rec(0, "a"), rec(1, "a"), tp=tp)
        append(local_store, rec(2, "active"), tp=tp)
    bad = local_store.manifest(partitions[1]).segments[0]
    path = local_store.storage.path(f"{partitions[1].prefix}/{bad.path}")
    data = local_store.storage.fs.cat_file(path)
    local_store.storage.fs.pipe_file(path, data[: len(data) // 2])
    before = {e.name for e in local_store.storage.list_dir(f"{partitions[1].prefix}/segments")}

    report = Cleaner(spark, local_store, SETTINGS).run(NOW)
    status = {r.partition: r.status for r in report.partitions}
    assert status == {"t-0": "cleaned", "t-1": "failed", "t-2": "cleaned"}
    failed = report.failed[0]
    assert "CorruptSegmentError" in (failed.error or "") and bad.path.split("/")[-1] in (failed.error or "")
    assert report.metrics["uncleanable-partitions-count"] == 1
    assert local_store.versions(partitions[1]) == [1, 2], "the corrupt partition is untouched"
    assert {e.name for e in local_store.storage.list_dir(f"{partitions[1].prefix}/segments")} == before
    assert offsets(local_store, partitions[0]) == [1, 2]


def test_an_append_during_the_run_survives_and_stays_dirty(spark, local_store: Store, plan: str) -> None:  # type: ignore[no-untyped-def]
    append(local_store, rec(0, "a"), rec(1, "a"), rec(2, "b"))
    append(local_store, rec(3, "active"))
    report = Cleaner(spark, local_store, SETTINGS, dedupe_plan=plan).run(
        NOW, before_commit=lambda: append(local_store, rec(4, "a", "late")))
    assert report.partitions[0].status == "cleaned"
    manifest = local_store.manifest(TP)
    assert offsets(local_store) == [1, 2, 3, 4]
    assert manifest.first_dirty_offset == 3 and manifest.segments[-1].base_offset == 4
    append(local_store, rec(5, "active2"))
    clean(spark, local_store, plan)
    assert [r["value"] for r in local_store.read(TP).to_pylist() if r["key"] == b"a"] == [b"late"]


def test_a_second_run_at_the_same_time_rewrites_nothing(spark, local_store: Store) -> None:  # type: ignore[no-untyped-def]
    append(local_store, rec(0, "a"), rec(1, "a"), rec(2, "b", None))
    append(local_store, rec(3, "active"))
    first = clean(spark, local_store, "window")
    assert first.totals["cleaned"] == 1
    objects = {e.name for e in local_store.storage.list_dir(f"{TP.prefix}/segments")}
    second = clean(spark, local_store, "window")
    assert second.totals["cleaned"] == 0 and second.totals["bytes_written"] == 0
    assert local_store.versions(TP) == [1, 2, 3]
    assert {e.name for e in local_store.storage.list_dir(f"{TP.prefix}/segments")} == objects


def test_untouched_segments_stay_and_changed_ones_are_rewritten_or_get_deletion_vectors(  # type: ignore[no-untyped-def]
        spark, local_store: Store) -> None:
    no_vectors = Settings.load(overrides={"log.cleanup.policy": "compact", "log.cleaner.min.cleanable.ratio": 0.0,
                                          "cleaner": {"deletion.vector.max.ratio": 0}}, environ={})
    for tp, settings in ((TopicPartition("t", 0), no_vectors), (TopicPartition("t", 1), SETTINGS)):
        append(local_store, *(rec(i, f"k{i}") for i in range(0, 10)), tp=tp)
        append(local_store, *(rec(i, f"k{i}") for i in range(10, 20)), tp=tp)
        append(local_store, rec(20, "active"), tp=tp)
        clean(spark, local_store, "arrow", settings=settings, topics="t")  # one merged clean segment [0, 20)
        first = local_store.manifest(tp).segments[0]
        assert (first.base_offset, first.next_offset) == (0, 20)
        append(local_store, rec(21, "new1"), rec(22, "k5", "updated"), tp=tp)
        append(local_store, rec(23, "active2"), tp=tp)
        report = clean(spark, local_store, "arrow", settings=settings)
        stats = next(r for r in report.partitions if r.partition == str(tp)).stats
        segment = local_store.manifest(tp).segments[0]
        if settings is no_vectors:  # Kafka's way: the clean segment that lost k5 is rewritten with its neighbours
            assert (stats["segments_rewritten"], stats["deletion_vectors_written"]) == (3, 0)
            assert segment.path != first.path and segment.next_offset == 23
        else:  # the default: the clean segment keeps its object and gains a deletion vector
            assert (stats["segments_rewritten"], stats["deletion_vectors_written"]) == (2, 1)
            assert segment.path == first.path and segment.deletes is not None and segment.deletes.count == 1
        assert [r["key"] for r in local_store.read(tp).to_pylist()].count(b"k5") == 1
        assert offsets(local_store, tp) == [*range(0, 5), *range(6, 24)]


def test_deletion_vectors_are_folded_in_when_too_many_or_too_old(spark, local_store: Store) -> None:  # type: ignore[no-untyped-def]
    append(local_store, *(rec(i, f"k{i}") for i in range(10)))
    append(local_store, rec(10, "active"))
    clean(spark, local_store, "arrow")
    first = local_store.manifest(TP).segments[0]
    append(local_store, rec(11, "k1", "new"))
    append(local_store, rec(12, "active2"))
    clean(spark, local_store, "arrow")
    assert local_store.manifest(TP).segments[0].deletes.count == 1  # type: ignore[union-attr]
    append(local_store, rec(13, "k2", "new"), rec(14, "k3", "new"))  # 3 of 10 deleted: past the 0.2 ratio
    append(local_store, rec(15, "active3"))
    clean(spark, local_store, "arrow")
    rewritten = local_store.manifest(TP).segments[0]
    assert rewritten.path != first.path and rewritten.deletes is None and rewritten.record_count < 10

    append(local_store, rec(16, "k4", "new"))
    append(local_store, rec(17, "active4"))
    clean(spark, local_store, "arrow")
    aged = local_store.manifest(TP).segments[0]
    assert aged.deletes is not None and aged.deletes.created_ms == NOW
    week = 604_800_000
    report = clean(spark, local_store, "arrow", now=NOW + week)
    assert report.partitions[0].reason.startswith("deletion vectors older than deletion.vector.max.age.ms")
    purged = local_store.manifest(TP).segments[0]
    assert purged.deletes is None and purged.path != aged.path, "deleted records are physically gone in time"


def test_a_large_partition_is_split_into_key_buckets_with_the_same_result(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    spec = GenerateSpec(records=12_000, keys=900, partitions=1, segment_records=1_500, tombstone_ratio=0.05,
                        keyless_ratio=0.01, seed=3, end_time_ms=NOW - DAY)
    results = {}
    for limit in (1_000_000, 3_000):
        store = Store.open(str(tmp_path / f"s{limit}"))
        generate(store, spec, now_ms=NOW - DAY)
        settings = Settings.load(overrides={"log.cleanup.policy": "compact", "log.roll.ms": 60_000,
                                            "cleaner": {"task.max.records": limit}}, environ={})
        cleaner = Cleaner(spark, store, settings)
        the_plan = plan_store(store, settings, NOW)
        tasks = cleaner.read_tasks([_Work(p) for p in the_plan.selected], NOW)
        assert len(tasks) == (4 if limit == 3_000 else 1), "12,000 records in tasks of at most 3,000"
        cleaner.run(NOW, compaction_plan=the_plan)
        # A second pass: a few updates make the clean segments lose a record or two each (deletion vectors).
        tp = TopicPartition("orders", 0)
        append(store, *(rec(20_000 + i, f"key-{i * 37:010d}") for i in range(12)), tp=tp)
        append(store, rec(20_012, "active"), tp=tp)
        small = Settings.load(overrides={"log.cleanup.policy": "compact", "log.roll.ms": 60_000,
                                         "log.cleaner.min.cleanable.ratio": 0.0,
                                         "cleaner": {"task.max.records": 200 if limit == 3_000 else limit}},
                              environ={})
        second = Cleaner(spark, store, small)
        second_plan = plan_store(store, small, NOW + 1)
        split = len(second.read_tasks([_Work(p) for p in second_plan.selected], NOW + 1)) > 1
        assert split == (limit == 3_000)
        report = second.run(NOW + 1, compaction_plan=second_plan)
        assert report.partitions[0].stats["deletion_vectors_written"] > 0
        assert [p for r in verify(store) for p in r.problems] == []
        results[limit] = store.read(tp, columns=["offset", "delete_horizon_ms"]).to_pylist()
    assert results[3_000] == results[1_000_000]


def _meta(base: int, end: int, size: int, tombstones: int = 0) -> SegmentMeta:
    return SegmentMeta(path=f"segments/{base:020d}-x.parquet", base_offset=base, next_offset=end,
                       record_count=end - base, size_bytes=size, checksum="sha256:0", created_ms=0,
                       tombstone_count=tombstones)


def test_plan_jobs_keeps_unchanged_segments_uses_vectors_and_merges_up_to_segment_bytes() -> None:
    segments = [_meta(0, 10, 1000), _meta(10, 20, 1000), _meta(20, 30, 1000), _meta(30, 40, 1000),
                _meta(40, 50, 100), _meta(50, 60, 100, tombstones=1), _meta(60, 70, 100)]
    outcomes = {0: SegmentOutcome(10, 5, 0, {}), 10: SegmentOutcome(10, 9, 0, {}), 20: SegmentOutcome(10, 10, 0, {}),
                30: SegmentOutcome(10, 10, 1, {}), 40: SegmentOutcome(10, 10, 0, {}), 50: SegmentOutcome(10, 10, 0, {}),
                60: SegmentOutcome(10, 10, 0, {})}
    policy = ApplyPolicy(segment_bytes=1000, now_ms=0)
    jobs = plan_jobs(segments, outcomes, first_dirty_offset=40, policy=policy)
    assert [([s.base_offset for s in sources], vector) for sources, vector in jobs] == [
        ([0], False), ([10], True), ([30], False), ([40, 50, 60], False)]
    no_vectors = ApplyPolicy(segment_bytes=900, now_ms=0, deletion_vector_max_ratio=0)
    jobs = plan_jobs(segments, outcomes, first_dirty_offset=70, policy=no_vectors)
    assert [([s.base_offset for s in sources], vector) for sources, vector in jobs] == [
        ([0], False), ([10], False), ([30], False)], "clean tombstones already carry their horizon"


def test_report_and_prometheus_metrics(spark, local_store: Store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from compaction.report import write_metrics

    append(local_store, rec(0, "a"), rec(1, "a"), rec(2, "b"))
    append(local_store, rec(3, "active"))
    report = clean(spark, local_store, "window")
    doc = report.to_dict()
    cleaned = doc["partitions"][0]
    assert (cleaned["version_before"], cleaned["version_after"]) == (2, 3)
    assert (cleaned["checkpoint_before"], cleaned["checkpoint_after"]) == (0, 3)
    assert cleaned["stats"]["messages_read"] == 3 and cleaned["stats"]["messages_written"] == 2
    assert report.partitions[0].summary().startswith("cleaned t-0 [0, 3): ")
    assert "33.3% fewer messages" in report.partitions[0].summary()
    path = tmp_path / "metrics.prom"
    write_metrics(report, textfile=str(path))
    text = path.read_text()
    for name in ("max_compaction_delay_secs", "uncleanable_partitions_count", "uncleanable_bytes",
                 "max_clean_time_secs", "cleaner_recopy_percent", "max_dirty_percent", "last_success_time_seconds"):
        assert f"kafka_log_cleaner_{name}{{" in text
    assert 'kafka_log_cleaner_max_dirty_percent{store="' in text


def test_retention_drops_old_segments_without_spark(local_store: Store) -> None:
    append(local_store, rec(0, "a", timestamp=NOW - 10 * DAY))
    append(local_store, rec(1, "b", timestamp=NOW - DAY))
    append(local_store, rec(2, "c", timestamp=NOW))
    settings = Settings.load(overrides={"log.cleanup.policy": "compact,delete", "log.retention.ms": 2 * DAY,
                                        "log.cleaner.min.cleanable.ratio": 1.0}, environ={})
    manifest = local_store.manifest(TP)
    change_plan = Cleaner(None, local_store, settings).run(NOW)
    assert change_plan.partitions[0].stats["dropped"] == {"retention": 1}
    after = local_store.manifest(TP)
    assert after.log_start_offset == 1 and offsets(local_store) == [1, 2]
    assert manifest.segments[0].path not in {s.path for s in after.segments}


def test_read_only_needed_columns_for_the_decision(local_store: Store) -> None:
    from compaction.tasks import ReadTask, read_facts

    append(local_store, rec(0, "a", "x" * 1000), rec(1, "b", "y" * 1000), rec(2, "a", None))
    segment = local_store.manifest(TP).segments[0]
    asked: list[list[str] | None] = []
    original = local_store.read_segment

    def spy(tp, seg, columns=None, apply_deletes=True):  # type: ignore[no-untyped-def]
        asked.append(None if columns is None else list(columns))
        return original(tp, seg, columns, apply_deletes)

    local_store.read_segment = spy  # type: ignore[method-assign]
    facts = read_facts(ReadTask(TP, local_store, (segment,), (), "offset", "", False))
    assert facts.num_rows == 3
    assert asked == [["offset", "key", "delete_horizon_ms"]], "never values, even with tombstones"
    assert pa.types.is_binary(facts.schema.field("key").type)


def test_the_manifest_promises_unique_clean_keys_only_after_offset_strategy_passes(spark, local_store: Store) -> None:  # type: ignore[no-untyped-def]
    append(local_store, rec(0, "a"), rec(1, "a"), rec(2, "b"))
    append(local_store, rec(3, "active"))
    assert not local_store.manifest(TP).clean_keys_unique
    clean(spark, local_store, "arrow")
    assert local_store.manifest(TP).clean_keys_unique
    append(local_store, rec(4, "a"))
    assert local_store.manifest(TP).clean_keys_unique, "appends keep the promise"
    by_timestamp = Settings.load(overrides={"log.cleanup.policy": "compact", "log.cleaner.min.cleanable.ratio": 0.0,
                                            "topics": {TP.topic: {"compaction.strategy": "timestamp"}}}, environ={})
    append(local_store, rec(5, "active2"))
    clean(spark, local_store, "arrow", settings=by_timestamp)
    assert not local_store.manifest(TP).clean_keys_unique, "the timestamp strategy keeps the log's last record"
    assert offsets(local_store) == [2, 3, 4, 5]
