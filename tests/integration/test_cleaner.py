"""The clean pass on the store: Kafka's record-level scenarios (reference §8), isolation, concurrency, reruns."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any, cast

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from compaction.clean.cleaner import Cleaner, plan_store
from compaction.clean.paths import reads_whole_ranges
from compaction.clean.results import PartitionResult, RunReport, Status
from compaction.config import Settings
from compaction.errors import EXIT_PARTIAL, StoreError
from compaction.job import JobOptions, run_job
from compaction.rules import WinnerSearch
from compaction.store import Replacement, Store, TopicPartition, Writer
from compaction.store.manifest import Manifest, SegmentMeta
from compaction.store.segment import records
from compaction.store.verify import verify
from compaction.synthetic import GenerateSpec, generate
from tests.helpers.builders import rec
from tests.helpers.settings import settings_with

pytestmark = pytest.mark.spark

TP = TopicPartition("t", 0)
NOW = 1_800_000_000_000
DAY = 86_400_000
SETTINGS = settings_with({"log.cleanup.policy": "compact", "log.cleaner.min.cleanable.ratio": 0.0})


@pytest.fixture(params=list(WinnerSearch))
def plan(request: pytest.FixtureRequest) -> str:
    return request.param


def clean(spark, store: Store, plan: str, now: int = NOW, settings: Settings = SETTINGS, **kwargs: Any) -> RunReport:
    report = Cleaner(spark, store, settings, dedupe_plan=plan).run(now, **kwargs)
    problems = [p for r in verify(store) for p in r.problems]
    assert problems == [], problems
    return report


def append(store: Store, *rows: dict[str, Any], tp: TopicPartition = TP, now: int = NOW) -> Manifest:
    return store.append(tp, records(rows), now_ms=now)


def layout(store: Store, segments: list[tuple[int, int, list[dict[str, Any]]]], tp: TopicPartition = TP) -> Manifest:
    """Commit segments with exact offset ranges ``(base, next, rows)`` (Kafka's logs can have gaps at ends)."""
    metas = [store.objects.write_segment(tp, records(rows), base, end, created_ms=NOW) for base, end, rows in segments]
    end = metas[-1].next_offset
    return store.commit(
        tp,
        lambda _: {
            "log_start_offset": metas[0].base_offset,
            "log_end_offset": end,
            "last_stable_offset": end,
            "first_dirty_offset": metas[0].base_offset,
            "segments": tuple(metas),
        },
        writer=Writer(),
        operation="append",
        now_ms=NOW,
    )


def offsets(store: Store, tp: TopicPartition = TP) -> list[int]:
    return store.read(tp, columns=["offset"]).column("offset").to_pylist()


def keys(store: Store, tp: TopicPartition = TP) -> list[str]:
    """Kafka's keysInLog: keys of data records with a value, in offset order."""
    return [
        r["key"].decode()
        for r in store.read(tp).to_pylist()
        if not r["is_control"] and r["value"] is not None and r["key"] is not None
    ]


def T(producer: int, offset: int, key: int) -> dict[str, Any]:  # the reference's notation
    return rec(str(key), str(key), offset, producer_id=producer, is_transactional=True)


def C(producer: int, offset: int) -> dict[str, Any]:
    return rec(None, None, offset, producer_id=producer, is_control=True, control_type="commit")


def A(producer: int, offset: int) -> dict[str, Any]:
    return rec(None, None, offset, producer_id=producer, is_control=True, control_type="abort")


def test_t1_keys_with_a_later_version_go_and_others_survive(spark, local_store: Store, plan: str) -> None:
    for base in (0, 14, 28):
        append(local_store, *(rec(str(i), str(i), i) for i in range(base, base + 14)))
    append(local_store, *(rec(str(k), "new", 42 + i) for i, k in enumerate((1, 3, 5, 7, 9))))
    append(local_store, rec("active", offset=47))
    report = clean(spark, local_store, plan)
    expected = [str(i) for i in range(42) if i not in (1, 3, 5, 7, 9)] + ["1", "3", "5", "7", "9", "active"]
    assert keys(local_store) == expected
    assert report.partitions[0].stats.dropped == {"superseded": 5}
    assert local_store.manifest(TP).first_dirty_offset == 47


def test_t7_checkpoint_moves_past_offset_gaps(spark, local_store: Store, plan: str) -> None:
    layout(local_store, [(0, 11, [rec(str(i), offset=i) for i in range(10)]), (11, 12, [rec("a", offset=11)])])
    clean(spark, local_store, plan)
    assert local_store.manifest(TP).first_dirty_offset == 11
    other = TopicPartition("t", 1)
    layout(
        local_store,
        [
            (0, 15, [rec(str(i), offset=i) for i in range(10)]),
            (15, 30, [rec(str(i), offset=i) for i in range(15, 25)]),
            (30, 31, [rec("a", offset=30)]),
        ],
        tp=other,
    )
    clean(spark, local_store, plan)
    assert local_store.manifest(other).first_dirty_offset == 30
    assert offsets(local_store, other) == [*range(10), *range(15, 25), 30]


@pytest.mark.parametrize("keyless", ["keep", "drop"])
def test_t9_keyless_records_are_kept_or_dropped_and_counted(spark, local_store: Store, keyless: str) -> None:
    append(local_store, *(rec(None, f"v{i}", i) for i in range(5)))
    append(local_store, *(rec(str(i), offset=i) for i in range(5, 10)))
    append(local_store, rec("active", offset=10))
    settings = settings_with({"log.cleanup.policy": "compact", "cleaner": {"keyless.records": keyless}})
    report = clean(spark, local_store, "window", settings=settings)
    stats = report.partitions[0].stats
    if keyless == "keep":
        assert offsets(local_store) == list(range(11))
        assert stats.invalid_messages_read == 0
    else:
        assert offsets(local_store) == list(range(5, 11))
        assert stats.invalid_messages_read == 5 and stats.dropped == {"keyless": 5}


def test_t10_tombstones_remove_their_keys_and_stay_with_a_horizon(spark, local_store: Store, plan: str) -> None:
    append(local_store, *(rec(str(i), str(i), i) for i in range(14)))
    append(local_store, rec("14", "14", 14), *(rec(str(2 * j), None, 15 + j) for j in range(8)))
    append(local_store, *(rec(str(i), str(i), i) for i in range(23, 30)))
    append(local_store, rec("active", offset=30))
    clean(spark, local_store, plan)
    remaining = keys(local_store)
    assert not {str(k) for k in range(0, 15, 2)} & set(remaining)
    table = local_store.read(TP)
    tombstones = [r for r in table.to_pylist() if r["value"] is None]
    assert [r["offset"] for r in tombstones] == list(range(15, 23))
    assert {r["delete_horizon_ms"] for r in tombstones} == {NOW + DAY}


def test_t11_tombstone_horizon_comes_from_cleaning_time_not_record_time(spark, local_store: Store, plan: str) -> None:
    append(local_store, rec("0", "0", 0, timestamp=NOW + DAY + 10_000))
    append(local_store, rec("filler-1", offset=1))
    clean(spark, local_store, plan)
    append(local_store, rec("0", None, 2, timestamp=NOW - DAY - 10_000))
    append(local_store, rec("filler-3", offset=3))
    clean(spark, local_store, plan)
    append(local_store, rec("1", "1", 4))
    append(local_store, rec("filler-5", offset=5))
    clean(spark, local_store, plan)
    rows = local_store.read(TP).to_pylist()
    assert [(r["offset"], r["value"], r["delete_horizon_ms"]) for r in rows[:2]] == [
        (1, b"v", None),
        (2, None, NOW + DAY),
    ]


def test_t12_tombstone_expires_over_later_runs_even_without_new_data(spark, local_store: Store, plan: str) -> None:
    append(local_store, rec("k", "1", 0))
    append(local_store, rec("k", None, 1))
    append(local_store, rec("active", offset=2))
    clean(spark, local_store, plan, now=NOW)
    assert offsets(local_store) == [1, 2]
    before = local_store.manifest(TP).version
    report = clean(spark, local_store, plan, now=NOW + DAY - 1)
    assert local_store.manifest(TP).version == before and report.totals["cleaned"] == 0
    report = clean(spark, local_store, plan, now=NOW + DAY)
    assert report.partitions[0].reason == "tombstones expired: delete horizon passed"
    assert report.partitions[0].stats.dropped == {"tombstone_expired": 1}
    assert offsets(local_store) == [2]
    assert local_store.manifest(TP).log_end_offset == 3, "the offset range is kept when records go"


def test_t16_transaction_aware_cleaning(spark, local_store: Store, plan: str) -> None:
    append(
        local_store,
        T(1, 0, 1),
        T(1, 1, 2),
        T(2, 2, 2),
        T(2, 3, 3),
        T(1, 4, 3),
        T(1, 5, 4),
        A(1, 6),
        C(2, 7),
        T(1, 8, 2),
        C(1, 9),
    )
    append(local_store, rec("active", offset=10))
    report = clean(spark, local_store, plan)
    assert keys(local_store) == ["3", "2", "active"]
    assert offsets(local_store) == [3, 6, 7, 8, 9, 10]
    assert report.partitions[0].stats.dropped == {"aborted": 4, "superseded": 1}


def test_t17_transactions_spanning_segments(spark, local_store: Store, plan: str) -> None:
    append(local_store, T(1, 0, 1), T(1, 1, 2), T(3, 2, 2), T(3, 3, 3), T(2, 4, 3), T(2, 5, 4))
    append(
        local_store,
        T(2, 6, 5),
        T(2, 7, 6),
        T(3, 8, 6),
        T(3, 9, 7),
        T(1, 10, 7),
        T(1, 11, 8),
        A(2, 12),
        T(3, 13, 8),
        T(3, 14, 9),
        C(3, 15),
        T(1, 16, 9),
        T(1, 17, 10),
        A(1, 18),
    )
    clean(spark, local_store, plan)
    assert keys(local_store) == ["2", "3", "5", "6", "6", "7", "7", "8", "8", "9", "9", "10"]
    manifest = append(local_store, T(2, 19, 11), T(1, 20, 12))
    assert manifest.last_stable_offset == 19, "the open transactions bound the cleanable range"
    clean(spark, local_store, plan)
    assert keys(local_store) == ["2", "3", "6", "7", "8", "9", "11", "12"]


def test_t18_commit_marker_is_stamped_once_its_records_are_gone_then_removed(
    spark, local_store: Store, plan: str
) -> None:
    append(local_store, T(1, 0, 1), T(1, 1, 2), T(1, 2, 3), C(1, 3))
    append(local_store, T(1, 4, 2), C(1, 5))
    append(local_store, rec("filler-6", offset=6))
    clean(spark, local_store, plan)
    assert keys(local_store) == ["1", "3", "2", "filler-6"]
    assert offsets(local_store) == [0, 2, 3, 4, 5, 6]
    append(local_store, T(1, 7, 1), T(1, 8, 3), C(1, 9))
    append(local_store, rec("filler-10", offset=10))
    clean(spark, local_store, plan)
    assert offsets(local_store) == [3, 4, 5, 6, 7, 8, 9, 10], "@3 stays: this pass still read its records"
    append(local_store, rec("filler-11", offset=11))
    clean(spark, local_store, plan)
    horizons = {r["offset"]: r["delete_horizon_ms"] for r in local_store.read(TP).to_pylist()}
    assert horizons[3] == NOW + DAY and horizons[5] is None, "only the marker with no records left is stamped"
    clean(spark, local_store, plan, now=NOW + DAY)
    assert offsets(local_store) == [4, 5, 6, 7, 8, 9, 10, 11]


def test_a_corrupt_partition_is_uncleanable_and_the_others_commit(spark, local_store: Store) -> None:
    partitions = [TopicPartition("t", i) for i in range(3)]
    for tp in partitions:
        append(local_store, rec("a", offset=0), rec("a", offset=1), tp=tp)
        append(local_store, rec("active", offset=2), tp=tp)
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


def test_an_append_during_the_run_survives_and_stays_dirty(spark, local_store: Store, plan: str) -> None:
    append(local_store, rec("a", offset=0), rec("a", offset=1), rec("b", offset=2))
    append(local_store, rec("active", offset=3))
    cleaner = Cleaner(spark, local_store, SETTINGS, dedupe_plan=plan)
    commit = cleaner.commit

    def append_then_commit(*pass_: Any) -> list[PartitionResult]:  # an append between the Spark stages and the commit
        append(local_store, rec("a", "late", 4))
        return commit(*pass_)

    cleaner.commit = append_then_commit  # type: ignore[method-assign,assignment]
    report = cleaner.run(NOW)
    assert report.partitions[0].status == "cleaned"
    manifest = local_store.manifest(TP)
    assert offsets(local_store) == [1, 2, 3, 4]
    assert manifest.first_dirty_offset == 3 and manifest.segments[-1].base_offset == 4
    append(local_store, rec("active2", offset=5))
    clean(spark, local_store, plan)
    assert [r["value"] for r in local_store.read(TP).to_pylist() if r["key"] == b"a"] == [b"late"]


def test_a_second_run_at_the_same_time_rewrites_nothing(spark, local_store: Store) -> None:
    append(local_store, rec("a", offset=0), rec("a", offset=1), rec("b", None, 2))
    append(local_store, rec("active", offset=3))
    first = clean(spark, local_store, "window")
    assert first.totals["cleaned"] == 1
    objects = {e.name for e in local_store.storage.list_dir(f"{TP.prefix}/segments")}
    second = clean(spark, local_store, "window")
    assert second.totals["cleaned"] == 0 and second.totals["bytes_written"] == 0
    assert local_store.versions(TP) == [1, 2, 3]
    assert {e.name for e in local_store.storage.list_dir(f"{TP.prefix}/segments")} == objects


def test_untouched_segments_stay_and_changed_ones_are_rewritten_or_get_deletion_vectors(
    spark, local_store: Store
) -> None:
    # Segments below segment.bytes / 8 (4 KiB here) are small: they merge with their neighbours.
    sized = {"log.cleanup.policy": "compact", "log.cleaner.min.cleanable.ratio": 0.0, "log.segment.bytes": 32768}
    no_vectors = settings_with({**sized, "cleaner": {"deletion.vector.max.ratio": 0}})
    default = settings_with(sized)
    for tp, settings in ((TopicPartition("t", 0), no_vectors), (TopicPartition("t", 1), default)):
        append(local_store, *(rec(f"k{i}", hashlib.sha256(b"%d" % i).hexdigest(), i) for i in range(200)), tp=tp)
        append(local_store, rec("active", offset=200), tp=tp)
        clean(spark, local_store, "arrow", settings=settings, topics="t")
        first = local_store.manifest(tp).segments[0]
        assert (first.base_offset, first.next_offset, first.deletes) == (0, 200, None)
        assert first.size_bytes >= 4096, "a clean segment that is not small"
        append(local_store, rec("new1", offset=201), rec("k5", "updated", 202), tp=tp)
        append(local_store, rec("active2", offset=203), tp=tp)
        report = clean(spark, local_store, "arrow", settings=settings)
        stats = next(r for r in report.partitions if r.partition == str(tp)).stats
        segment = local_store.manifest(tp).segments[0]
        if settings is no_vectors:  # Kafka's way: the clean segment that lost k5 is rewritten with its neighbours
            assert (stats.segments.segments_rewritten, stats.segments.deletion_vectors_written) == (3, 0)
            assert segment.path != first.path and segment.next_offset == 203
        else:  # the default: the clean segment keeps its object and gains a deletion vector
            assert (stats.segments.segments_rewritten, stats.segments.deletion_vectors_written) == (2, 1)
            assert segment.path == first.path and segment.deletes is not None and segment.deletes.count == 1
            assert [(s.base_offset, s.next_offset) for s in local_store.manifest(tp).segments] == [
                (0, 200),
                (200, 203),
                (203, 204),
            ], "the small dirty neighbours merged"
        assert [r["key"] for r in local_store.read(tp).to_pylist()].count(b"k5") == 1
        assert offsets(local_store, tp) == [*range(0, 5), *range(6, 204)]


#: Segments of 16 KiB: every segment of these tests is above segment.bytes / 8, so none merges as small.
SIXTEEN_KIB = settings_with(
    {"log.cleanup.policy": "compact", "log.cleaner.min.cleanable.ratio": 0.0, "log.segment.bytes": 16384}
)


def with_a_deletion_vector(spark: Any, store: Store) -> SegmentMeta:
    """Ten keys cleaned, then ``k1`` updated and cleaned again: the first segment keeps its object and gets a
    deletion vector of one record. Returns the first segment as the first pass left it."""
    append(store, *(rec(f"k{i}", offset=i) for i in range(10)))
    append(store, rec("active", offset=10))
    clean(spark, store, "arrow", settings=SIXTEEN_KIB)
    first = store.manifest(TP).segments[0]
    append(store, rec("k1", "new", 11))
    append(store, rec("active2", offset=12))
    clean(spark, store, "arrow", settings=SIXTEEN_KIB)
    return first


def test_deletion_vectors_are_folded_in_when_too_many_or_too_old(spark, local_store: Store) -> None:
    settings = SIXTEEN_KIB
    first = with_a_deletion_vector(spark, local_store)
    assert local_store.manifest(TP).segments[0].deletes.count == 1  # type: ignore[union-attr]
    append(local_store, rec("k2", "new", 13), rec("k3", "new", 14))  # 3 of 10 deleted: past the 0.2 ratio
    append(local_store, rec("active3", offset=15))
    clean(spark, local_store, "arrow", settings=settings)
    rewritten = local_store.manifest(TP).segments[0]
    assert rewritten.path != first.path and rewritten.deletes is None and rewritten.record_count < 10

    append(local_store, rec("k4", "new", 16))
    append(local_store, rec("active4", offset=17))
    clean(spark, local_store, "arrow", settings=settings)
    aged = local_store.manifest(TP).segments[0]
    assert aged.deletes is not None and aged.deletes.created_ms == NOW
    week = 604_800_000
    report = clean(spark, local_store, "arrow", now=NOW + week, settings=settings)
    assert report.partitions[0].reason.startswith("deletion vectors at least deletion.vector.max.age.ms old")
    purged = local_store.manifest(TP).segments[0]
    assert purged.deletes is None and purged.path != aged.path, "deleted records are physically gone in time"


def latest_per_key(rows: list[dict[str, Any]], horizon: int) -> list[tuple[int, int | None]]:
    """The offset strategy's survivors, written out independently: each key's last record, keyless records,
    and a horizon on tombstones (``(offset, delete_horizon_ms)`` in offset order)."""
    last = {r["key"]: r["offset"] for r in rows if r["key"] is not None}
    return [
        (r["offset"], horizon if r["value"] is None else None)
        for r in rows
        if r["key"] is None or last[r["key"]] == r["offset"]
    ]


def test_a_large_partition_is_split_into_key_ranges_and_keeps_exactly_the_latest_per_key(spark, tmp_path) -> None:
    spec = GenerateSpec(
        records=12_000,
        keys=900,
        partitions=1,
        segment_records=1_500,
        tombstone_ratio=0.05,
        keyless_ratio=0.01,
        seed=3,
        end_time_ms=NOW - DAY,
    )
    tp = TopicPartition("orders", 0)
    sized = {"log.cleanup.policy": "compact", "log.roll.ms": 60_000, "log.segment.bytes": 131_072}
    # One task; 4 and 6 key ranges, each run read once and its rows handed to the ranges.
    for limit, ranges in ((1_000_000, 1), (3_000, 4), (2_000, 6)):
        store = Store.open(str(tmp_path / f"s{limit}"))
        generate(store, spec, now_ms=NOW - DAY)
        written = store.read(tp, columns=["offset", "key", "value"]).to_pylist()
        settings = settings_with({**sized, "cleaner": {"task.max.records": limit}})
        cleaner = Cleaner(spark, store, settings)
        the_plan = plan_store(store, settings, NOW)
        key_ranges = cleaner.task(the_plan.to_clean[0], NOW).split.key_ranges
        assert key_ranges == ranges, "12,000 records in tasks of at most the limit"
        assert not reads_whole_ranges(cleaner.task(the_plan.to_clean[0], NOW)), "no transactions"
        cleaner.run(NOW, compaction_plan=the_plan)
        assert store.read(tp, columns=["offset", "delete_horizon_ms"]).to_pylist() == [
            {"offset": o, "delete_horizon_ms": h} for o, h in latest_per_key(written, NOW + DAY)
        ]
        # A second pass: a few updates make the clean segments lose a record or two each (deletion vectors).
        updates = [rec(f"key-{i * 37:010d}", offset=20_000 + i) for i in range(12)]
        append(store, *updates, tp=tp)
        append(store, rec("active", offset=20_012), tp=tp)
        small = settings_with(
            {
                **sized,
                "log.cleaner.min.cleanable.ratio": 0.0,
                "cleaner": {"task.max.records": 200 if ranges > 1 else limit},
            }
        )
        second = Cleaner(spark, store, small)
        second_plan = plan_store(store, small, NOW + 1)
        split = second.task(second_plan.to_clean[0], NOW + 1).split.key_ranges > 1
        assert split == (ranges > 1)
        report = second.run(NOW + 1, compaction_plan=second_plan)
        assert report.partitions[0].stats.segments.deletion_vectors_written > 0
        assert [p for r in verify(store) for p in r.problems] == []
        everything = [
            *written,
            *({"offset": r["offset"], "key": r["key"].encode(), "value": b"v"} for r in updates),
            {"offset": 20_012, "key": b"active", "value": b"v"},
        ]
        assert store.read(tp, columns=["offset", "delete_horizon_ms"]).to_pylist() == [
            {"offset": o, "delete_horizon_ms": h} for o, h in latest_per_key(everything, NOW + DAY)
        ]


def test_report_and_prometheus_metrics(spark, local_store: Store, tmp_path) -> None:
    from compaction.report import write_metrics

    append(local_store, rec("a", offset=0), rec("a", offset=1), rec("b", offset=2))
    append(local_store, rec("active", offset=3))
    report = clean(spark, local_store, "window")
    doc = report.to_dict()
    cleaned = doc["partitions"][0]
    assert (cleaned["version_before"], cleaned["version_after"]) == (2, 3)
    assert (cleaned["checkpoint_before"], cleaned["checkpoint_after"]) == (0, 3)
    assert cleaned["stats"]["messages_read"] == 3 and cleaned["stats"]["messages_written"] == 2
    assert report.partitions[0].summary().startswith("cleaned t-0 [0, 3): ")
    assert "33.3% fewer messages" in report.partitions[0].summary()
    path = tmp_path / "metrics.prom"
    write_metrics(report, textfile=str(path), finished_ms=1_767_225_600_000)
    text = path.read_text()
    for name in (
        "max_compaction_delay_secs",
        "uncleanable_partitions_count",
        "uncleanable_bytes",
        "max_clean_time_secs",
        "cleaner_recopy_percent",
        "max_dirty_percent",
        "last_success_time_seconds",
    ):
        assert f"kafka_log_cleaner_{name}{{" in text
    assert 'kafka_log_cleaner_max_dirty_percent{store="' in text


def test_retention_drops_old_segments_without_spark(local_store: Store) -> None:
    append(local_store, rec("a", offset=0, timestamp=NOW - 10 * DAY))
    append(local_store, rec("b", offset=1, timestamp=NOW - DAY))
    append(local_store, rec("c", offset=2, timestamp=NOW))
    settings = settings_with(
        {"log.cleanup.policy": "compact,delete", "log.retention.ms": 2 * DAY, "log.cleaner.min.cleanable.ratio": 1.0}
    )
    manifest = local_store.manifest(TP)
    change_plan = Cleaner(None, local_store, settings).run(NOW)
    assert change_plan.partitions[0].stats.dropped == {"retention": 1}
    after = local_store.manifest(TP)
    assert after.log_start_offset == 1 and offsets(local_store) == [1, 2]
    assert manifest.segments[0].path not in {s.path for s in after.segments}


def test_the_manifest_promises_unique_clean_keys_after_every_pass(spark, local_store: Store) -> None:
    append(local_store, rec("a", offset=0), rec("a", offset=1), rec("b", offset=2))
    append(local_store, rec("active", offset=3))
    assert not local_store.manifest(TP).clean_keys_unique
    clean(spark, local_store, "arrow")
    assert local_store.manifest(TP).clean_keys_unique
    append(local_store, rec("a", offset=4))
    assert local_store.manifest(TP).clean_keys_unique, "appends keep the promise"
    by_timestamp = settings_with(
        {
            "log.cleanup.policy": "compact",
            "log.cleaner.min.cleanable.ratio": 0.0,
            "topics": {TP.topic: {"compaction.strategy": "timestamp"}},
        }
    )
    append(local_store, rec("active2", offset=5))
    clean(spark, local_store, "arrow", settings=by_timestamp)
    assert local_store.manifest(TP).clean_keys_unique, "no strategy keeps a superseded record"
    assert offsets(local_store) == [2, 3, 4, 5]


def test_a_rewritten_segment_keeps_the_age_of_its_sources(spark, local_store: Store) -> None:
    # Records without timestamps: their age is their segment's. Retention must count from the append.
    local_store.append(TP, records([{"key": "a"}, {"key": "a"}]), now_ms=NOW - 3 * DAY)
    local_store.append(TP, records([{"key": "b"}]), now_ms=NOW - 3 * DAY + 1)
    local_store.append(TP, records([{"key": "active"}]), now_ms=NOW)
    clean(spark, local_store, "arrow")
    rewritten = local_store.manifest(TP).segments[0]
    assert (rewritten.base_offset, rewritten.next_offset, rewritten.created_ms) == (0, 3, NOW - 3 * DAY + 1)
    retention = settings_with(
        {"log.cleanup.policy": "compact,delete", "log.retention.ms": 2 * DAY, "log.cleaner.min.cleanable.ratio": 1.0}
    )
    Cleaner(None, local_store, retention).run(NOW + 1)
    assert offsets(local_store) == [3], "the rewritten records are as old as they were"


def test_t54b_retention_drops_every_segment_once_the_last_has_rolled(spark, local_store: Store) -> None:
    settings = settings_with(
        {
            "log.cleanup.policy": "compact,delete",
            "log.retention.ms": 100_000,
            "log.roll.ms": 100_000,
            "log.cleaner.min.cleanable.ratio": 0.0,
        }
    )
    for base in (0, 3):
        append(local_store, *(rec(str(i % 2), offset=base + i, timestamp=NOW - 200_000) for i in range(3)))
    clean(spark, local_store, "arrow", settings=settings)
    manifest = local_store.manifest(TP)
    assert (manifest.segments, manifest.log_start_offset, manifest.log_end_offset) == ((), 6, 6)
    append(local_store, *(rec(f"k{i % 20}", offset=6 + i, timestamp=NOW) for i in range(40)))
    append(local_store, rec("active", offset=46, timestamp=NOW))
    clean(spark, local_store, "arrow", settings=settings)
    assert offsets(local_store) == [*range(26, 47)], "a fresh log compacts as usual"


def test_a_log_that_cleaning_emptied_keeps_its_log_start_when_written_again(spark, local_store: Store) -> None:
    """Only retention moves a log's start, as Kafka's cleaner never does: a partition whose every record cleaning
    removed (tombstones past their delete horizon) starts where it did when records come again (t54b: one that
    retention emptied starts at the new records)."""
    settings = settings_with(
        {
            "log.cleanup.policy": "compact",
            "log.roll.ms": 100_000,
            "log.cleaner.min.cleanable.ratio": 0.0,
            "log.cleaner.delete.retention.ms": 1_000,
        }
    )
    append(local_store, rec("a", None, 0, timestamp=NOW - 200_000), rec("b", None, 1, timestamp=NOW - 200_000))
    clean(spark, local_store, "arrow", settings=settings)
    clean(spark, local_store, "arrow", NOW + 2_000, settings=settings)
    emptied = local_store.manifest(TP)
    assert (emptied.segments, emptied.log_start_offset, emptied.log_end_offset) == ((), 0, 2)
    again = append(local_store, rec("a", offset=2, timestamp=NOW + 3_000), now=NOW + 3_000)
    assert (again.log_start_offset, again.log_end_offset, again.first_dirty_offset) == (0, 3, 2)
    assert offsets(local_store) == [2]


def test_a_delete_retention_of_long_max_saturates_instead_of_failing(spark, local_store: Store, plan: str) -> None:
    settings = settings_with(
        {
            "log.cleanup.policy": "compact",
            "log.cleaner.min.cleanable.ratio": 0.0,
            "log.cleaner.delete.retention.ms": 2**63 - 1,
        }
    )
    append(local_store, rec("a", offset=0), rec("a", None, 1))
    append(local_store, rec("active", offset=2))
    report = clean(spark, local_store, plan, settings=settings)
    assert report.partitions[0].status == "cleaned"
    assert local_store.read(TP).to_pylist()[0]["delete_horizon_ms"] == 2**63 - 1


def test_deletion_vectors_carry_the_live_figures_the_planner_uses(spark, local_store: Store) -> None:
    sized = {"log.cleanup.policy": "compact", "log.cleaner.min.cleanable.ratio": 0.0, "log.segment.bytes": 16384}
    append(
        local_store,
        *(rec(f"k{i}", offset=i, timestamp=NOW - 10 * DAY + i) for i in range(9)),
        rec("late", offset=9, timestamp=NOW - DAY),
    )
    append(local_store, rec("active", offset=10, timestamp=NOW))
    clean(spark, local_store, "arrow", settings=settings_with(sized))
    append(local_store, rec("late", "updated", 11, timestamp=NOW))  # the newest record of [0, 10) goes
    append(local_store, rec("active-2", offset=12, timestamp=NOW))
    clean(spark, local_store, "arrow", settings=settings_with(sized))
    segment = local_store.manifest(TP).segments[0]
    assert segment.deletes is not None and segment.deletes.count == 1
    assert (segment.max_timestamp, segment.live_max_timestamp) == (NOW - DAY, NOW - 10 * DAY + 8)
    assert segment.live_size_bytes == segment.size_bytes * 9 // 10
    retention = settings_with(
        {
            **sized,
            "log.cleanup.policy": "compact,delete",
            "log.retention.ms": 5 * DAY,
            "log.cleaner.min.cleanable.ratio": 1.0,
        }
    )
    the_plan = plan_store(local_store, retention, NOW)
    assert [s.base_offset for s in the_plan.to_clean[0].expired_segments] == [0], (
        "retention sees the live records' age, not the deleted one's"
    )


def test_a_segment_emptied_by_cleaning_vanishes_and_its_offsets_stay_unused(
    spark, local_store: Store, plan: str
) -> None:
    settings = settings_with(
        {"log.cleanup.policy": "compact", "log.cleaner.min.cleanable.ratio": 0.0, "log.segment.bytes": 8192}
    )  # no segment here is small
    append(local_store, rec("a", offset=0), rec("b", offset=1), rec("c", offset=2))
    append(local_store, rec("a", offset=3), rec("b", offset=4), rec("c", offset=5))
    append(local_store, rec("active", offset=6))
    report = clean(spark, local_store, plan, settings=settings)
    manifest = local_store.manifest(TP)
    assert [(s.base_offset, s.next_offset) for s in manifest.segments] == [(3, 6), (6, 7)]
    assert (manifest.log_start_offset, manifest.log_end_offset, manifest.first_dirty_offset) == (0, 7, 6)
    assert report.partitions[0].stats.segments.segments_emptied == 1
    assert offsets(local_store) == [3, 4, 5, 6]
    append(local_store, rec("d", offset=7))
    assert [s.base_offset for s in local_store.manifest(TP).segments] == [3, 6, 7], "appends go on at the log end"


def test_records_below_a_log_start_inside_a_segment_never_compete_and_never_come_back(
    spark, local_store: Store, plan: str
) -> None:
    by_timestamp = settings_with(
        {
            "log.cleanup.policy": "compact",
            "log.cleaner.min.cleanable.ratio": 0.0,
            "log.cleaner.compaction.strategy": "timestamp",
        }
    )
    layout(
        local_store,
        [
            (
                0,
                6,
                [
                    rec("k", "gone", 0, timestamp=900),
                    rec("j", "gone", 1, timestamp=1),
                    rec("k", "live", 4, timestamp=100),
                    rec("x", offset=5, timestamp=1),
                ],
            ),
            (6, 7, [rec("active", offset=6, timestamp=1)]),
        ],
    )
    local_store.commit(
        TP,
        lambda m: {
            **cast(Manifest, m).model_dump(include={"log_end_offset", "last_stable_offset", "segments"}),
            "log_start_offset": 3,
            "first_dirty_offset": 3,
        },
        writer=Writer(),
        operation="append",
        now_ms=NOW,
    )
    clean(spark, local_store, plan, settings=by_timestamp)
    assert [(r["offset"], r["value"]) for r in local_store.read(TP).to_pylist()] == [
        (4, b"live"),
        (5, b"v"),
        (6, b"v"),
    ], "k@0 (below the log start) does not win over k@4"
    segment = local_store.manifest(TP).segments[0]
    stored = pq.read_table(local_store.storage.path(f"{TP.prefix}/{segment.path}")).column("offset").to_pylist()
    assert stored == [4, 5, 6], "the records below the log start are physically gone with the rewrite"


def test_a_run_never_rewrites_bytes_that_changed_after_their_commit(spark, local_store: Store, plan: str) -> None:
    from tests.helpers.stores import tamper

    for tp in (TopicPartition("t", 0), TopicPartition("t", 1)):
        append(local_store, rec("a", offset=0), rec("a", offset=1), tp=tp)
        append(local_store, rec("active", offset=2), tp=tp)
    bad = TopicPartition("t", 1)
    tamper(local_store, f"{bad.prefix}/{local_store.manifest(bad).segments[0].path}")
    report = Cleaner(spark, local_store, SETTINGS, dedupe_plan=plan).run(NOW)
    assert {r.partition: r.status for r in report.partitions} == {"t-0": "cleaned", "t-1": "failed"}
    assert "does not match the checksum" in (report.failed[0].error or "")
    assert local_store.versions(bad) == [1, 2], "the changed segment was not laundered into a new one"
    assert [p.partition for r in verify(local_store) for p in r.problems] == ["t-1"]


def test_a_deletion_vector_whose_bytes_changed_stops_its_partition(spark, local_store: Store) -> None:
    from tests.helpers.stores import tamper

    sized = SIXTEEN_KIB
    with_a_deletion_vector(spark, local_store)
    vector = local_store.manifest(TP).segments[0].deletes
    assert vector is not None
    tamper(local_store, f"{TP.prefix}/{vector.path}")
    append(local_store, rec("k2", "new", 13))
    append(local_store, rec("active3", offset=14))
    report = Cleaner(spark, local_store, sized).run(NOW)
    assert report.partitions[0].status == "failed" and "deletion vector" in (report.partitions[0].error or "")


def test_a_reset_checkpoint_is_written_and_one_that_cannot_be_is_a_failure_of_its_partition(
    local_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka writes a checkpoint past the log end back to the log start even when it cleans nothing; when that
    commit fails, the partition failed (exit code 3), not skipped."""
    for tp in (TP, TopicPartition("t", 1)):
        append(local_store, rec("a", offset=0), rec("b", offset=1), tp=tp)  # the active segment only: nothing to clean
        manifest = local_store.manifest(tp)
        local_store.replace(tp, Replacement((), (), 0, 50, 0, 0), writer=Writer(), now_ms=NOW)  # past the end
        assert local_store.manifest(tp).version == manifest.version + 1
    real = Store.replace

    def refused(self: Store, tp: TopicPartition, change: Replacement, **kw: Any) -> Manifest:
        if tp == TP:
            raise StoreError(f"cannot write {tp}: access denied")
        return real(self, tp, change, **kw)

    monkeypatch.setattr(Store, "replace", refused)
    code, report = run_job(
        local_store, JobOptions(now_ms=NOW, wall_ms=NOW), SETTINGS, cast(Callable[[], SparkSession], lambda: None)
    )
    report = cast(RunReport, report)  # not a dry run
    assert code == EXIT_PARTIAL
    status = {r.partition: (r.status, r.error) for r in report.partitions}
    assert status == {
        "t-0": (
            "failed",
            "could not reset the checkpoint (checkpoint 50 is past the log end 2): StoreError: cannot "
            "write t-0: access denied",
        ),
        "t-1": ("skipped", None),
    }
    assert local_store.manifest(TopicPartition("t", 1)).first_dirty_offset == 0, "the other's reset is written"
    assert local_store.manifest(TP).first_dirty_offset == 50


def test_under_a_small_budget_every_night_keeps_the_max_lag_and_the_deletion_vector_age(
    spark, local_store: Store
) -> None:
    """Six nights, a budget that takes one partition a night, two hot partitions always dirtier than the rest:
    the partition past max.compaction.lag.ms and the one whose deletion vector reaches its age go first on the
    night they are due, so after every run no bound is broken (KIP-354's guarantee, and deleted data gone in
    time)."""
    max_lag = max_age = 2 * DAY
    # segment.bytes small enough that dv's clean segment stands alone and takes a deletion vector
    setup = settings_with(
        {"log.cleanup.policy": "compact", "log.cleaner.min.cleanable.ratio": 0.0, "log.segment.bytes": 16384}
    )
    nightly = settings_with(
        {
            "log.cleanup.policy": "compact",
            "log.segment.bytes": 16384,
            "cleaner": {"max.bytes.per.run": 1, "deletion.vector.max.age.ms": max_age},
            "topics": {
                "hot": {"min.cleanable.dirty.ratio": 0.1},
                "cold": {"min.cleanable.dirty.ratio": 0.99, "max.compaction.lag.ms": max_lag},
                "dv": {"min.cleanable.dirty.ratio": 0.99},
            },
        }
    )
    hot = [TopicPartition("hot", 0), TopicPartition("hot", 1)]
    cold, dv = TopicPartition("cold", 0), TopicPartition("dv", 0)

    def put(tp: TopicPartition, keys: list[str], at: int, value: str = "v" * 100) -> None:
        local_store.append(tp, records([{"key": k, "value": value, "timestamp": at} for k in keys]), now_ms=at)

    t0 = NOW
    put(dv, [f"d{i}" for i in range(100)], t0 - 4 * DAY)
    put(dv, ["dx"], t0 - 4 * DAY)  # active
    put(cold, [f"c{i}" for i in range(400)], t0 - 4 * DAY)
    clean(spark, local_store, "arrow", now=t0 - 3 * DAY, settings=setup)  # dv's first segment clean
    put(dv, ["d0", "d1"], t0 - 2 * DAY)  # two of the clean segment's keys updated
    put(dv, ["dy"], t0 - DAY)
    put(cold, ["c-first"], t0 - DAY)  # cold's first dirty record: past the max lag after t0 + DAY
    for tp in hot:
        put(tp, [f"h{i}" for i in range(5)], t0 - DAY)
    clean(spark, local_store, "arrow", now=t0 - DAY, settings=setup)  # cold's first segment clean
    vector = local_store.manifest(dv).segments[0].deletes
    assert vector is not None and vector.count == 2 and vector.created_ms == t0 - DAY  # due at t0 + DAY
    assert local_store.manifest(cold).first_dirty_offset == 400

    reasons: dict[tuple[int, str], str] = {}
    for night in range(6):
        now = t0 + night * DAY
        for tp in hot:
            put(tp, [f"h{i % 5}" for i in range(50)], now)
        put(cold, [f"c-night-{night}"], now)
        report = clean(spark, local_store, "arrow", now=now, settings=nightly)
        cleaned = [r.partition for r in report.partitions if r.status is Status.CLEANED]
        assert len(cleaned) == 1, report.partitions  # the budget takes one partition a night
        reasons.update({(night, r.partition): r.reason for r in report.partitions})
        # The bounds, from the committed manifests: no dirty segment whose first record is older than the max
        # lag, and no deletion vector as old as its maximum age.
        manifest = local_store.manifest(cold)
        dirty = [s for s in manifest.segments if s.next_offset > manifest.first_dirty_offset]
        assert all(s.first_timestamp is not None and s.first_timestamp >= now - max_lag for s in dirty), (
            night,
            [(s.base_offset, s.first_timestamp) for s in dirty],
        )
        for tp in (*hot, cold, dv):
            aged = [
                s.path
                for s in local_store.manifest(tp).segments
                if s.deletes is not None and s.deletes.created_ms + max_age <= now
            ]
            assert aged == [], (night, str(tp), aged)

    assert reasons[(1, "dv-0")] == (
        "deletion vectors at least deletion.vector.max.age.ms old (due now): rewrite to "
        "remove records physically; overdue, so first in the per-run byte budget"
    )
    for night in (2, 5):
        assert reasons[(night, "cold-0")] == (
            "max.compaction.lag.ms exceeded by 1d; overdue, so first in the per-run byte budget"
        )
    assert reasons[(1, "hot-0")].startswith("deferred: per-run byte budget 1 exhausted (dirty ratio")
    assert local_store.read(dv).column("key").to_pylist().count(b"d0") == 1, "the updated key's old value is gone"
    for tp in hot:  # the hot partitions still get the other nights
        assert local_store.manifest(tp).first_dirty_offset > 5, str(tp)


@pytest.mark.parametrize("carried_bytes", [1 << 20, 0], ids=["carried", "joined"])
def test_a_stage_runs_each_task_in_a_spark_task_of_its_own_in_order(
    any_spark: Any, carried_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One row in each partition, task i in partition i: each task is retried and isolated alone, and the
    first planned (the largest) is scheduled first; with no sampling job or shuffle before the stage. Its body
    sees each task's payload, whether the payloads travel with the function (small) or in the rows (large)."""
    from compaction.engine import stages

    monkeypatch.setattr(stages, "CARRIED_BYTES", carried_bytes)
    frame = stages.task_frame(any_spark, [f"payload {i}" for i in range(7)])
    assert bool(frame.carried) is (carried_bytes > 0)
    rows = frame.rows.selectExpr("spark_partition_id() AS slot", "task").toArrow().to_pylist()
    assert sorted((row["slot"], row["task"]) for row in rows) == [(i, i) for i in range(7)]
    seen = frame.map(_slot_and_payload, "slot int, task int, payload string").toArrow().to_pylist()
    assert sorted(seen, key=lambda row: row["task"]) == [
        {"slot": i, "task": i, "payload": f"payload {i}"} for i in range(7)
    ]
    assert stages.task_frame(any_spark, []).rows.count() == 0


def _slot_and_payload(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from pyspark import TaskContext

    from compaction.engine.codec import loads

    context = TaskContext.get()
    assert context is not None, "runs in a Spark task"
    for batch in batches:
        yield pa.record_batch(
            {
                "slot": pa.array([context.partitionId()] * batch.num_rows, pa.int32()),
                "task": batch.column("task"),
                "payload": [loads(p) for p in batch.column("payload").to_pylist()],
            }
        )
