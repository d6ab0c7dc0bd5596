"""Stage 1's decision with Arrow in a task: a partition's (or a key range's) facts, each key's winner, and the
decision rows the apply jobs take."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction.clean import arrow_dedupe, rules
from compaction.clean.layout import SegmentOutcome
from compaction.clean.payloads import BucketPiece, CleanTask, DecisionRow
from compaction.clean.phases import phase
from compaction.clean.tasks.facts import Facts, decision_table, erased_keys, read_decision_facts
from compaction.store.manifest import SegmentMeta


@dataclass(frozen=True)
class Decided:
    """A task's decision: per row of its facts the reason code (0 kept) and whether to stamp (markers)."""

    facts: Facts
    code: np.ndarray
    stamp: np.ndarray

    now_ms: int

    def outcomes(self, segments: tuple[SegmentMeta, ...]) -> list[tuple[SegmentMeta, slice, SegmentOutcome]]:
        """Per segment, its rows in ``code``/``stamp`` and the decision's counts for them."""
        result = []
        upcoming = rules.upcoming_horizons(self.facts.table, self.code, self.now_ms)
        keys = self.facts.table.column("key")
        for segment, part in zip(segments, self.facts.segment_slices(), strict=True):
            code = self.code[part]
            erased = erased_keys(keys[part], code == rules.Reason.ERASED.code)
            result.append((segment, part, SegmentOutcome.from_decision(code, self.stamp[part], upcoming[part],
                                                                       erased)))
        return result


def decide_facts(task: CleanTask, whole: frozenset[int] = frozenset()) -> Decided:
    """Read and decide a task's rows with Arrow (no shuffle of records)."""
    return _decide(task, read_decision_facts(task, whole))


def _decide(task: CleanTask, facts: Facts) -> Decided:
    """The Arrow plan's decision over a task's facts."""
    with phase("decide"):
        decided = arrow_dedupe.decide(facts.table, now_ms=task.now_ms, keyless_drop=task.keyless_drop,
                                      unique_before=task.first_dirty_offset if task.clean_keys_unique else None)
    return Decided(facts, decided.code, decided.stamp, task.now_ms)


def decision_rows(task: CleanTask) -> list[DecisionRow]:
    """Stage 1 of a split partition with transactions (one key range, reading the whole range): per segment,
    this range's counts, a bitmap of the rows it drops and the markers to stamp."""
    return _decision_rows(task, decide_facts(task))


def _decision_rows(task: CleanTask, decided: Decided) -> list[DecisionRow]:
    offsets = decided.facts.table.column("offset").to_numpy()
    bitmaps = decided.facts.row_bitmaps(decided.code != rules.KEPT)
    return [DecisionRow(tp=task.tp, segment_base=segment.base_offset, outcome=outcome, rows=int(rows), dropped=bitmap,
                        stamps=offsets[part][decided.stamp[part]])
            for (segment, part, outcome), rows, bitmap in zip(decided.outcomes(task.segments),
                                                              decided.facts.read_lengths, bitmaps, strict=True)]


def bucket_decision_rows(task: CleanTask, pieces: list[BucketPiece]) -> list[DecisionRow]:
    """Stage 1 of a split partition without transactions: decide one key range from its pieces of every run of
    the range (see :func:`~compaction.clean.tasks.facts.bucket_pieces`)."""
    with phase("decide"):
        pieces = sorted(pieces, key=lambda p: p.first_segment)
        read_lengths = np.concatenate([np.zeros(0, np.int64), *(p.read_lengths for p in pieces)])
        if len(read_lengths) != len(task.segments) or len(pieces) != len({p.first_segment for p in pieces}):
            raise RuntimeError(f"key range {task.bucket} of {task.tp} got pieces of {len(read_lengths)} "
                               f"segment(s) for a range of {len(task.segments)}")
        rows = pa.concat_tables([p.rows() for p in pieces])
        starts = np.cumsum(read_lengths) - read_lengths
        lengths = np.concatenate([np.zeros(0, np.int64), *(p.lengths for p in pieces)])
        selected = np.zeros(int(read_lengths.sum()), dtype=bool)
        selected[np.repeat(starts, lengths) + rows.column("position").to_numpy()] = True
        keyed = pc.is_valid(rows.column("key")).to_numpy(zero_copy_only=False)
        none = np.zeros(rows.num_rows, dtype=bool)
        valid, version = ((rows.column("version_valid").to_numpy(), rows.column("version").to_numpy())
                          if "version" in rows.column_names else
                          rules.versions(rows, task.strategy, task.strategy_header))
        table = decision_table(task, rows.column("offset"), rows.column("key"), valid, version,
                               rows.column("delete_horizon_ms"), keyed, none, none, none)
        del rows
    return _decision_rows(task, _decide(task, Facts(table, lengths, read_lengths, selected)))


