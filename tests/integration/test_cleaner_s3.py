"""End to end on a real S3 API server (moto on 127.0.0.1): generate, run, verify, read, run again."""

from __future__ import annotations

import pytest

from compaction.clean.cleaner import Cleaner
from compaction.store import Store
from compaction.store.verify import verify
from compaction.synthetic import GenerateSpec, generate
from tests.helpers.settings import settings_with

pytestmark = [pytest.mark.spark, pytest.mark.s3]

NOW = 1_800_000_000_000
SETTINGS = settings_with({"log.cleanup.policy": "compact"})


def latest_per_key(rows: list[dict]) -> dict[bytes, tuple[int, bytes | None]]:
    latest = {}
    for row in rows:
        if row["key"] is not None:
            latest[row["key"]] = (row["offset"], row["value"])
    return latest


def test_generate_run_verify_read_and_rerun_on_s3(spark, s3_store: Store) -> None:
    spec = GenerateSpec(
        records=20_000, keys=800, partitions=2, segment_records=2_500, tombstone_ratio=0.05, end_time_ms=NOW, seed=11
    )
    generate(s3_store, spec, now_ms=NOW)
    partitions = s3_store.topic_partitions()
    before = {}
    for tp in partitions:
        manifest = s3_store.manifest(tp)
        active = manifest.segments[-1].base_offset
        before[tp] = (active, latest_per_key(s3_store.read(tp, end=active).to_pylist()))

    report = Cleaner(spark, s3_store, SETTINGS).run(NOW)
    assert [r.status for r in report.partitions] == ["cleaned", "cleaned"]
    assert [p for r in verify(s3_store) for p in r.problems] == []

    for tp in partitions:
        active, expected = before[tp]
        rows = s3_store.read(tp, end=active).to_pylist()
        assert len(rows) == len(expected), "exactly one record per key survives in the cleaned range"
        assert latest_per_key(rows) == expected, "and it is the latest version of the key"
        assert s3_store.manifest(tp).first_dirty_offset == active

    objects = {tp: sorted(e.name for e in s3_store.storage.list_dir(f"{tp.prefix}/segments")) for tp in partitions}
    versions = {tp: s3_store.versions(tp) for tp in partitions}
    again = Cleaner(spark, s3_store, SETTINGS).run(NOW)
    assert again.totals["cleaned"] == 0 and again.totals["bytes_written"] == 0
    assert {tp: s3_store.versions(tp) for tp in partitions} == versions
    assert {
        tp: sorted(e.name for e in s3_store.storage.list_dir(f"{tp.prefix}/segments")) for tp in partitions
    } == objects
