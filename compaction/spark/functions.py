"""SQL table functions (Python UDTFs) for what the commands show: ``compaction_plan``, ``compaction_status``,
``compaction_files`` and ``compaction_history``, each a row per partition, file or version, with typed columns.

    SELECT * FROM compaction_plan('s3://bucket/topics', 'conf/production.toml') WHERE decision = 'clean'

They return what ``plan --json``, ``status --json``, ``files --json`` and ``history --json`` print, with a
partition's name split into ``topic`` and ``partition``. Each runs where Spark runs a table function (one task),
reading manifests only; ``compaction_plan`` plans as of the wall clock when it runs, as ``plan`` without ``--now``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from compaction.clean.cleaner import plan_store
from compaction.clean.plan_json import plan_json
from compaction.config import Settings
from compaction.errors import StoreError
from compaction.read.files import resolve
from compaction.read.history import history
from compaction.spark.writer import wall_clock_ms
from compaction.store import Manifest, Store, TopicPartition, read_manifests
from compaction.store.status import partition_status

PLAN_COLUMNS = (
    "topic string, partition int, decision string, reason string, version bigint, checkpoint bigint, "
    "first_dirty_offset bigint, checkpoint_reset string, first_uncleanable_offset bigint, log_start_offset bigint, "
    "clean_bytes bigint, cleanable_bytes bigint, cleanable_ratio double, compaction_delay_ms bigint, "
    "active_rolled boolean, tombstone_purge boolean, overdue_ms bigint, expired_segments array<string>, "
    "erasures array<string>, clean_range array<bigint>, segments array<string>"
)
STATUS_COLUMNS = (
    "topic string, partition int, version bigint, format string, segments bigint, size_bytes bigint, records bigint, "
    "log_start_offset bigint, log_end_offset bigint, last_stable_offset bigint, first_dirty_offset bigint, "
    "dirty_bytes bigint, tombstones bigint, last_operation string, last_commit_ms bigint"
)
FILES_COLUMNS = (
    "topic string, partition int, version bigint, log_start_offset bigint, log_end_offset bigint, url string, "
    "path string, base_offset bigint, next_offset bigint, record_count bigint, live_records bigint, "
    "size_bytes bigint, checksum string, max_timestamp bigint, deletes_url string, deletes_count bigint"
)
HISTORY_COLUMNS = (
    "topic string, partition int, version bigint, time_ms bigint, operation string, writer string, run_id string, "
    "records_in bigint, records_out bigint, bytes_in bigint, bytes_out bigint, log_start_offset bigint, "
    "log_end_offset bigint, first_dirty_offset bigint, live_records bigint, segments bigint"
)


def _split(name: str) -> tuple[str, int]:
    """``orders-3`` as ``("orders", 3)`` (a topic's name may hold dashes; the partition is after the last)."""
    topic, _, partition = name.rpartition("-")
    return topic, int(partition)


def _row(values: dict[str, Any], columns: str) -> tuple[Any, ...]:
    topic, partition = _split(values.pop("partition"))
    values.update(topic=topic, partition=partition)
    return tuple(values.get(c.strip().split(" ")[0]) for c in columns.split(","))


class PlanFunction:
    """``compaction_plan(url [, conf])``: ``plan --json``'s partitions (``conf``: a configuration file)."""

    def eval(self, url: str, conf: str | None = None) -> Iterator[tuple[Any, ...]]:
        settings = Settings.load(conf)
        plan = plan_store(Store.open(url), settings, wall_clock_ms())
        for partition in plan_json(plan)["partitions"]:
            yield _row(partition, PLAN_COLUMNS)


class StatusFunction:
    """``compaction_status(url)``: ``status --json``'s partitions; an unreadable manifest fails it, naming it."""

    def eval(self, url: str) -> Iterator[tuple[Any, ...]]:
        store = Store.open(url)
        found = read_manifests(store, store.topic_partitions())
        failures = [f"{tp}: {m}" for tp, m in found.items() if isinstance(m, StoreError)]
        if failures:
            raise StoreError(f"compaction_status({url!r}) cannot read {len(failures)} partition(s): {failures[0]}")
        for manifest in found.values():
            assert isinstance(manifest, Manifest)
            yield _row(partition_status(manifest).to_dict(), STATUS_COLUMNS)


class FilesFunction:
    """``compaction_files(url, topic)``: ``files --json``'s live files, a row each."""

    def eval(self, url: str, topic: str) -> Iterator[tuple[Any, ...]]:
        for part in resolve(Store.open(url), topic):
            for file in part.files:
                values = {
                    "partition": str(part.tp),
                    "version": part.version,
                    "log_start_offset": part.log_start_offset,
                    "log_end_offset": part.log_end_offset,
                    **file.to_dict(),
                }
                deletes = values.pop("deletes")
                values.update(
                    deletes_url=deletes["url"] if deletes else None, deletes_count=deletes["count"] if deletes else 0
                )
                yield _row(values, FILES_COLUMNS)


class HistoryFunction:
    """``compaction_history(url, topic, partition)``: ``history --json``'s versions of one partition."""

    def eval(self, url: str, topic: str, partition: int) -> Iterator[tuple[Any, ...]]:
        TopicPartition(topic, partition)  # a name Kafka refuses is refused here, by the store's rules
        for entry in history(Store.open(url), topic, partition):
            yield _row(entry.to_dict(), HISTORY_COLUMNS)


#: Each function's SQL name, its class and its columns.
FUNCTIONS: dict[str, tuple[type, str]] = {
    "compaction_plan": (PlanFunction, PLAN_COLUMNS),
    "compaction_status": (StatusFunction, STATUS_COLUMNS),
    "compaction_files": (FilesFunction, FILES_COLUMNS),
    "compaction_history": (HistoryFunction, HISTORY_COLUMNS),
}
