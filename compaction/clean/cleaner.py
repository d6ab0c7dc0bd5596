"""The clean pass: the run loop that turns a plan into new segments on Spark executors, then commits each partition.

Kafka keeps choosing, cleaning and committing apart (``LogCleanerManager``, ``Cleaner``, ``doneCleaning``), and so
does this package: :mod:`~compaction.clean.planner` chooses, this module runs the pass, :mod:`~compaction.clean.stages`
runs its Spark stages, and :mod:`~compaction.clean.commit` is the one place a checkpoint moves.

A pass builds one complete task per selected partition (:meth:`Cleaner.task`: the cleaned range, the rules'
parameters, how decisions become objects), then:

1. **Decide**: executors read the columns the decision needs from every segment of each cleaned range
   (key, offset, version inputs, delete horizons, transaction markers; never values) and decide which
   records survive. With the ``arrow`` plan (the default) each task decides a whole partition (or one key
   range of a large one) with Arrow, since keys never cross partitions; the ``window`` and ``aggregate``
   plans shuffle records by key and decide with Spark SQL. All plans state the same rule and pass the same
   tests. The result is one decision row per segment: counts and the offsets it loses.
2. **Apply**: a segment that loses nothing stays as it is. A clean segment that loses a few records gets a
   deletion vector (readers skip those offsets) until too many are deleted or the oldest deletion is
   ``deletion.vector.max.age.ms`` old; every other segment that changes is rewritten, merged with its
   changed or small dirty neighbours up to ``segment.bytes``, keeping offsets, order and the first
   source's base offset. A partition that fits one task is decided and applied in that task.
3. **Commit**: per partition, through the store's commit primitive (rebasing over concurrent appends).
   A partition that fails anywhere is reported uncleanable with the reason; the others still commit.

A Spark job covers many partitions, and Spark aborts it when one task fails all its attempts (a task's own
errors are caught in it and reported per partition, but a killed Python worker or a lost executor cannot be).
Then the job's partitions run again, one job each, so that only the partition whose task keeps failing is lost
(:meth:`Cleaner._isolate`).

Every object a task attempt writes has a name of its own (:func:`compaction.clean.tasks.apply.object_id`), and
only the objects of the attempt whose result the driver collected are committed: a retried or speculative
attempt never publishes twice, and the losers' objects are left to gc.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from compaction.clean import rules
from compaction.clean.batches import BatchPolicy, active_producers, stale_empty_batches
from compaction.clean.commit import PartitionWork, done_cleaning, reset_checkpoint
from compaction.clean.layout import SegmentOutcome, plan_jobs
from compaction.clean.outcome import PartitionResult, RunReport
from compaction.clean.payloads import ApplyJob, CleanTask, DecisionRow
from compaction.clean.phases import add, as_ms
from compaction.clean.planner import CompactionPlan, Decision, LogToClean, apply_policy, key_buckets, plan, segment_runs
from compaction.clean.settings import CleanerConfig
from compaction.clean.stages import SparkStages, Stages, TaskResult
from compaction.clean.tasks.apply import apply_decided, clean_in_task
from compaction.clean.tasks.decide import bucket_decision_rows, decision_rows
from compaction.clean.tasks.facts import bucket_pieces, has_transactions, hidden_erased
from compaction.clean.tasks.isolation import Failure, run
from compaction.clean.tasks.key_ranges import sample_bounds
from compaction.errors import CompactionError
from compaction.store import Store, Writer, read_manifests
from compaction.store.erasure import tombstone_offsets

log = logging.getLogger("compaction.clean.cleaner")

Progress = Callable[[str], None]

#: Progress lines give sizes in MB of 2**20 bytes, as Kafka's cleaner log does.
BYTES_PER_MB = 2**20
#: What a Spark action raises when its job fails for good: a task failed all its attempts, or the JVM (or the
#: Spark Connect server) is gone.
SPARK_JOB_FAILURES = (Py4JError, PySparkException)
#: Spark jobs at once while the partitions of a failed job run again one by one.
ISOLATION_JOBS = 4


#: A split partition of fewer key ranges than this reads its whole range in each range's task (keeping that
#: range's rows of each segment as it goes): reading the decision columns a few times over costs less than
#: shuffling them once through Spark, whose rows copy and sort them. With more ranges the reads would grow as
#: the square of the partition, so each run of segments is read once and its rows shuffled.
SHUFFLE_FROM_RANGES = 5


def reads_whole_ranges(task: CleanTask) -> bool:
    """Whether each of a split partition's key ranges reads the whole range (rather than its rows shuffled to it
    from one read of each run): with transactions always, since whether a record is aborted depends on every
    row before it; otherwise while the ranges are few (:data:`SHUFFLE_FROM_RANGES`)."""
    return has_transactions(task) or task.buckets < SHUFFLE_FROM_RANGES


def spark_failure(err: Exception) -> str:
    """One line saying why a Spark job failed: its last task failure's cause, with no stack trace.

    The text is the exception's, JVM causes included (a classic session's collect wraps the job's failure in
    "Exception thrown in awaitResult"; a Spark Connect session's error carries the server's message)."""
    text = str(err)
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


def _extent(items: Sequence[PartitionWork]) -> str:
    """How much the items' cleaned ranges hold, for progress lines."""
    size = sum(w.log.work_bytes for w in items) / BYTES_PER_MB
    return f"{sum(len(w.log.segments) for w in items)} segment(s), {size:,.1f} MB"


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
    """Runs clean passes of one store, with the stages of one SparkSession (classic or Spark Connect)."""

    def __init__(self, spark: SparkSession | Stages | None, store: Store, settings: CleanerConfig, *,
                 dedupe_plan: str | None = None, writer: Writer | None = None,
                 progress: Progress | None = None, wall_ms: int | None = None) -> None:
        """``wall_ms`` is the wall clock when the job started: a delete horizon is never stamped below it
        plus ``delete.retention.ms``, so a backdated ``now`` cannot shorten a tombstone's life in real time."""
        try:
            self.dedupe_plan = rules.Plan(dedupe_plan or settings.cleaner.dedupe_plan)
        except ValueError as err:
            raise CompactionError(f"unknown dedupe plan {dedupe_plan!r}; expected one of "
                                  f"{[p.value for p in rules.Plan]}") from err
        self.stages = spark if isinstance(spark, Stages) or spark is None else SparkStages(spark)
        self.store = store
        self.settings = settings
        self.writer = writer or Writer(id="compaction-run")
        self.progress = progress or log.info
        self.wall_ms = wall_ms
        self.pass_id = uuid.uuid4().hex  # names the objects of a pass; new for every run
        self.task_seconds: dict[str, float] = {}
        self._lock = threading.Lock()  # the task seconds of jobs run from several threads

    @property
    def required_stages(self) -> Stages:
        if self.stages is None:
            raise CompactionError("this plan needs records read, which needs a SparkSession")
        return self.stages

    def run(self, now_ms: int, topics: str | None = None, compaction_plan: CompactionPlan | None = None,
            before_commit: Callable[[], object] | None = None) -> RunReport:
        """Plan (unless given a plan), clean the selected partitions, commit them; never raises for one partition.

        ``before_commit`` runs between the Spark stages and the commits (tests use it to interleave writers).
        """
        started = time.perf_counter()
        self.pass_id = uuid.uuid4().hex
        self.task_seconds = {}
        the_plan = compaction_plan or plan_store(self.store, self.settings, now_ms, topics)
        phases = {"plan": time.perf_counter() - started} if compaction_plan is None else {}
        selected = the_plan.to_clean
        self.progress(f"planned {len(the_plan.partitions)} partition(s): {len(selected)} to clean, "
                      f"{len(the_plan.uncleanable)} uncleanable")
        work = [PartitionWork(p, self.task(p, now_ms)) for p in selected]
        reading = [w for w in work if w.log.needs_dedupe]
        whole = [w for w in reading if self.dedupe_plan is rules.Plan.ARROW and w.task.buckets == 1]
        staged = [w for w in reading if w not in whole]
        cleaning = time.perf_counter()
        paths = [(items, clean) for items, clean in ((staged, self._clean_staged), (whole, self._clean_whole)) if items]
        # The two ways run as Spark jobs at once, so that the cores one leaves idle (its last tasks) serve the
        # other; the staged one first, as it has a second stage to come.
        with ThreadPoolExecutor(max_workers=max(1, len(paths))) as pool:
            list(pool.map(lambda path: self._clean_path(*path), paths))
        phases["clean"] = time.perf_counter() - cleaning
        if before_commit is not None:
            before_commit()
        committing = time.perf_counter()
        results = []
        for index, item in enumerate(work, start=1):
            results.append(done_cleaning(self.store, item, self.writer, now_ms, _elapsed_ms(started)))
            self.progress(f"[{index}/{len(work)}] {results[-1].summary()}")
        for p in the_plan.partitions:
            if p.decision is Decision.CLEAN:
                continue
            results.append(reset_checkpoint(self.store, p, self.writer, now_ms) if p.checkpoint_reset
                           else PartitionResult.from_plan(p))
        phases["commit"] = time.perf_counter() - committing
        report = RunReport.build(self.store.url, self.writer.run_id, now_ms, self.dedupe_plan, the_plan, results,
                                 elapsed_ms=_elapsed_ms(started), erasure_grace_ms=self.settings.cleaner.erasure_grace)
        report.phases_ms.update(as_ms(phases))
        report.phases_ms.update(as_ms(self.task_seconds, prefix="task_"))
        return report

    # The per-partition task ------------------------------------------------------------------------------

    def task(self, p: LogToClean, now_ms: int) -> CleanTask:
        """The partition's task in this pass, every field set: the one place its parameters are put together."""
        cleaner = self.settings.cleaner
        # The Spark SQL plans shuffle by key: only the Arrow plan splits a large partition into key ranges.
        buckets = key_buckets(p, cleaner.task_max_records) if self.dedupe_plan is rules.Plan.ARROW else 1
        # The horizon this pass stamps: from ``now``, or from the wall clock if that is later (SPEC §3).
        horizon = rules.delete_horizon(max(now_ms, self.wall_ms if self.wall_ms is not None else now_ms),
                                       p.config.delete_retention_ms)
        # What keeps a .log batch that loses every record (only a pass that writes .log segments needs it).
        batches = BatchPolicy(p.first_uncleanable_offset, active_producers(
            p.manifest, p.config.producer_id_expiration_ms, now_ms)) if p.segment_format == "kafka" else None
        return CleanTask(
            tp=p.partition, store=self.store, segments=p.segments, tail=p.tail,
            strategy=rules.Strategy(p.config.compaction_strategy), strategy_header=p.config.compaction_strategy_header,
            keyless_drop=cleaner.keyless_records == "drop", now_ms=now_ms, log_start_offset=p.log_start_offset,
            first_dirty_offset=p.first_dirty_offset, clean_keys_unique=p.manifest.clean_keys_unique,
            policy=apply_policy(p, now_ms, cleaner, buckets), horizon_ms=horizon, segment_format=p.segment_format,
            batch_policy=batches, pass_id=self.pass_id, erasures=tuple(sorted(tombstone_offsets(p.erasures).items())),
            buckets=buckets)

    # Spark jobs and their failures -----------------------------------------------------------------------

    def _results(self, results: list[TaskResult]) -> list[TaskResult]:
        """A stage's results, its tasks' seconds added to this run's."""
        with self._lock:
            for result in results:
                add(self.task_seconds, result.phases)
        return results

    def _clean_path(self, items: list[PartitionWork], clean: Callable[[list[PartitionWork]], None]) -> None:
        try:
            clean(items)
        except SPARK_JOB_FAILURES as err:
            self._isolate(items, clean, err)

    def _isolate(self, items: list[PartitionWork], clean: Callable[[list[PartitionWork]], None],
                 err: Exception) -> None:
        """After a Spark job failed for good, run ``clean`` again for each partition in a job of its own.

        The failed job returned nothing, and Spark's message names a task, which only in some stages is one
        partition (a shuffle's tasks hold rows of many). So every partition runs again, a few jobs at a time
        from driver threads; the one whose task keeps failing is reported with the reason in one line. What
        the failed job wrote is never committed.
        """
        if len(items) == 1:  # already alone: its attempts are spent
            items[0].reset()
            items[0].fail(Failure(spark_failure(err)))
            return
        self.progress(f"a Spark job failed ({spark_failure(err)}); cleaning its {len(items)} partition(s) in a "
                      "job each, so that only the one that keeps failing is left out")

        def clean_alone(item: PartitionWork) -> None:
            item.reset()
            try:
                clean([item])
            except SPARK_JOB_FAILURES as failure:
                item.fail(Failure(spark_failure(failure)))

        with ThreadPoolExecutor(max_workers=min(len(items), ISOLATION_JOBS)) as pool:
            list(pool.map(clean_alone, items))

    # A partition in one task: decide and apply there -----------------------------------------------------

    def _clean_whole(self, items: list[PartitionWork]) -> None:
        """The Arrow plan for partitions that fit one task: decide and apply there, return metadata only."""
        items = sorted(items, key=lambda w: -w.log.records)  # the largest first, as cores free up
        self.progress(f"cleaning {len(items)} partition(s) in {len(items)} task(s), {_extent(items)} (plan: arrow)")
        for result in self._results(self.required_stages.map_tasks(clean_in_task, [w.task for w in items])):
            item = items[result.task]
            if result.failure is not None:
                item.fail(result.failure)
                continue
            item.outcomes = dict(result.value.outcomes)
            segments = {s.base_offset: s for s in item.log.segments}
            for job in result.value.jobs:
                item.jobs.append(item.task.job(job.job_id, tuple(segments[b] for b in job.sources), job.deletes_only))
                item.add(job)

    # Stage 1 then stage 2: split partitions, and the Spark SQL plans -------------------------------------

    def _clean_staged(self, items: list[PartitionWork]) -> None:
        """Stage 1 for the items' key ranges (or the Spark SQL plans), then stage 2's apply jobs."""
        self._decide(items)
        self._hidden_erased([w for w in items if w.failure is None and w.task.erasures])
        for item in items:
            if item.failure is not None:
                continue
            for segment in item.log.segments:
                item.outcomes.setdefault(segment.base_offset, SegmentOutcome.empty())
            task = item.task
            jobs = plan_jobs(task.segments, item.outcomes, task.first_dirty_offset, task.policy,
                             stale_empty_batches(task.segments, task.batch_policy))
            item.jobs = [task.job(job_id, sources, deletes_only) for job_id, (sources, deletes_only) in enumerate(jobs)]
        self._apply([w for w in items if w.failure is None and w.jobs])

    def _hidden_erased(self, items: list[PartitionWork]) -> None:
        """For partitions with erasure requests: the records their deletion vectors hide (or that lie below the log
        start) that a request erases, counted into their segments' outcomes (such a segment must be rewritten).
        One task per partition that hides rows at all; the others need no stage."""
        items = [w for w in items if any(s.deletes is not None or s.base_offset < w.task.log_start_offset
                                         for s in w.task.segments)]
        if not items:
            return
        for result in self._results(self.required_stages.map_tasks(hidden_erased, [w.task for w in items])):
            item = items[result.task]
            if result.failure is not None:
                item.fail(result.failure)
                continue
            for base, keys in result.value.items():
                item.outcomes[base] = item.outcomes.get(base, SegmentOutcome.empty()).with_hidden_erased(keys)

    def _decide(self, items: list[PartitionWork]) -> None:
        """Stage 1: each item's decision rows, and the outcomes they add up to."""
        stages = self.required_stages
        ranges = sum(w.task.buckets for w in items)
        self.progress(f"deciding survivors in {len(items)} partition(s) with {ranges} task(s), "
                      f"{_extent(items)} (plan: {self.dedupe_plan})")
        if self.dedupe_plan is not rules.Plan.ARROW:
            keyless_drop = self.settings.cleaner.keyless_records == "drop"
            owners = list(items)
            results = stages.sql_decisions([w.task for w in items], self.dedupe_plan, items[0].task.now_ms,
                                           keyless_drop)
        else:
            owners, results = self._decide_ranges(items)
        for result in self._results(results):
            item = owners[result.task]
            if result.failure is not None:
                item.fail(result.failure)
                continue
            for row in result.value:
                previous = item.outcomes.get(row.segment_base)
                item.outcomes[row.segment_base] = previous.merge(row.outcome) if previous else row.outcome
                item.decisions.append(row)

    def _decide_ranges(self, items: list[PartitionWork]) -> tuple[list[PartitionWork], list[TaskResult]]:
        """The Arrow plan's stage 1 for split partitions, one task per key range (each result's ``task`` is an
        index of the returned owners).

        A partition's key range bounds are sampled here, once; a partition whose sample cannot be read fails
        with the reason and gets no task. Without transactions, each run of segments (up to
        ``task.max.records`` records) is read once and its rows shuffled to the ranges' tasks; with them, each
        range's task reads the whole range, since whether a record is aborted depends on every row before it.
        """
        alone: list[tuple[PartitionWork, CleanTask]] = []
        once: list[tuple[PartitionWork, CleanTask]] = []
        for item in sorted(items, key=lambda w: -w.log.records):
            bounds, failure, _ = run(sample_bounds, item.task)
            if failure is not None:
                item.fail(failure)
                continue
            ranges = [replace(item.task, bucket=b, bounds=bounds) for b in range(item.task.buckets)]
            (alone if reads_whole_ranges(item.task) else once).extend((item, task) for task in ranges)
        stages = self.required_stages

        def read_whole_ranges() -> list[TaskResult]:
            return stages.map_tasks(decision_rows, [task for _, task in alone]) if alone else []

        def read_runs_once() -> list[TaskResult]:
            if not once:
                return []
            first = {(t.tp, t.bucket): index for index, (_, t) in enumerate(once)}
            runs = [(replace(task, segments=segments), tuple(first[task.tp, b] for b in range(task.buckets)))
                    for _, task in once if task.bucket == 0
                    for segments in segment_runs(task.segments, self.settings.cleaner.task_max_records)]
            found = stages.map_groups(bucket_pieces, runs, bucket_decision_rows, [task for _, task in once])
            return [replace(r, task=r.task + len(alone)) for r in found]

        with ThreadPoolExecutor(max_workers=2) as pool:  # two Spark jobs at once, as in run
            both = [pool.submit(read_whole_ranges), pool.submit(read_runs_once)]
            results = [result for future in both for result in future.result()]
        return [item for item, _ in (*alone, *once)], results

    def _apply(self, items: list[PartitionWork]) -> None:
        """Stage 2: each job over its segments' decision rows (from every key range), one task per job."""
        if not items:
            return
        jobs: list[tuple[PartitionWork, tuple[ApplyJob, list[DecisionRow]]]] = []
        for item in items:
            for job in item.jobs:
                bases = {s.base_offset for s in job.sources}
                jobs.append((item, (job, [r for r in item.decisions if r.segment_base in bases])))
        jobs.sort(key=lambda pair: -sum(s.size_bytes for s in pair[1][0].sources))  # the largest first
        rewrites = [job for _, (job, _) in jobs if not job.deletes_only]
        self.progress(f"applying: {len(rewrites)} rewrite(s) of {sum(len(j.sources) for j in rewrites)} "
                      f"segment(s), {len(jobs) - len(rewrites)} deletion vector(s)")
        for result in self._results(self.required_stages.map_tasks(apply_decided, [job for _, job in jobs])):
            item = jobs[result.task][0]
            if result.failure is not None:
                item.fail(result.failure)
                continue
            item.add(result.value)
