"""Kafka ``.log`` segments cleaned on Spark: every plan reframes batches alike, and ``segment.format`` says what
the cleaner writes (the same scenarios run in this process in tests/unit/test_log_cleaning.py and
test_log_segments.py, whose builders these use)."""

from __future__ import annotations

import pytest

from compaction.store import Store
from compaction.store.segment import records
from compaction.store.verify import verify
from tests.unit.test_log_cleaning import WHOLE, A, I, T, append, batches, clean, last_offsets, offsets, plain
from tests.unit.test_log_segments import NOW, TP, _settings


@pytest.mark.spark
@pytest.mark.parametrize("plan", ["arrow", "window", "aggregate"])
def test_every_plan_reframes_batches_alike_on_spark(spark, tmp_path, plan: str) -> None:
    store = Store.open(str(tmp_path / "store"))
    append(store, I(1, 0, "1", "2", "3"), I(2, 3, "3", "1", "4"), I(3, 6, "1", "4"))
    append(store, T(5, 8, "9"), A(5, 9), plain(10, "4"))
    append(store, plain(11, "active"))
    clean(store, WHOLE, spark=spark, plan=plan)
    assert last_offsets(store) == [2, 5, 7, 8, 9, 10, 11]
    assert [b["record_count"] for b in batches(store)] == [1, 1, 1, 0, 1, 1, 1]
    assert offsets(store) == [1, 3, 6, 9, 10, 11]


@pytest.mark.spark
def test_segment_format_says_what_the_cleaner_writes(spark, local_store: Store) -> None:
    from compaction.clean.cleaner import Cleaner

    local_store.append(TP, records([{"key": "a", "value": "1"}, {"key": "a", "value": "2"}]), now_ms=NOW)
    local_store.append(TP, records([{"key": "b", "value": "3"}]), now_ms=NOW)
    Cleaner(spark, local_store, _settings(**{"segment.format": "kafka"})).run(NOW)
    assert [s.format for s in local_store.manifest(TP).segments] == ["kafka", "parquet"]
    rows = local_store.read(TP).to_pylist()
    assert [(r["offset"], r["key"], r["value"]) for r in rows] == [(1, b"a", b"2"), (2, b"b", b"3")]
    assert [p for r in verify(local_store) for p in r.problems] == []
