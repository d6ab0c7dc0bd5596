"""The clean pass: choose, clean, commit, as Kafka's ``Cleaner.doClean`` reads.

Kafka keeps choosing, cleaning and committing apart (``LogCleanerManager``, ``Cleaner``, ``doneCleaning``), and so
does this package: :mod:`~compaction.clean.planner` chooses, :mod:`~compaction.clean.paths` cleans (each selected
partition by the way :func:`~compaction.clean.paths.path_of` chooses for it), and :mod:`~compaction.clean.commit` is
the one place a checkpoint moves. :meth:`Cleaner.run` is those steps in order:

1. **Plan**: every partition's newest manifest, and the planner's selection (no Spark involved).
2. **Task**: each selected partition's task, built once (:meth:`Cleaner.task`: the cleaned range, the rules'
   parameters, how verdicts become objects, how many key ranges).
3. **Clean**: per path, decide which records survive (executors read only the fact columns: key, offset,
   version inputs, delete horizons, transaction markers; never values), then apply the verdicts: a segment that
   loses nothing stays, a clean segment that loses a few gets a deletion vector, the others are rewritten and
   merged up to ``segment.bytes``, keeping offsets, order and the first source's base offset.
4. **Commit**: per partition, through the store's commit primitive (rebasing over concurrent appends), many at
   once. A partition that fails anywhere is reported with the reason and commits nothing; the others commit.

Every object a task attempt writes has a name of its own (:func:`compaction.clean.tasks.objects.object_id`), and
only the objects of the attempt whose result the driver collected are committed: a retried or speculative
attempt never publishes twice, and the losers' objects are left to gc.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from pyspark.sql import SparkSession

from compaction import rules
from compaction.clean.batches import BatchPolicy, active_producers
from compaction.clean.commit import done_cleaning, reset_checkpoint
from compaction.clean.paths import LOCAL_UNIT_THREADS, REMOTE_UNIT_THREADS, Path, Runner, against_dirty_keys, path_of
from compaction.clean.payloads import CleanedRange, CleanTask, KeySplit, PassContext
from compaction.clean.planner import (
    CompactionPlan,
    LogToClean,
    Selected,
    Skipped,
    Uncleanable,
    plan,
)
from compaction.clean.results import PartitionResult, RunIdentity, RunReport
from compaction.clean.settings import CleanerConfig
from compaction.clean.sizing import apply_policy, key_range_count
from compaction.clean.work import PartitionWork
from compaction.display import Progress, quiet
from compaction.engine.phases import as_ms
from compaction.engine.stages import SparkStages, Stages
from compaction.errors import CompactionError
from compaction.store import SegmentFormat, Store, Writer, read_manifests
from compaction.store.erasure import tombstone_offsets

log = logging.getLogger("compaction.clean.cleaner")

#: The modules a pass's tasks run: the Python workers' warm-up imports them while the driver plans.
TASK_MODULES = ("compaction.clean.tasks.apply", "compaction.clean.dedupe")
#: Partitions committed at once: each commit is an exclusive create of its own partition's next manifest, and
#: on an object store most of its time is the request's round trip.
COMMIT_THREADS = 64


def _elapsed_ms(started: float) -> int:
    """Milliseconds since ``started`` (a :func:`time.perf_counter` reading)."""
    return int((time.perf_counter() - started) * 1000)


def plan_store(
    store: Store, settings: CleanerConfig, now_ms: int, topics: str | Sequence[str] | None = None
) -> CompactionPlan:
    """Read the partitions' newest manifests and plan them (no Spark involved)."""
    manifests = read_manifests(store, store.topic_partitions(topics))
    for topic in sorted({tp.topic for tp in manifests}):
        settings.topic_config(topic)  # a bad combination of overrides fails before any work
    cleaner = settings.cleaner
    return plan(
        manifests,
        settings.topic_config,
        now_ms,
        cleaner.max_bytes_per_run,
        deletion_vector_max_age_ms=cleaner.deletion_vector_max_age_ms,
    )


