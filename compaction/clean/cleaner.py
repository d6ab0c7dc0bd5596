"""The clean pass: turn a plan into new segments on Spark executors, then commit each partition.

Stages (one Spark job each, over all selected partitions at once):

1. **Decide**: executors read the columns the decision needs from every segment of each cleaned range
   (key, offset, version inputs, delete horizons, transaction markers; never values) and decide which
   records survive. With the ``arrow`` plan (the default) each task decides a whole partition (or one key
   bucket of a large one) with Arrow, since keys never cross partitions; the ``window`` and ``aggregate``
   plans shuffle records by key and decide with Spark SQL. All plans state the same rule and pass the same
   tests. The result is one decision row per segment: counts and the offsets it loses.
2. **Apply**: a segment that loses nothing stays as it is. A clean segment that loses a few records gets a
   deletion vector (readers skip those offsets) until too many are deleted or the oldest deletion is
   ``deletion.vector.max.age.ms`` old; every other segment that changes is rewritten, merged with its
   changed or small dirty neighbours up to ``segment.bytes``, keeping offsets, order and the first
   source's base offset.
3. **Commit**: per partition, through the store's commit primitive (rebasing over concurrent appends).
   A partition that fails anywhere is reported uncleanable with the reason; the others still commit.

A Spark job of stage 1 or 2 covers many partitions, and Spark aborts it when one task fails all its
attempts (a task's own errors are caught in it and reported per partition, but a killed Python worker or a
lost executor cannot be). Then the job's partitions run again, one job each, so that only the partition
whose task keeps failing is lost (:meth:`Cleaner._isolate`).

Every object a task attempt writes has a name of its own (:func:`compaction.clean.tasks.object_id`), and only the
objects of the attempt whose result the driver collected are committed: a retried or speculative attempt
never publishes twice, and the losers' objects are left to gc.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TypeVar

from py4j.protocol import Py4JError, Py4JJavaError
from pyspark import RDD, StorageLevel
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from compaction.clean import rules
from compaction.clean.batches import BatchPolicy, active_producers, stale_empty_batches
from compaction.clean.dedupe import FACTS_TYPE, WINNER_PLANS, classify, decision_row, per_segment
from compaction.clean.layout import ApplyPolicy, SegmentOutcome, plan_jobs
from compaction.clean.outcome import PartitionResult, RunReport
from compaction.clean.payloads import AppliedJob, ApplyJob, CleanedPartition, DecisionRow, ReadTask, error_text
from compaction.clean.phases import PhaseSeconds, as_ms, timed
from compaction.clean.planner import (
    CompactionPlan,
    Decision,
    PartitionPlan,
    apply_policy,
    key_buckets,
    plan,
    segment_runs,
)
from compaction.clean.settings import CleanerConfig
from compaction.clean.tasks import (
    BucketDecisions,
    apply_rows,
    bucket_pieces,
    clean_partition,
    decision_rows,
    has_transactions,
    read_facts_batches,
    sample_bounds,
)
from compaction.errors import CompactionError, StoreError
from compaction.store import Replacement, Store, TopicPartition, Writer, read_manifests
from compaction.store.manifest import Manifest, SegmentMeta

log = logging.getLogger("compaction.clean.cleaner")

T = TypeVar("T")
R = TypeVar("R")
Progress = Callable[[str], None]

#: Progress lines give sizes in MB of 2**20 bytes, as Kafka's cleaner log does.
BYTES_PER_MB = 2**20

#: What a Spark action raises when its job fails for good: a task failed all its attempts, or the JVM is gone.
SPARK_JOB_FAILURES = (Py4JError, PySparkException)


def spark_failure(err: Exception) -> str:
    """One line saying why a Spark job failed: its last task failure's cause, with no stack trace."""
    text = str(err.java_exception.getMessage()) if isinstance(err, Py4JJavaError) else str(err)
    attempts = re.search(r"failed (\d+) times", text)
    lost = re.search(r"most recent failure: Lost task .*?\): ", text)
    cause = text[lost.end():] if lost else text
    lines = cause.strip().splitlines() or [""]
    if "Traceback (most recent call last)" in cause:  # a Python exception that left a task: its last line
        lines = [line for line in lines if line.strip() and not line[0].isspace()]
        cause = lines[-1]
    else:
        cause = re.sub(r"^[\w.$]+(Exception|Error): ", "", lines[0]).split(". Consider setting")[0]
    return f"Spark task failed {attempts.group(1)} times: {cause}" if attempts else f"Spark job failed: {cause}"


