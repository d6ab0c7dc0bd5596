"""The ways a selected partition is cleaned, and the one place that chooses a partition's way (:func:`path_of`).

Every path decides which records survive, then applies the verdicts (new segments, deletion vectors), by the same
rules (:mod:`compaction.rules`); they differ in where the work runs:

- :data:`WHOLE`: a partition that fits one task, decided and applied in that task (the Arrow winner search). Small
  partitions share a task: a Spark task costs tens of milliseconds to schedule, and a nightly increment leaves most
  partitions little to do.
- :data:`RANGES_READ`: a larger partition split into key ranges, each range's task reading the whole range and
  keeping its rows (with transactions, whose facts need every row before a record).
- :data:`RANGES_HANDED`: key ranges fed by one read of each run of segments, its rows handed to the ranges in the
  store.
- :data:`AGAINST_DIRTY_KEYS`: a partition whose clean section is large, unique-keyed and under the offset strategy
  (a nightly increment on a compacted log): runs of its clean segments each checked against its dirty section's keys,
  their deletion vectors written at once, as Kafka's cleaner maps the dirty keys and scans the clean segments; its
  dirty section decided and rewritten in one task of the same stage.
- :data:`WINDOW`, :data:`AGGREGATE`: the Spark SQL winner searches, which shuffle the facts by key.

A path that decides in one stage and applies in another hands its verdicts over through the store (as the key
ranges fed by one read take their rows: :mod:`compaction.store.handover`), never through the driver (what reaches it
is counts and object names) nor through Spark's shuffle (which copies every row into the JVM, sorts it and spills it
once the JVM's memory is spent).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from compaction import rules
from compaction.clean.batches import stale_empty_batches
from compaction.clean.dedupe import decide_with_sql
from compaction.clean.layout import SegmentCounts, lay_out
from compaction.clean.payloads import AppliedJob, ApplyJob, CleanedPartition, CleanRun, CleanTask, HandedRun, RunRead
from compaction.clean.sizing import segment_runs
from compaction.clean.tasks.apply import SHARED_READ_BYTES, apply_listed, clean_in_task, clean_run
from compaction.clean.tasks.decide import decide_handed, decide_range
from compaction.clean.tasks.erased import hidden_erased
from compaction.clean.tasks.facts import hand_out, has_transactions, reads_clean_sparsely
from compaction.clean.work import PartitionWork
from compaction.display import quiet
from compaction.engine.isolation import Failed, Failure, Outcome
from compaction.engine.phases import add
from compaction.engine.stages import SparkStages, Stages, isolated
from compaction.errors import CompactionError

#: A task takes small units of work (partitions, apply jobs) until they hold this share of ``task.max.records``.
PACK_DIVISOR = 20
#: Units of one task at once, so that their requests overlap: many on an object store, whose requests wait on the
#: network; one on local disk, where a task waits for nothing (its objects are flushed by the commits) and more
#: threads only contend for the interpreter (1,000 partitions of 2,000 records: 9.9 s with one, 10.2 s with two or
#: three).
REMOTE_UNIT_THREADS = 8
LOCAL_UNIT_THREADS = 1

Take = Callable[[PartitionWork, Any], None]


@dataclass
class Runner:
    """Runs a path's stages: units packed into Spark tasks, a failed Spark job narrowed down to the partition that
    keeps failing, outcomes matched to their partitions by identity, each task's seconds by phase added up."""

    stages: Stages
    task_max_records: int
    threads: int = 1
    progress: Callable[[str], None] = quiet
    seconds: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def packed(self, units: Sequence[Any], weight: Callable[[Any], int]) -> list[list[Any]]:
        """Units in bins of up to ``task.max.records / PACK_DIVISOR`` records, the largest first (a larger unit
        alone): one Spark task per bin."""
        limit = max(1, self.task_max_records // PACK_DIVISOR)
        bins: list[list[Any]] = []
        sizes: list[int] = []
        for unit in sorted(units, key=lambda u: -weight(u)):
            size = weight(unit)
            if bins and sizes[-1] + size <= limit:
                bins[-1].append(unit)
                sizes[-1] += size
            else:
                bins.append([unit])
                sizes.append(size)
        return bins

    def tasks(
        self,
        body: Callable[[Any], Any],
        units: Sequence[Any],
        owners: dict[str, PartitionWork],
        take: Take,
        weight: Callable[[Any], int] = lambda unit: 0,
    ) -> None:
        """``body`` on each unit (packed by ``weight``), each outcome taken by the partition that owns its unit."""

        def call(chosen: list[Any]) -> list[Outcome]:
            return self.stages.map_tasks(body, self.packed(chosen, weight), self.threads)

        self.gather(isolated(call, _by_partition(units, owners), self.progress), owners, take)

    def gather(
        self, outcomes: list[Outcome], owners: dict[str, PartitionWork], take: Take, complete: bool = True
    ) -> None:
        """The one place outcomes meet their partitions: a failure is the partition's, a value is taken by it; with
        ``complete`` (every unit returns an outcome), a unit that returned nothing fails its partition as a bug."""
        seen = set()
        stray: Failure | None = None  # a task's failure no unit is named in (its units could not be read)
        for outcome in outcomes:
            with self._lock:
                add(self.seconds, outcome.phases)
            item = owners.get(outcome.ident)
            if item is None:
                stray = stray or (outcome.failure if isinstance(outcome, Failed) else None)
                continue
            seen.add(outcome.ident)
            if isinstance(outcome, Failed):
                item.fail(outcome.failure)
            elif item.failure is None:
                take(item, outcome.value)
        for ident in (owners.keys() - seen) if complete else ():
            owners[ident].fail(stray or Failure(f"{ident} produced no result", internal=True))


def _by_partition(units: Sequence[Any], owners: dict[str, PartitionWork]) -> list[list[Any]]:
    """Units grouped by the partition that owns them: what a failed job is narrowed down to."""
    found: dict[int, list[Any]] = {}
    for unit in units:
        found.setdefault(id(owners[unit.ident]), []).append(unit)
    return list(found.values())


class Path(ABC):
    """A way to clean partitions: decide which records survive, then apply the verdicts."""

    name: str

    @abstractmethod
    def decide(self, runner: Runner, items: list[PartitionWork]) -> None:
        """Decide the items (recording outcomes, or failures)."""

    @abstractmethod
    def apply(self, runner: Runner, items: list[PartitionWork]) -> None:
        """Write the new objects of the items still standing."""

    def __repr__(self) -> str:
        return self.name


class Whole(Path):
    """Decided and applied in one task per partition, small partitions packed several to a task."""

    name = "whole"

    def decide(self, runner: Runner, items: list[PartitionWork]) -> None:
        """Nothing yet: each partition is decided in the task that applies it (the verdicts never leave it)."""

    def apply(self, runner: Runner, items: list[PartitionWork]) -> None:
        tasks = [w.task for w in items]
        runner.progress(
            f"cleaning {len(items)} partition(s) in {len(runner.packed(tasks, _records))} task(s), "
            f"{extent(items)} (plan: arrow)"
        )
        runner.tasks(clean_in_task, tasks, {w.task.ident: w for w in items}, _take_cleaned, _records)


def _records(task: CleanTask) -> int:
    return task.records


def _take_cleaned(item: PartitionWork, cleaned: CleanedPartition) -> None:
    item.segment_counts = dict(cleaned.segment_counts)
    segments = {s.base_offset: s for s in item.log.segments}
    for job in cleaned.jobs:
        item.jobs.append(item.task.job(job.job_id, tuple(segments[b] for b in job.sources), job.deletes_only))
        item.add(job)


class Staged(Path):
    """A path that decides in one stage and applies in another, the verdicts handed over through the store. Its
    decide stage leaves counts for every segment of a partition still standing."""

    def apply(self, runner: Runner, items: list[PartitionWork]) -> None:
        """Erased records that only the objects hold, then the layout of each partition's new objects (on the
        driver, from the counts), then one task per apply job (small ones packed)."""
        erasing = [
            w
            for w in items
            if w.task.erasures
            and any(
                s.deletes is not None or s.base_offset < w.task.cleaned.log_start_offset
                for s in w.task.cleaned.segments
            )
        ]
        if erasing:
            runner.tasks(hidden_erased, [w.task for w in erasing], {w.task.ident: w for w in erasing}, _take_hidden)
        jobs: list[tuple[ApplyJob, PartitionWork]] = []
        for item in (w for w in items if w.failure is None):
            task = item.task
            laid_out = lay_out(
                task.cleaned.segments,
                item.segment_counts,
                task.cleaned.first_dirty_offset,
                task.policy,
                stale_empty_batches(task.cleaned.segments, task.batch_policy),
            )
            try:
                item.jobs = [
                    task.job(job_id, sources, deletes_only, tuple(item.source_verdicts(s) for s in sources))
                    for job_id, (sources, deletes_only) in enumerate(laid_out)
                ]
            except CompactionError as err:
                item.fail(Failure.of(err))
                continue
            written = {s.segment_base: s.vector for v in item.verdicts for s in v.segments if s.vector is not None}
            # Rewrites a deciding task made of the segments it decided, laid out on their own: taken where this layout
            # gives the same jobs (their objects otherwise left to gc).
            rewritten = {(a.sources, a.deletes_only): a for v in item.verdicts for a in v.applied}
            for job in item.jobs:
                vector = written.get(job.base_offset) if job.deletes_only else None
                done = rewritten.get((tuple(s.base_offset for s in job.sources), job.deletes_only))
                if vector is not None and vector.deletes is not None:  # its deciding task wrote it
                    item.add(AppliedJob.of(job, segment=vector, bytes_written=vector.deletes.size_bytes))
                elif done is not None:
                    item.add(replace(done, job_id=job.job_id))
                else:
                    jobs.append((job, item))
        if not jobs:
            return
        rewrites = [job for job, _ in jobs if not job.deletes_only]
        runner.progress(
            f"applying: {len(rewrites)} rewrite(s) of {sum(len(j.sources) for j in rewrites)} "
            f"segment(s), {len(jobs) - len(rewrites)} deletion vector(s)"
        )
        runner.tasks(
            apply_listed,
            [job for job, _ in jobs],
            {job.ident: item for job, item in jobs},
            lambda item, result: item.add(result),
            lambda job: sum(s.live_records for s in job.sources),
        )


def _take_hidden(item: PartitionWork, found: dict[int, frozenset[str]]) -> None:
    for base, keys in found.items():
        item.segment_counts[base] = item.segment_counts[base].with_hidden_erased(keys)


def _take_verdicts(item: PartitionWork, verdicts: Any) -> None:
    item.decided(verdicts)


class Ranges(Staged):
    """A partition split into key ranges (a row's range is a hash of its key): a task per range."""

    def decide(self, runner: Runner, items: list[PartitionWork]) -> None:
        runner.progress(
            f"deciding survivors in {len(items)} partition(s) with "
            f"{sum(w.task.split.key_ranges for w in items)} key range(s), {extent(items)} ({self.name})"
        )
        owners = {}
        for item in items:
            owners.update({item.task.of_range(b).ident: item for b in range(item.task.split.key_ranges)})
        ranges = [w.task.of_range(b) for w in items for b in range(w.task.split.key_ranges)]
        self.decide_ranges(runner, ranges, owners)

    @abstractmethod
    def decide_ranges(self, runner: Runner, ranges: list[CleanTask], owners: dict[str, PartitionWork]) -> None:
        """A task per key range, its verdicts taken by its partition."""


class RangesRead(Ranges):
    name = "key ranges"

    def decide_ranges(self, runner: Runner, ranges: list[CleanTask], owners: dict[str, PartitionWork]) -> None:
        runner.tasks(decide_range, ranges, owners, _take_verdicts, lambda task: runner.task_max_records)


class RangesHanded(Ranges):
    name = "key ranges, handed over"

    def decide_ranges(self, runner: Runner, ranges: list[CleanTask], owners: dict[str, PartitionWork]) -> None:
        """Each run of segments read once, its rows handed to the key ranges in the store; then a task per range."""
        runs = [
            RunRead(task=task.of_run(segments))
            for task in ranges
            if task.split.key_range == 0
            for segments in segment_runs(task.cleaned.segments, runner.task_max_records)
        ]
        by_run = {run.ident: owners[run.task.ident] for run in runs}
        handed: dict[int, list[HandedRun]] = {}
        runner.tasks(
            hand_out,
            runs,
            by_run,
            lambda item, run: handed.setdefault(id(item), []).append(run),
            lambda run: run.task.records,
        )
        standing = [task for task in ranges if owners[task.ident].failure is None]
        for task in standing:
            item = owners[task.ident]
            item.handed.update(run.path for run in handed[id(item)])
        chosen = [
            task.of_range(
                task.split.key_range,
                tuple(
                    run.piece(task.split.key_range)
                    for run in sorted(handed[id(owners[task.ident])], key=lambda r: r.first_segment)
                ),
            )
            for task in standing
        ]
        runner.tasks(decide_handed, chosen, owners, _take_verdicts, lambda task: runner.task_max_records)


class AgainstDirtyKeys(Staged):
    """A partition's dirty segments decided and rewritten in one task, and runs of its clean segments each in a task
    of its own against the dirty section's keys (:func:`~compaction.clean.tasks.apply.clean_run`), all in one stage;
    then the apply stage, for what the deciding tasks did not write themselves (a clean segment that loses too much
    for a deletion vector; the dirty section, where the layout merges it with such a segment or a small one before
    it)."""

    name = "clean runs against the dirty keys"

    def decide(self, runner: Runner, items: list[PartitionWork]) -> None:
        runs, owners = [], {}
        for item in items:
            task = item.task
            dirty = tuple(s for s in task.cleaned.segments if s.next_offset > task.cleaned.first_dirty_offset)
            clean = task.cleaned.segments[: len(task.cleaned.segments) - len(dirty)]
            mine = [
                CleanRun(task=task.of_run(run), dirty=dirty) for run in segment_runs(clean, runner.task_max_records)
            ]
            if dirty:
                mine.append(CleanRun(task=task.of_run(dirty)))
            runs += mine
            owners.update({run.ident: item for run in mine})
        runner.progress(
            f"deciding survivors in {len(items)} partition(s) in {len(runs)} run(s), {extent(items)} ({self.name})"
        )
        # The dirty runs first: each decides and rewrites its records, where a clean run reads a few columns of its.
        runner.tasks(
            clean_run,
            runs,
            owners,
            _take_verdicts,
            lambda run: run.records if run.dirty else max(run.records, runner.task_max_records),
        )


@dataclass(frozen=True, eq=False)
class SqlWinnerSearch(Staged):
    """The Spark SQL winner searches: the facts of whole partitions shuffled by key, each key's winner found by SQL."""

    search: rules.WinnerSearch

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.search.value

    def decide(self, runner: Runner, items: list[PartitionWork]) -> None:
        stages = runner.stages
        if not isinstance(stages, SparkStages):
            raise CompactionError(f"the {self.search} plan runs on Spark SQL, which needs a SparkSession")
        runner.progress(f"deciding survivors in {len(items)} partition(s), {extent(items)} (plan: {self.search})")
        now_ms = items[0].task.context.now_ms
        keyless_drop = items[0].task.context.keyless_drop

        def call(chosen: list[CleanTask]) -> list[Outcome]:
            return decide_with_sql(stages, chosen, self.search, now_ms, keyless_drop)

        # An outcome per segment with live rows: a partition with none has nothing to decide, and no outcome.
        owners = {w.task.ident: w for w in items}
        runner.gather(
            isolated(call, [[w.task] for w in items], runner.progress), owners, _take_verdicts, complete=False
        )
        for item in items:  # what no outcome spoke of held no live row: nothing of it was dropped
            for segment in item.task.cleaned.segments:
                item.segment_counts.setdefault(segment.base_offset, SegmentCounts.empty())


WHOLE = Whole()
AGAINST_DIRTY_KEYS = AgainstDirtyKeys()
RANGES_READ = RangesRead()
RANGES_HANDED = RangesHanded()
WINDOW = SqlWinnerSearch(rules.WinnerSearch.WINDOW)
AGGREGATE = SqlWinnerSearch(rules.WinnerSearch.AGGREGATE)


def reads_whole_ranges(task: CleanTask) -> bool:
    """Whether each of a split partition's key ranges reads the whole range (rather than its rows handed to it from
    one read of each run): with transactions, since whether a record is aborted depends on every row before it.
    Otherwise each run is read once, however few the ranges: reading the decision columns once per range cost S5
    (20M records, 4 ranges) a fifth of its tasks' CPU."""
    return has_transactions(task)


#: A partition whose clean section holds more live bytes than this is cleaned against its dirty keys, when it can be
#: (:func:`against_dirty_keys`); a smaller one is read whole once by one task (``tasks.apply.SHARED_READ_BYTES``).
DIRTY_KEYS_FROM_BYTES = SHARED_READ_BYTES


def against_dirty_keys(task: CleanTask) -> bool:
    """Whether a partition can be cleaned against its dirty section's keys (:data:`AGAINST_DIRTY_KEYS`): the Arrow
    winner search under the offset strategy (a dirty record then beats every clean record of its key), a unique clean
    section read sparsely (no transactions, no erasure requests: ``facts.reads_clean_sparsely``) holding more than
    :data:`DIRTY_KEYS_FROM_BYTES`. Its key ranges are then counted by its dirty section alone."""
    return (
        task.context.winner_search is rules.WinnerSearch.ARROW
        and task.context.strategy is rules.Strategy.OFFSET
        and reads_clean_sparsely(task)
        and sum(s.live_size_bytes for s in task.cleaned.segments if s.next_offset <= task.cleaned.first_dirty_offset)
        > DIRTY_KEYS_FROM_BYTES
    )


def path_of(task: CleanTask) -> Path:
    """The way a partition's task is cleaned: the one place that chooses."""
    if task.context.winner_search is rules.WinnerSearch.WINDOW:
        return WINDOW
    if task.context.winner_search is rules.WinnerSearch.AGGREGATE:
        return AGGREGATE
    if task.split.key_ranges == 1 and against_dirty_keys(task):
        return AGAINST_DIRTY_KEYS
    if task.split.key_ranges == 1:
        return WHOLE
    return RANGES_READ if reads_whole_ranges(task) else RANGES_HANDED


#: Progress lines give sizes in MB of 2**20 bytes, as Kafka's cleaner log does.
BYTES_PER_MB = 2**20


def extent(items: Sequence[PartitionWork]) -> str:
    """How much the items' cleaned ranges hold, for progress lines."""
    size = sum(w.log.work_bytes for w in items) / BYTES_PER_MB
    return f"{sum(len(w.log.segments) for w in items)} segment(s), {size:,.1f} MB"
