"""How a selected partition's work is cut for the pass: how many key ranges (a task each) its cleaned range takes,
the runs of segments one task of a split partition reads, and how its verdicts become objects. The planner chooses
what to clean; this sizes the tasks that clean it, from ``task.max.records``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from compaction.clean.figures import Roll
from compaction.clean.layout import ApplyPolicy
from compaction.clean.planner import LogToClean
from compaction.clean.settings import CleanerSettings
from compaction.store.manifest import SegmentMeta

#: A task reads a clean segment's decision columns only, about a quarter of the cost of a dirty segment read
#: whole: so a task may hold this many times ``task.max.records`` records in all.
CLEAN_SEGMENT_COST_DIVISOR = 4


def key_range_count(p: LogToClean, task_max_records: int, clean_section: bool = True) -> int:
    """Key ranges (a task each) a partition's cleaned range is split into, so that no task decides too much.

    A task reads its dirty segments whole (at most ``task.max.records`` records) and only the decision
    columns of clean ones (up to :data:`CLEAN_SEGMENT_COST_DIVISOR` times as many records in all); without
    ``clean_section``, the dirty segments alone count (a clean section checked against the dirty keys holds only
    the rows they contest).
    """
    dirty = sum(s.live_records for s in p.segments if s.next_offset > p.first_dirty_offset)
    ranges = max(1, math.ceil(dirty / task_max_records))
    if not clean_section:
        return ranges
    return max(ranges, math.ceil(p.records / (CLEAN_SEGMENT_COST_DIVISOR * task_max_records)))


def segment_runs(segments: Sequence[SegmentMeta], max_records: int) -> list[tuple[SegmentMeta, ...]]:
    """Consecutive segments in runs of at most ``max_records`` live records (a larger segment alone): what
    one task of a split partition reads once for every key range."""
    runs: list[tuple[SegmentMeta, ...]] = []
    run: list[SegmentMeta] = []
    records = 0
    for segment in segments:
        if run and records + segment.live_records > max_records:
            runs.append(tuple(run))
            run, records = [], 0
        run.append(segment)
        records += segment.live_records
    return [*runs, tuple(run)] if run else runs


def apply_policy(p: LogToClean, now_ms: int, cleaner: CleanerSettings, key_ranges: int) -> ApplyPolicy:
    """How a partition's verdicts become objects; a split partition's rewrites each read no more records
    than one of its key ranges' tasks."""
    share = math.ceil(p.records / key_ranges)
    apart = p.segments[-1].base_offset if p.plan.figures.roll is Roll.FOR_ERASURE and p.segments else None
    return ApplyPolicy(
        p.config.segment_bytes,
        now_ms,
        cleaner.deletion_vector_max_ratio,
        cleaner.deletion_vector_max_age_ms,
        max(1, min(cleaner.task_max_records, share)),
        apart,
    )