@dataclass
class PartitionWork:
    """What the Spark stages produce for one partition."""

    plan: PartitionPlan
    outcomes: dict[int, SegmentOutcome] = field(default_factory=dict)  # by segment base offset
    jobs: list[ApplyJob] = field(default_factory=list)
    results: dict[int, SegmentMeta | None] = field(default_factory=dict)  # by job id; None: nothing kept
    bytes_written: int = 0
    records_written: int = 0
    stamped: int = 0  # records the rewrites gave their first delete horizon
    error: str | None = None

    def reset(self) -> None:
        """Forget what a failed Spark job produced (none of it was committed)."""
        self.outcomes, self.jobs, self.results = {}, [], {}
        self.bytes_written = self.records_written = self.stamped = 0
        self.error = None

    def add(self, result: AppliedJob) -> None:
        """Record an apply job's result."""
        self.results[result.job_id] = result.segment
        self.bytes_written += result.bytes_written
        self.records_written += result.records_written
        self.stamped += result.stamped


def _extent(items: list[PartitionWork]) -> str:
    """How much the items' cleaned ranges hold, for progress lines."""
    size = sum(w.plan.work_bytes for w in items) / BYTES_PER_MB
    return f"{sum(len(w.plan.segments) for w in items)} segment(s), {size:,.1f} MB"


def _elapsed_ms(started: float) -> int:
    """Milliseconds since ``started`` (a :func:`time.perf_counter` reading)."""
    return int((time.perf_counter() - started) * 1000)


def plan_store(store: Store, settings: CleanerConfig, now_ms: int,
               topics: str | Sequence[str] | None = None) -> CompactionPlan:
    """Read the partitions' newest manifests and plan them (no Spark involved)."""
    manifests = read_manifests(store, store.topic_partitions(topics))
    for topic in sorted({tp.topic for tp in manifests}):
        settings.topic_config(topic)  # a bad combination of overrides fails before any work
    cleaner = settings.cleaner
    return plan(manifests, settings.topic_config, now_ms, cleaner.max_bytes_per_run,
                deletion_vector_max_age_ms=cleaner.deletion_vector_max_age_ms)


