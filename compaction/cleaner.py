"""The clean pass: turn a plan into new segments on Spark executors, then commit each partition.

Stages (one Spark job each, over all selected partitions at once):

1. **Decide**: executors read the columns the decision needs from every segment of each cleaned range
   (key, offset, version inputs, tombstone and transaction markers; not values), the strategy adds the
   version, the plan's winner rule marks each key's survivor, and Kafka's record rules decide what stays.
   Per-segment counts come back to the driver.
2. **Rewrite**: only segments that lose records (or need a delete horizon stamped) are rewritten, with
   small dirty neighbours merged up to ``segment.bytes``; each output keeps offsets and order and takes
   the base offset of its first source. Untouched segments stay referenced as they are.
3. **Commit**: per partition, through the store's commit primitive (rebasing over concurrent appends).
   A partition that fails anywhere is reported uncleanable with the reason; the others still commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from compaction.config import Settings
from compaction.dedupe import REASONS, WINNER_PLANS, decide
from compaction.errors import CompactionError, StoreError
from compaction.manifest import Manifest, SegmentMeta
from compaction.planner import CompactionPlan, Decision, PartitionPlan, plan
from compaction.report import PartitionResult, RunReport, SegmentOutcome
from compaction.store import Replacement, Store, TopicPartition, Writer, read_manifests
from compaction.strategies import by_configured_strategy
from compaction.tasks import (
    FACTS_DDL,
    REWRITE_DDL,
    ReadTask,
    RewriteGroup,
    read_facts_batches,
    rewrite_group_arrow,
    segment_from_json,
)

log = logging.getLogger("compaction.cleaner")
Progress = Callable[[str], None]


@dataclass
class _Work:
    """What the Spark stages produce for one partition."""

    plan: PartitionPlan
    outcomes: dict[int, SegmentOutcome] = field(default_factory=dict)  # by segment base offset
    groups: list[RewriteGroup] = field(default_factory=list)
    added: dict[int, SegmentMeta] = field(default_factory=dict)  # by group id
    bytes_written: int = 0
    records_written: int = 0
    error: str | None = None


def rewrite_groups(segments: Sequence[SegmentMeta], outcomes: dict[int, SegmentOutcome], first_dirty_offset: int,
                   segment_bytes: int) -> list[list[SegmentMeta]]:
    """Consecutive segments to rewrite together, each group's estimated output within ``segment.bytes``.

    A segment is rewritten when it loses a record or needs a horizon stamped; a dirty segment (at or past
    the checkpoint) smaller than half of ``segment.bytes`` also joins a neighbouring group, so small
    appends get merged. A group of one unchanged segment is no rewrite at all.
    """
    groups: list[list[SegmentMeta]] = []
    current: list[SegmentMeta] = []
    size = 0

    def flush() -> None:
        nonlocal current, size
        if len(current) > 1 or (current and outcomes[current[0].base_offset].changed):
            groups.append(current)
        current, size = [], 0

    for segment in segments:
        outcome = outcomes[segment.base_offset]
        estimate = outcome.estimated_bytes(segment)
        small_dirty = segment.next_offset > first_dirty_offset and estimate < segment_bytes // 2
        if not (outcome.changed or small_dirty):
            flush()
            continue
        if current and size + estimate > segment_bytes:
            flush()
        current.append(segment)
        size += estimate
    flush()
    return groups


def plan_store(store: Store, settings: Settings, now_ms: int, topics: str | None = None) -> CompactionPlan:
    """Read the partitions' newest manifests and plan them (no Spark involved)."""
    manifests = read_manifests(store, store.topic_partitions(topics))
    for topic in sorted({tp.topic for tp in manifests}):
        settings.topic_config(topic)  # a bad combination of overrides fails before any work
    return plan(manifests, settings.topic_config, now_ms, settings.cleaner.max_bytes_per_run)


