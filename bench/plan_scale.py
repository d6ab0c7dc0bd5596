"""Measure the planner on many partitions' manifests (default 100,000 partitions x 5 segments), in memory.

    python bench/plan_scale.py [--partitions 100000] [--segments 5]

Reports the planning time and the memory the plan allocates, per segment, at two sizes to show it scales
with the segment count.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

from compaction.clean.planner import plan
from compaction.clean.settings import TopicConfig
from compaction.store import TopicPartition
from compaction.store.manifest import Manifest, SegmentMeta, WriterInfo

HOUR = 3_600_000
NOW = 1_767_225_600_000


def manifests(partitions: int, segments: int) -> dict[TopicPartition, Manifest]:
    writer = WriterInfo(id="bench", run_id="r", operation="append", time_ms=NOW, commit_id="c")
    result = {}
    for p in range(partitions):
        metas = []
        for s in range(segments):
            base = s * 1000
            metas.append(
                SegmentMeta.model_construct(
                    path=f"segments/{base:020d}-x.parquet",
                    format="parquet",
                    base_offset=base,
                    next_offset=base + 1000,
                    record_count=1000,
                    size_bytes=100_000 + (p * 7919 + s * 104729) % 50_000,
                    checksum="sha256:0",
                    created_ms=NOW,
                    first_timestamp=NOW - (segments - s) * HOUR,
                    max_timestamp=NOW - (segments - s - 1) * HOUR,
                    tombstone_count=0,
                    keyless_count=0,
                    transactional_count=0,
                    control_count=0,
                    min_delete_horizon_ms=None,
                    deletes=None,
                )
            )
        end = segments * 1000
        result[TopicPartition(f"topic-{p % 100}", p)] = Manifest.model_construct(
            format_version=1,
            topic=f"topic-{p % 100}",
            partition=p,
            version=1,
            log_start_offset=0,
            log_end_offset=end,
            last_stable_offset=end,
            first_dirty_offset=(p % segments) * 1000,
            open_transactions={},
            segments=tuple(metas),
            writer=writer,
        )
    return result


def measure(partitions: int, segments: int) -> tuple[float, int, int]:
    logs = manifests(partitions, segments)
    config = TopicConfig(cleanup_policy=("compact",), max_compaction_lag_ms=24 * HOUR)
    started = time.perf_counter()
    result = plan(logs, lambda _: config, NOW)
    elapsed = time.perf_counter() - started
    del result
    tracemalloc.start()  # a second run under tracemalloc (which slows it) measures what the plan allocates
    result = plan(logs, lambda _: config, NOW)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(result.partitions) == partitions
    return elapsed, peak, len(result.selected)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--segments", type=int, default=5)
    args = parser.parse_args()
    for partitions in (args.partitions // 10, args.partitions):
        elapsed, peak, selected = measure(partitions, args.segments)
        count = partitions * args.segments
        print(
            f"{partitions:>7} partitions x {args.segments} segments: plan {elapsed:.2f} s "
            f"({selected} selected), peak allocation {peak / 2**20:.1f} MiB = {peak / count:.0f} B/segment"
        )


if __name__ == "__main__":
    main()