def winner_search(settings: CleanerConfig, dedupe_plan: str | None = None) -> rules.WinnerSearch:
    """How a run finds each key's winner: ``dedupe_plan`` (the run's ``--plan``), else ``[cleaner] dedupe.plan``. The
    one place it is resolved: the command starts its session for it and the pass cleans by it."""
    try:
        return rules.WinnerSearch(dedupe_plan or settings.cleaner.dedupe_plan)
    except ValueError as err:
        raise CompactionError(
            f"unknown dedupe plan {dedupe_plan!r}; expected one of {[p.value for p in rules.WinnerSearch]}"
        ) from err


class Cleaner:
    """Runs clean passes of one store, with the stages of one SparkSession (classic or Spark Connect)."""

    def __init__(
        self,
        spark: SparkSession | Stages | None,
        store: Store,
        settings: CleanerConfig,
        *,
        dedupe_plan: str | None = None,
        writer: Writer | None = None,
        progress: Progress = quiet,
        wall_ms: int | None = None,
    ) -> None:
        """``wall_ms`` is the wall clock when the job started: a delete horizon is never stamped below it
        plus ``delete.retention.ms``, so a backdated ``now`` cannot shorten a tombstone's life in real time."""
        self.winner_search = winner_search(settings, dedupe_plan)
        self.stages = spark if isinstance(spark, Stages) or spark is None else SparkStages(spark)
        self.store = store
        self.settings = settings
        self.writer = writer or Writer(id="compaction-run")
        self.progress = progress  # the caller shows the pass's lines, if it wants them
        self.wall_ms = wall_ms
        self.pass_id = uuid.uuid4().hex  # names the objects of a pass; new for every run
        self._contexts: dict[PassContext, PassContext] = {}  # the pass's, by value

    @property
    def required_stages(self) -> Stages:
        if self.stages is None:
            raise CompactionError("this plan needs records read, which needs a SparkSession")
        return self.stages

    def run(self, now_ms: int, topics: str | None = None, compaction_plan: CompactionPlan | None = None) -> RunReport:
        """Plan (unless given a plan), clean the selected partitions, commit them; never raises for one partition."""
        started = time.perf_counter()
        self.pass_id = uuid.uuid4().hex
        self._contexts = {}
        the_plan = compaction_plan or plan_store(self.store, self.settings, now_ms, topics)
        phases = {"plan": time.perf_counter() - started} if compaction_plan is None else {}
        selected = the_plan.to_clean
        self.progress(
            f"planned {len(the_plan.partitions)} partition(s): {len(selected)} to clean, "
            f"{len(the_plan.uncleanable)} uncleanable"
        )
        work = [PartitionWork(p, self.task(p, now_ms)) for p in selected]
        cleaning = time.perf_counter()
        seconds = self.clean([w for w in work if w.log.needs_dedupe])
        phases["clean"] = time.perf_counter() - cleaning
        committing = time.perf_counter()
        results = self.commit(work, now_ms, started)
        for p in the_plan.partitions:
            match p:
                case Selected():
                    pass  # committed above
                case Skipped(checkpoint_reset=reset) if reset is not None:
                    results.append(reset_checkpoint(self.store, p, reset, self.writer, now_ms))
                case Skipped() | Uncleanable():
                    results.append(PartitionResult.from_plan(p))
        phases["commit"] = time.perf_counter() - committing
        run = RunIdentity(
            run_id=self.writer.run_id, store=self.store.url, now_ms=now_ms, dedupe_plan=self.winner_search
        )
        return RunReport.build(
            run,
            the_plan,
            results,
            _elapsed_ms(started),
            phases_ms={**as_ms(phases), **as_ms(seconds, prefix="task_")},
            driver_bytes=self.stages.sent_bytes + self.stages.received_bytes if self.stages is not None else 0,
        )

    def clean(self, work: list[PartitionWork]) -> dict[str, float]:
        """Each partition by its path: decide, then apply; the paths run at once (their Spark jobs share the
        cores, those one leaves idle serving another). Returns the tasks' seconds by phase."""
        if not work:
            return {}
        runner = Runner(
            self.required_stages,
            self.settings.cleaner.task_max_records,
            LOCAL_UNIT_THREADS if self.store.storage.calls_fail_whole else REMOTE_UNIT_THREADS,
            self.progress,
        )
        paths: dict[Path, list[PartitionWork]] = {}
        for item in work:
            paths.setdefault(path_of(item.task), []).append(item)

        def clean_path(path: Path, items: list[PartitionWork]) -> None:
            path.decide(runner, items)
            path.apply(runner, [w for w in items if w.failure is None])

        # Paths with two stages first: their second stage is still to come.
        ordered = sorted(paths.items(), key=lambda pair: pair[0].name == "whole")
        with ThreadPoolExecutor(max_workers=len(ordered)) as pool:
            list(pool.map(lambda pair: clean_path(*pair), ordered))
        return runner.seconds

    def commit(self, work: list[PartitionWork], now_ms: int, started: float) -> list[PartitionResult]:
        """Each partition's commit (or why it cannot commit), many at once; then its hand-over objects are deleted.
        Each commit's line is one of as many counted lines as commits, which whoever shows them numbers."""

        def commit_one(item: PartitionWork) -> PartitionResult:
            result = done_cleaning(self.store, item, self.writer, now_ms, _elapsed_ms(started))
            try:
                self.store.objects.delete_handed(item.task.tp, item.handed_paths())
            except CompactionError as err:  # gc removes them later
                log.debug("could not delete the hand-over objects of %s: %s", item.task.tp, err)
            self.progress(result.summary(), of=len(work))
            return result

        with ThreadPoolExecutor(max_workers=max(1, min(COMMIT_THREADS, len(work)))) as pool:
            return list(pool.map(commit_one, work))

    # The per-partition task ------------------------------------------------------------------------------

    def task(self, p: LogToClean, now_ms: int) -> CleanTask:
        """The partition's task in this pass, every field set: the one place its parameters are put together."""
        cleaner = self.settings.cleaner
        # The Spark SQL winner searches shuffle by key: only the Arrow one splits a large partition into key ranges.
        arrow = self.winner_search is rules.WinnerSearch.ARROW
        key_ranges = key_range_count(p, cleaner.task_max_records) if arrow else 1
        # The horizon this pass stamps: from ``now``, or from the wall clock if that is later (SPEC §3).
        horizon = rules.delete_horizon(
            max(now_ms, self.wall_ms if self.wall_ms is not None else now_ms), p.config.cleaning.delete_retention_ms
        )
        segment_format = SegmentFormat(p.segment_format)
        # What keeps a .log batch that loses every record (only a pass that writes .log segments needs it).
        batches = (
            BatchPolicy(
                p.first_uncleanable_offset,
                active_producers(p.manifest, p.config.cleaning.producer_id_expiration_ms, now_ms),
            )
            if segment_format == SegmentFormat.KAFKA
            else None
        )
        context = PassContext(
            store=self.store,
            pass_id=self.pass_id,
            now_ms=now_ms,
            horizon_ms=horizon,
            segment_format=segment_format,
            winner_search=self.winner_search,
            strategy=rules.Strategy(p.config.cleaning.compaction_strategy),
            strategy_header=p.config.cleaning.compaction_strategy_header,
            keyless_drop=cleaner.keyless_records == "drop",
        )
        task = CleanTask(
            context=self._contexts.setdefault(context, context),  # one per topic: a bin of units pickles it once
            tp=p.partition,
            cleaned=CleanedRange(
                log_start_offset=p.log_start_offset,
                first_dirty_offset=p.first_dirty_offset,
                segments=p.segments,
                tail=p.tail,
                clean_keys_unique=p.manifest.clean_keys_unique,
            ),
            policy=apply_policy(p, now_ms, cleaner, key_ranges),
            batch_policy=batches,
            erasures=tuple(sorted(tombstone_offsets(p.erasures).items())),
            split=KeySplit(key_ranges=key_ranges),
        )
        if key_ranges > 1 and against_dirty_keys(task):  # its clean section holds only the rows the dirty keys contest
            key_ranges = key_range_count(p, cleaner.task_max_records, clean_section=False)
            task = replace(
                task, split=KeySplit(key_ranges=key_ranges), policy=apply_policy(p, now_ms, cleaner, key_ranges)
            )
        return task
