"""The verdicts with Arrow in a task: a partition's (or a key range's) facts, each key's winner; and, for a partition
whose new objects are written by another stage, the verdicts handed over to it through the store."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from compaction import rules, winners
from compaction.clean.layout import SegmentCounts
from compaction.clean.payloads import CleanTask, SegmentVerdicts, Verdicts, lists_kept
from compaction.clean.tasks.erased import erased_keys
from compaction.clean.tasks.facts import Facts, RowFacts, facts_table, read_task_facts
from compaction.clean.tasks.objects import object_id
from compaction.engine.phases import phase
from compaction.store.manifest import SegmentMeta


@dataclass(frozen=True)
class TaskVerdicts:
    """A task's verdicts: per row of its facts the reason code (0 kept) and whether to stamp (markers)."""

    facts: Facts
    code: np.ndarray
    stamp: np.ndarray

    now_ms: int

    def segment_counts(self, segments: tuple[SegmentMeta, ...]) -> list[tuple[SegmentMeta, slice, SegmentCounts]]:
        """Per segment, its rows in ``code``/``stamp`` and the verdicts' counts for them."""
        result = []
        upcoming = rules.upcoming_horizons(self.facts.table, self.code, self.now_ms)
        keys = self.facts.table.column("key")
        assumed = self.facts.assumed_kept
        for index, (segment, part) in enumerate(zip(segments, self.facts.segment_slices(), strict=True)):
            code = self.code[part]
            erased = erased_keys(keys[part], code == rules.DropReason.ERASED.code)
            counts = SegmentCounts.from_verdicts(code, self.stamp[part], upcoming[part], erased)
            if assumed is not None and assumed[index]:  # the rows left out as surely kept
                counts = replace(
                    counts, records=counts.records + int(assumed[index]), kept=counts.kept + int(assumed[index])
                )
            result.append((segment, part, counts))
        return result


def decide_facts(task: CleanTask, whole: frozenset[int] = frozenset()) -> TaskVerdicts:
    """Read and decide a task's rows with Arrow (no shuffle of records); of a unique clean section, only the rows in
    doubt (:func:`~compaction.clean.tasks.facts.reads_clean_sparsely`)."""
    return _decide(task, read_task_facts(task, whole, sparse=True))


def _decide(task: CleanTask, facts: Facts) -> TaskVerdicts:
    """The Arrow winner search's verdicts on a task's facts."""
    with phase("decide"):
        decided = winners.decide(
            facts.table,
            now_ms=task.context.now_ms,
            keyless_drop=task.context.keyless_drop,
            unique_before=task.cleaned.first_dirty_offset if task.cleaned.clean_keys_unique else None,
        )
    return TaskVerdicts(facts, decided.code, decided.stamp, task.context.now_ms)


def decide_range(task: CleanTask) -> Verdicts:
    """A key range of a split partition that reads the whole range (with transactions, or few ranges): decided, and
    its verdicts handed over to the apply stage."""
    return hand_over(task, decide_facts(task))


def hand_over(task: CleanTask, decided: TaskVerdicts) -> Verdicts:
    """Write a task's verdicts for the stage that applies it: per segment, the positions of the rows it keeps
    (of a dirty segment) or drops (of a clean one), and of the kept markers to stamp; returns their counts and where
    they are listed. Only metadata goes back to the driver."""
    with phase("write"):
        positions = decided.facts.positions()
        kept = decided.code == rules.KEPT
        parts: list[pa.Table | None] = []
        found = []
        for (segment, part, counts), rows in zip(
            decided.segment_counts(task.cleaned.segments), decided.facts.read_lengths, strict=True
        ):
            listed = kept[part] if lists_kept(segment, task.cleaned.first_dirty_offset) else ~kept[part]
            stamp = decided.stamp[part]
            chosen = listed | stamp
            parts.append(
                pa.table(
                    {
                        "position": pa.array(positions[part][chosen], pa.int32()),
                        "listed": listed[chosen],
                        "stamp": stamp[chosen],
                    }
                )
                if chosen.any()
                else None
            )
            found.append((segment.base_offset, counts, int(rows)))
        path: str | None = None
        groups: tuple[int | None, ...] = (None,) * len(parts)
        if any(part is not None for part in parts):
            path, groups = task.context.store.objects.write_verdicts(
                task.tp,
                task.cleaned.segments[0].base_offset,
                parts,
                f"{object_id(task.context.pass_id)}-{task.split.key_range}",
            )
    return Verdicts(
        tp=task.tp,
        path=path,
        segments=tuple(
            SegmentVerdicts(base, counts, rows, group)
            for (base, counts, rows), group in zip(found, groups, strict=True)
        ),
    )


def decide_handed(task: CleanTask) -> Verdicts:
    """A key range of a split partition without transactions, from its rows of every run of the range, handed over
    in the store (see :func:`~compaction.clean.tasks.facts.hand_out`): decided, and its verdicts handed over."""
    if sum(len(p.read_lengths) for p in task.split.pieces) != len(task.cleaned.segments):
        raise RuntimeError(
            f"key range {task.split.key_range} of {task.tp} got pieces of "
            f"{sum(len(p.read_lengths) for p in task.split.pieces)} segment(s) for a range of "
            f"{len(task.cleaned.segments)}"
        )
    with phase("read"):
        tables = [
            task.context.store.objects.read_piece(task.tp, p.path, p.batch)
            for p in task.split.pieces
            if p.batch is not None
        ]
    with phase("decide"):
        read_lengths = np.array([n for p in task.split.pieces for n in p.read_lengths], dtype=np.int64)
        lengths = np.array([n for p in task.split.pieces for n in p.lengths], dtype=np.int64)
        rows = (
            pa.concat_tables(tables)
            if tables
            else pa.table(
                {
                    "offset": pa.array([], pa.int64()),
                    "key": pa.array([], pa.binary()),
                    "delete_horizon_ms": pa.array([], pa.int64()),
                    "position": pa.array([], pa.int32()),
                    "version_valid": pa.array([], pa.int8()),
                    "version": pa.array([], pa.int64()),
                }
            )
        )
        if rows.num_rows != int(lengths.sum()):
            raise RuntimeError(
                f"key range {task.split.key_range} of {task.tp} read {rows.num_rows} row(s) of its pieces, "
                f"which list {int(lengths.sum())}"
            )
        starts = np.cumsum(read_lengths) - read_lengths
        selected = np.zeros(int(read_lengths.sum()), dtype=bool)
        selected[np.repeat(starts, lengths) + rows.column("position").to_numpy()] = True
        valid, version = (
            (rows.column("version_valid").to_numpy(), rows.column("version").to_numpy())
            if "version" in rows.column_names
            else rules.versions(rows, task.context.strategy, task.context.strategy_header)
        )
        table = facts_table(
            task,
            RowFacts.without_transactions(
                rows.column("offset"), rows.column("key"), valid, version, rows.column("delete_horizon_ms")
            ),
        )
        del rows, tables
    return hand_over(task, _decide(task, Facts(table, lengths, read_lengths, selected)))