class Cleaner:
    """Runs clean passes of one store with one SparkSession."""

    def __init__(self, spark: SparkSession | None, store: Store, settings: CleanerConfig, *,
                 dedupe_plan: str | None = None, writer: Writer | None = None,
                 progress: Progress | None = None, wall_ms: int | None = None) -> None:
        """``wall_ms`` is the wall clock when the job started: a delete horizon is never stamped below it
        plus ``delete.retention.ms``, so a backdated ``now`` cannot shorten a tombstone's life in real time."""
        try:
            self.dedupe_plan = rules.Plan(dedupe_plan or settings.cleaner.dedupe_plan)
        except ValueError as err:
            raise CompactionError(f"unknown dedupe plan {dedupe_plan!r}; expected one of "
                                  f"{[p.value for p in rules.Plan]}") from err
        self.spark = spark
        self.store = store
        self.settings = settings
        self.writer = writer or Writer(id="compaction-run")
        self.progress = progress or log.info
        self.wall_ms = wall_ms
        self.pass_id = uuid.uuid4().hex  # names the objects of a pass; new for every run
        self.task_seconds = spark.sparkContext.accumulator({}, PhaseSeconds()) if spark is not None else None

    @property
    def session(self) -> SparkSession:
        if self.spark is None:
            raise CompactionError("this plan needs records read, which needs a SparkSession")
        return self.spark

    def run(self, now_ms: int, topics: str | None = None, compaction_plan: CompactionPlan | None = None,
            before_commit: Callable[[], None] | None = None) -> RunReport:
        """Plan (unless given a plan), clean the selected partitions, commit them; never raises for one partition.

        ``before_commit`` runs between the Spark stages and the commits (tests use it to interleave writers).
        """
        started = time.perf_counter()
        self.pass_id = uuid.uuid4().hex
        if self.task_seconds is not None:
            self.task_seconds.value = {}
        the_plan = compaction_plan or plan_store(self.store, self.settings, now_ms, topics)
        phases = {"plan": time.perf_counter() - started} if compaction_plan is None else {}
        selected = the_plan.selected
        self.progress(f"planned {len(the_plan.partitions)} partition(s): {len(selected)} to clean, "
                      f"{len(the_plan.uncleanable)} uncleanable")
        work = {p.partition: PartitionWork(p) for p in selected}
        needing_spark = [w for w in work.values() if w.plan.needs_dedupe]
        whole = [w for w in needing_spark if self.dedupe_plan is rules.Plan.ARROW and self.key_buckets(w.plan) == 1]
        staged = [w for w in needing_spark if w not in whole]
        cleaning = time.perf_counter()
        for items, clean in ((whole, self._clean_in_tasks), (staged, self._clean_staged)):
            if not items:
                continue
            try:
                clean(items, now_ms)
            except SPARK_JOB_FAILURES as err:
                self._isolate(items, clean, now_ms, err)
        phases["clean"] = time.perf_counter() - cleaning
        if before_commit is not None:
            before_commit()
        committing = time.perf_counter()
        results = []
        for index, item in enumerate(work.values(), start=1):
            results.append(self._commit(item, now_ms, started))
            self.progress(f"[{index}/{len(work)}] {results[-1].summary()}")
        for p in the_plan.partitions:
            if p.decision is Decision.CLEAN:
                continue
            if p.checkpoint_reset and p.manifest is not None:
                self._reset_checkpoint(p, now_ms)
            results.append(PartitionResult.from_plan(p))
        phases["commit"] = time.perf_counter() - committing
        report = RunReport.build(self.store.url, self.writer.run_id, now_ms, self.dedupe_plan, the_plan, results,
                                 elapsed_ms=_elapsed_ms(started))
        report.phases_ms.update(as_ms(phases))
        if self.task_seconds is not None:
            report.phases_ms.update(as_ms(self.task_seconds.value, prefix="task_"))
        return report

    def _timed(self, fn: Callable[[T], R]) -> Callable[[T], R]:
        """A task body that adds the phases it marks to this run's task times."""
        assert self.task_seconds is not None
        return timed(fn, self.task_seconds)

    def _isolate(self, items: list[PartitionWork], clean: Callable[[list[PartitionWork], int], None], now_ms: int,
                 err: Exception) -> None:
        """After a Spark job failed for good, run ``clean`` again for each partition in a job of its own.

        The failed job returned nothing, and Spark's message names a task, which only in some stages is one
        partition (a shuffle's tasks hold rows of many). So every partition runs again, a few jobs at a time
        from driver threads; the one whose task keeps failing is reported with the reason in one line. What
        the failed job wrote is never committed.
        """
        if len(items) == 1:  # already alone: its attempts are spent
            items[0].reset()
            items[0].error = spark_failure(err)
            return
        self.progress(f"a Spark job failed ({spark_failure(err)}); cleaning its {len(items)} partition(s) in a "
                      "job each, so that only the one that keeps failing is left out")

        def clean_alone(item: PartitionWork) -> None:
            item.reset()
            try:
                clean([item], now_ms)
            except SPARK_JOB_FAILURES as failure:
                item.error = spark_failure(failure)

        with ThreadPoolExecutor(max_workers=max(1, self.session.sparkContext.defaultParallelism)) as pool:
            list(pool.map(clean_alone, items))

    # Stage 1 -----------------------------------------------------------------------------------------

    def key_buckets(self, p: PartitionPlan) -> int:
        """Key buckets (tasks) for a partition: :func:`~compaction.clean.planner.key_buckets` under the Arrow
        plan; the Spark SQL plans shuffle by key instead."""
        if self.dedupe_plan is not rules.Plan.ARROW:
            return 1
        return key_buckets(p, self.settings.cleaner.task_max_records)

    def apply_policy(self, p: PartitionPlan, now_ms: int) -> ApplyPolicy:
        """How the partition's decisions become objects (:func:`~compaction.clean.planner.apply_policy`)."""
        return apply_policy(p, now_ms, self.settings.cleaner, self.key_buckets(p))

    def read_tasks(self, items: list[PartitionWork], now_ms: int) -> list[ReadTask]:
        """One task per partition, or per key bucket when its cleaned range exceeds ``task.max.records``.

        A split partition's buckets are key ranges with bounds sampled here, once; a partition whose sample
        cannot be read fails with the reason and gets no task.
        """
        tasks = []
        for item in items:
            p = item.plan
            assert p.config is not None and p.manifest is not None and p.first_uncleanable_offset is not None
            end = p.first_uncleanable_offset
            buckets = self.key_buckets(p)
            task = ReadTask(
                tp=p.partition, store=self.store, segments=p.segments,
                tail=tuple(s for s in p.manifest.segments if s.base_offset >= end),
                strategy=rules.Strategy(p.config.compaction_strategy),
                strategy_header=p.config.compaction_strategy_header,
                keyless_drop=self.settings.cleaner.keyless_records == "drop", now_ms=now_ms,
                log_start_offset=p.log_start_offset or 0, buckets=buckets,
                first_dirty_offset=p.first_dirty_offset or 0, clean_keys_unique=p.manifest.clean_keys_unique,
                policy=self.apply_policy(p, now_ms), horizon_ms=self._horizon(p, now_ms), pass_id=self.pass_id,
                segment_format=p.segment_format, batch_policy=self._batch_policy(p, now_ms))
            if buckets == 1:
                tasks.append(task)
                continue
            try:
                bounds = sample_bounds(task)
            except Exception as err:  # isolate the partition; reported with its reason
                item.error = error_text(err)
                continue
            tasks.extend(replace(task, bucket=bucket, bounds=bounds) for bucket in range(buckets))
        return tasks

    def _horizon(self, p: PartitionPlan, now_ms: int) -> int:
        """The horizon this pass stamps: from ``now``, or from the wall clock if that is later (SPEC §3)."""
        assert p.config is not None
        return rules.delete_horizon(max(now_ms, self.wall_ms if self.wall_ms is not None else now_ms),
                                    p.config.delete_retention_ms)

    def _job(self, p: PartitionPlan, job_id: int, sources: tuple[SegmentMeta, ...], deletes_only: bool,
             now_ms: int) -> ApplyJob:
        return ApplyJob(tp=p.partition, store=self.store, job_id=job_id, sources=sources,
                        horizon_ms=self._horizon(p, now_ms), now_ms=now_ms, log_start_offset=p.log_start_offset or 0,
                        deletes_only=deletes_only, pass_id=self.pass_id, segment_format=p.segment_format,
                        batch_policy=self._batch_policy(p, now_ms))

    @staticmethod
    def _batch_policy(p: PartitionPlan, now_ms: int) -> BatchPolicy | None:
        """What keeps a ``.log`` batch that loses every record (only a pass that writes .log segments needs it)."""
        if p.segment_format != "kafka":
            return None
        assert p.manifest is not None and p.config is not None and p.first_uncleanable_offset is not None
        return BatchPolicy(p.first_uncleanable_offset,
                           active_producers(p.manifest, p.config.producer_id_expiration_ms, now_ms))

    def _clean_in_tasks(self, items: list[PartitionWork], now_ms: int) -> None:
        """The Arrow plan for partitions that fit one task: decide and apply there, return metadata only."""
        by_tp = {w.plan.partition: w for w in items}
        tasks = self.read_tasks(items, now_ms)
        self.progress(f"cleaning {len(items)} partition(s) in {len(tasks)} task(s), {_extent(items)} (plan: arrow)")
        # An RDD of the tasks themselves: no SQL planning or Arrow transfer is needed for metadata results,
        # which makes a fresh session's first job seconds shorter.
        results: list[CleanedPartition] = (self.session.sparkContext.parallelize(tasks, len(tasks))
                                           .map(self._timed(clean_partition)).collect())
        for cleaned in results:
            item = by_tp[cleaned.tp]
            if cleaned.error is not None:
                item.error = cleaned.error
                continue
            item.outcomes = dict(cleaned.outcomes)
            segments = {s.base_offset: s for s in item.plan.segments}
            for job in cleaned.jobs:
                item.jobs.append(self._job(item.plan, job.job_id, tuple(segments[b] for b in job.sources),
                                           job.deletes_only, now_ms))
                item.add(job)

    def facts(self, tasks: list[ReadTask]) -> DataFrame:
        """The facts of the tasks' cleaned ranges as a DataFrame (the Spark SQL plans' input)."""
        sc = self.session.sparkContext
        shipped = sc.broadcast(dict(enumerate(tasks)))
        ids = self.session.createDataFrame(sc.parallelize([(i,) for i in range(len(tasks))], len(tasks)), "task int")
        return ids.mapInArrow(lambda batches: read_facts_batches(batches, shipped.value), FACTS_TYPE)

    def decisions(self, tasks: list[ReadTask], now_ms: int) -> RDD:
        """Decision rows (one per segment and key bucket) for the tasks, by this cleaner's plan."""
        if self.dedupe_plan is rules.Plan.ARROW:
            return self._bucket_decisions(tasks)
        keyless_drop = self.settings.cleaner.keyless_records == "drop"
        winners = self.facts(tasks).transform(WINNER_PLANS[self.dedupe_plan])
        return per_segment(classify(winners, now_ms=now_ms, keyless_drop=keyless_drop)).rdd.map(decision_row)

    def _bucket_decisions(self, tasks: list[ReadTask]) -> RDD:
        """The Arrow plan's stage 1 for split partitions, one task per key bucket.

        Without transactions, each run of segments (up to ``task.max.records`` records) is read once and
        its rows shuffled to their buckets' tasks (:func:`~compaction.clean.tasks.bucket_pieces`); with them,
        each bucket's task reads the whole range, since whether a record is aborted depends on every row
        before it.
        """
        sc = self.session.sparkContext
        alone: list[ReadTask] = []
        once: list[ReadTask] = []
        for task in tasks:
            (alone if has_transactions(task) else once).append(task)
        parts = [sc.parallelize(alone, len(alone)).flatMap(self._timed(decision_rows))] if alone else []
        if once:
            runs = [replace(t, segments=run) for t in once if t.bucket == 0
                    for run in segment_runs(t.segments, self.settings.cleaner.task_max_records)]
            reducer = {(t.tp, t.bucket): index for index, t in enumerate(once)}
            pieces = (sc.parallelize(runs, len(runs)).flatMap(self._timed(bucket_pieces))
                      .partitionBy(len(once), lambda key: reducer[key]))
            parts.append(pieces.glom().flatMap(self._timed(BucketDecisions({(t.tp, t.bucket): t for t in once}))))
        if not parts:  # every partition failed before its tasks (a key sample could not be read)
            return sc.parallelize([], 1)
        return parts[0] if len(parts) == 1 else parts[0].union(parts[1])

    def _decide(self, items: list[PartitionWork], now_ms: int) -> RDD:
        """Run stage 1, fill each item's outcomes and apply jobs; returns the persisted decision rows."""
        by_tp = {w.plan.partition: w for w in items}
        tasks = self.read_tasks(items, now_ms)
        self.progress(f"deciding survivors in {len(items)} partition(s) with {len(tasks)} task(s), "
                      f"{_extent(items)} (plan: {self.dedupe_plan})")
        decisions = self.decisions(tasks, now_ms).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            counts: list[DecisionRow] = decisions.map(DecisionRow.counts).collect()
            for row in counts:
                item = by_tp[row.tp]
                if row.error is not None:
                    item.error = item.error or row.error
                    continue
                previous = item.outcomes.get(row.segment_base)
                item.outcomes[row.segment_base] = previous.merge(row.outcome) if previous else row.outcome
            for item in items:
                if item.error is not None:
                    continue
                p = item.plan
                assert p.config is not None and p.first_dirty_offset is not None
                for segment in p.segments:
                    item.outcomes.setdefault(segment.base_offset, SegmentOutcome.empty())
                jobs = plan_jobs(p.segments, item.outcomes, p.first_dirty_offset, self.apply_policy(p, now_ms),
                                 stale_empty_batches(p.segments, self._batch_policy(p, now_ms)))
                item.jobs = [self._job(p, job_id, sources, deletes_only, now_ms)
                             for job_id, (sources, deletes_only) in enumerate(jobs)]
        except BaseException:
            decisions.unpersist()
            raise
        return decisions

    def _clean_staged(self, items: list[PartitionWork], now_ms: int) -> None:
        """Stage 1 for the items' key buckets (or the Spark SQL plans), then stage 2's apply jobs."""
        decisions = self._decide(items, now_ms)
        try:
            self._apply(decisions, [w for w in items if w.error is None and w.jobs])
        finally:
            decisions.unpersist()

    # Stage 2 -----------------------------------------------------------------------------------------

    def _apply(self, decisions: RDD, items: list[PartitionWork]) -> None:
        """Run each job over its segments' decision rows (from every key bucket), one task per job."""
        if not items:
            return
        jobs = {(j.tp, j.job_id): j for w in items for j in w.jobs}
        rewrites = [j for j in jobs.values() if not j.deletes_only]
        self.progress(f"applying: {len(rewrites)} rewrite(s) of {sum(len(j.sources) for j in rewrites)} "
                      f"segment(s), {len(jobs) - len(rewrites)} deletion vector(s)")
        sc = self.session.sparkContext
        job_of = {(j.tp, s.base_offset): key for key, j in jobs.items() for s in j.sources}
        shipped = sc.broadcast((jobs, job_of))

        def route(row: DecisionRow) -> list[tuple[tuple[TopicPartition, int], DecisionRow]]:
            key = shipped.value[1].get((row.tp, row.segment_base))
            return [(key, row)] if key is not None else []

        # Every job gets one placeholder, so a job whose segments had no decision rows still runs.
        keyed = decisions.flatMap(route).union(sc.parallelize([(key, None) for key in jobs]))
        def apply(pair: tuple[tuple[TopicPartition, int], Iterable[DecisionRow | None]]) -> AppliedJob:
            return apply_rows(shipped.value[0][pair[0]], list(pair[1]))

        results: list[AppliedJob] = keyed.groupByKey(numPartitions=len(jobs)).map(self._timed(apply)).collect()
        by_tp = {w.plan.partition: w for w in items}
        for result in results:
            item = by_tp[result.tp]
            if result.error is not None:
                item.error = item.error or result.error
                continue
            item.add(result)

    # Commit ------------------------------------------------------------------------------------------

    def _commit(self, item: PartitionWork, now_ms: int, started: float) -> PartitionResult:
        p = item.plan
        manifest = p.manifest
        assert manifest is not None
        if item.error is not None:
            return PartitionResult.failed(p, item.error, item.outcomes)
        missing = [j.job_id for j in item.jobs if j.job_id not in item.results]
        if missing:
            return PartitionResult.failed(p, f"apply job(s) {missing} produced no output", item.outcomes)
        removed = [s for j in item.jobs for s in j.sources]
        added = [segment for j in item.jobs if (segment := item.results[j.job_id]) is not None]
        assert p.first_uncleanable_offset is not None and p.first_dirty_offset is not None
        checkpoint = max(p.first_uncleanable_offset, p.first_dirty_offset) if p.needs_dedupe else \
            max(p.first_dirty_offset, p.log_start_offset or 0)
        change = Replacement(
            removed=(*p.expired_segments, *removed), added=tuple(added),
            expected_first_dirty_offset=manifest.first_dirty_offset, first_dirty_offset=checkpoint,
            expected_log_start_offset=manifest.log_start_offset,
            log_start_offset=p.log_start_offset if p.log_start_offset is not None else manifest.log_start_offset,
            # A pass leaves one competing record per key in the range it decided, whatever the strategy.
            clean_keys_unique=True if p.needs_dedupe else None, last_clean_ms=now_ms if p.needs_dedupe else None,
            next_horizon_ms=self._next_horizon(item, now_ms))
        try:
            committed = self.store.replace(p.partition, change, writer=self.writer, now_ms=now_ms)
        except StoreError as err:
            return PartitionResult.failed(p, f"{type(err).__name__}: {err}", item.outcomes)
        return PartitionResult.cleaned(p, committed, item.outcomes, item.jobs, added, item.records_written,
                                       item.bytes_written, elapsed_ms=_elapsed_ms(started))

    def _next_horizon(self, item: PartitionWork, now_ms: int) -> int | None:
        """The earliest delete horizon still to come in the cleaned range after this pass."""
        horizons = [o.next_horizon_ms for o in item.outcomes.values() if o.next_horizon_ms is not None]
        if item.stamped:
            horizons.append(self._horizon(item.plan, now_ms))
        return min(horizons, default=None)

    def _reset_checkpoint(self, p: PartitionPlan, now_ms: int) -> Manifest | None:
        """Kafka writes a reset checkpoint at once, even for a partition it does not clean."""
        manifest = p.manifest
        assert manifest is not None and p.first_dirty_offset is not None
        change = Replacement((), (), manifest.first_dirty_offset, p.first_dirty_offset, manifest.log_start_offset,
                             manifest.log_start_offset)
        try:
            return self.store.replace(p.partition, change, writer=self.writer, now_ms=now_ms)
        except StoreError as err:
            log.warning("could not reset the checkpoint of %s: %s", p.partition, err)
            return None