class Cleaner:
    """Runs clean passes of one store with one SparkSession."""

    def __init__(self, spark: SparkSession | None, store: Store, settings: Settings, *, dedupe_plan: str = "window",
                 writer: Writer | None = None, progress: Progress | None = None) -> None:
        if dedupe_plan not in WINNER_PLANS:
            raise CompactionError(f"unknown dedupe plan {dedupe_plan!r}; expected one of {sorted(WINNER_PLANS)}")
        self.spark = spark
        self.store = store
        self.settings = settings
        self.dedupe_plan = dedupe_plan
        self.writer = writer or Writer(id="compaction-run")
        self.progress = progress or log.info

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
        the_plan = compaction_plan or plan_store(self.store, self.settings, now_ms, topics)
        selected = the_plan.selected
        self.progress(f"planned {len(the_plan.partitions)} partition(s): {len(selected)} to clean, "
                      f"{len(the_plan.uncleanable)} uncleanable")
        work = {p.partition: _Work(p) for p in selected}
        needing_spark = [w for w in work.values() if w.plan.needs_dedupe]
        if needing_spark:
            decided = self._decide(needing_spark, now_ms)
            try:
                self._rewrite(decided, [w for w in needing_spark if w.error is None and w.groups])
            finally:
                decided.unpersist()
        if before_commit is not None:
            before_commit()
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
        return RunReport.build(self.store.url, self.writer.run_id, now_ms, self.dedupe_plan, the_plan, results,
                               elapsed_ms=int((time.perf_counter() - started) * 1000))

    # Stage 1 -----------------------------------------------------------------------------------------

    def _read_tasks(self, items: list[_Work]) -> list[ReadTask]:
        tasks = []
        for item in items:
            p = item.plan
            assert p.config is not None and p.manifest is not None and p.first_uncleanable_offset is not None
            end = p.first_uncleanable_offset
            beyond = tuple(s for s in p.manifest.segments if s.base_offset >= end and (s.transactional_count
                                                                                          or s.control_count))
            tasks.append(ReadTask(
                tp=p.partition, store=self.store, segments=p.segments, beyond=beyond,
                strategy=p.config.compaction_strategy, strategy_header=p.config.compaction_strategy_header,
                delete_retention_ms=p.config.delete_retention_ms,
                keyless_drop=self.settings.cleaner.keyless_records == "drop"))
        return tasks

    def facts(self, tasks: list[ReadTask]) -> DataFrame:
        """The records of the tasks' cleaned ranges as a DataFrame: one Spark task per read task."""
        sc = self.session.sparkContext
        shipped = sc.broadcast(dict(enumerate(tasks)))
        ids = self.session.createDataFrame(sc.parallelize([(i,) for i in range(len(tasks))], len(tasks)), "task int")
        return ids.mapInArrow(lambda batches: read_facts_batches(batches, shipped.value), FACTS_DDL)

    def decisions(self, facts: DataFrame, now_ms: int) -> DataFrame:
        """Strategy version, winner per key (this cleaner's plan), then Kafka's record rules."""
        return (facts.transform(by_configured_strategy)
                .transform(WINNER_PLANS[self.dedupe_plan])
                .transform(decide(now_ms)))

    def _decide(self, items: list[_Work], now_ms: int) -> DataFrame:
        """Run stage 1, fill each item's segment outcomes and rewrite groups; returns the persisted decisions."""
        by_tp = {w.plan.partition: w for w in items}
        total = sum(w.plan.work_bytes for w in items)
        self.progress(f"deciding survivors in {len(items)} partition(s), {sum(len(w.plan.segments) for w in items)} "
                      f"segment(s), {total / 2**20:,.1f} MB (plan: {self.dedupe_plan})")
        decided = self.decisions(self.facts(self._read_tasks(items)), now_ms).select(
            "topic", "partition", "segment_base", "offset", "reason", "keep", "stamp", "error")
        decided = decided.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            counts = [F.sum(F.when(F.col("reason") == r, 1).otherwise(0)).alias(r) for r in REASONS]
            rows = (decided.groupBy("topic", "partition", "segment_base")
                    .agg(F.count(F.lit(1)).alias("records"), F.sum(F.col("keep").cast("long")).alias("kept"),
                         F.sum(F.col("stamp").cast("long")).alias("stamped"), F.max("error").alias("error"), *counts)
                    .collect())
            for row in rows:
                item = by_tp[TopicPartition(row["topic"], row["partition"])]
                if row["error"] is not None:
                    item.error = row["error"]
                    continue
                item.outcomes[row["segment_base"]] = SegmentOutcome(
                    records=row["records"], kept=row["kept"], stamped=row["stamped"],
                    dropped={r: row[r] for r in REASONS if row[r]})
            for item in items:
                if item.error is not None:
                    continue
                p = item.plan
                for segment in p.segments:
                    item.outcomes.setdefault(segment.base_offset, SegmentOutcome(0, 0, 0, {}))
                assert p.config is not None and p.first_dirty_offset is not None
                groups = rewrite_groups(p.segments, item.outcomes, p.first_dirty_offset, p.config.segment_bytes)
                item.groups = [RewriteGroup(p.partition, self.store, gid, tuple(g),
                                            horizon_ms=now_ms + p.config.delete_retention_ms, created_ms=now_ms)
                               for gid, g in enumerate(groups)]
        except BaseException:
            decided.unpersist()
            raise
        return decided

    # Stage 2 -----------------------------------------------------------------------------------------

    def _rewrite(self, decided: DataFrame, items: list[_Work]) -> None:
        if not items:
            return
        groups = {(g.tp.topic, g.tp.partition, g.group_id): g for w in items for g in w.groups}
        self.progress(f"rewriting {len(groups)} segment group(s) from "
                      f"{sum(len(g.sources) for g in groups.values())} segment(s)")
        membership = [(g.tp.topic, g.tp.partition, s.base_offset, g.group_id) for g in groups.values()
                      for s in g.sources]
        members = self.session.createDataFrame(membership, "topic string, partition int, segment_base long, "
                                                         "group_id int")
        kept = (decided.filter(F.col("keep")).join(F.broadcast(members), ["topic", "partition", "segment_base"])
                .select("topic", "partition", "group_id", "offset", "stamp"))
        sentinels = self.session.createDataFrame([(t, p, gid, None, False) for t, p, gid in groups],
                                               "topic string, partition int, group_id int, offset long, "
                                               "stamp boolean")
        shipped = self.session.sparkContext.broadcast(groups)
        rows = (kept.unionByName(sentinels).groupBy("topic", "partition", "group_id")
                .applyInArrow(lambda key, table: rewrite_group_arrow(key, table, shipped.value), REWRITE_DDL)
                .collect())
        by_tp = {w.plan.partition: w for w in items}
        for row in rows:
            item = by_tp[TopicPartition(row["topic"], row["partition"])]
            if row["error"] is not None:
                item.error = item.error or row["error"]
                continue
            item.added[row["group_id"]] = segment_from_json(row["segment"])
            item.bytes_written += row["bytes_written"]
            item.records_written += row["records_written"]

    # Commit ------------------------------------------------------------------------------------------

    def _commit(self, item: _Work, now_ms: int, started: float) -> PartitionResult:
        p = item.plan
        manifest = p.manifest
        assert manifest is not None
        if item.error is not None:
            return PartitionResult.failed(p, item.error, item.outcomes)
        missing = [g.group_id for g in item.groups if g.group_id not in item.added]
        if missing:
            return PartitionResult.failed(p, f"segment group(s) {missing} produced no output", item.outcomes)
        removed = [s for g in item.groups for s in g.sources]
        added = [item.added[g.group_id] for g in item.groups]
        assert p.first_uncleanable_offset is not None and p.first_dirty_offset is not None
        checkpoint = max(p.first_uncleanable_offset, p.first_dirty_offset) if p.needs_dedupe else \
            max(p.first_dirty_offset, p.log_start_offset or 0)
        change = Replacement(
            removed=(*p.expired_segments, *removed), added=tuple(added),
            expected_first_dirty_offset=manifest.first_dirty_offset, first_dirty_offset=checkpoint,
            expected_log_start_offset=manifest.log_start_offset,
            log_start_offset=p.log_start_offset if p.log_start_offset is not None else manifest.log_start_offset)
        try:
            committed = self.store.replace(p.partition, change, writer=self.writer, now_ms=now_ms)
        except StoreError as err:
            return PartitionResult.failed(p, f"{type(err).__name__}: {err}", item.outcomes)
        return PartitionResult.cleaned(p, committed, item.outcomes, removed, added, item.records_written,
                                       item.bytes_written, elapsed_ms=int((time.perf_counter() - started) * 1000))

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

