"""The batch read: the live log of the topics a read selects, as Spark tasks of the read path's units, with the
filters Spark pushes down applied to whole partitions, files, row groups and rows.

The read plans on the driver (``partitions``): it pins each selected partition's manifest (``version`` or the
newest), bounds it by ``startingOffsets`` / ``endingOffsets`` and the pushed filters, and hands each live file that
may match to a task (each partition whole for ``latest``, whose winners are found across files), which reads it
with the read path's core (:class:`compaction.read.task.ReadTask`) and returns the Kafka source's columns.

Filters on ``topic`` and ``partition`` choose partitions; on ``offset`` and ``timestamp`` they skip files by their
manifest figures and row groups by their statistics; ``key`` equality skips rows; each is then exact, so Spark does
not evaluate it again. With ``latest`` only the choice of partitions is pushed: the view is each key's winner, and
a filter on its rows applies after the winners are found, as Spark means it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from compaction.read.files import PartitionFiles, resolve
from compaction.read.filters import RecordFilter
from compaction.read.task import ReadTask
from compaction.rules import Strategy
from compaction.spark.options import EARLIEST, LATEST, Offsets, ReadOptions
from compaction.spark.rows import read_schema, record_columns, to_kafka
from compaction.store import Store

#: A bound ``[low, high)`` of a column's integers; None: open.
Bound = tuple[int | None, int | None]


def _tighter(bound: Bound, low: int | None = None, high: int | None = None) -> Bound:
    lows = [b for b in (bound[0], low) if b is not None]
    highs = [b for b in (bound[1], high) if b is not None]
    return (max(lows) if lows else None, min(highs) if highs else None)


def _within(value: int, bound: Bound) -> bool:
    return (bound[0] is None or value >= bound[0]) and (bound[1] is None or value < bound[1])


def _micros(value: datetime) -> int:
    """A pushed timestamp literal as microseconds since the epoch (a naive one is in this process's local time, as
    pyspark made it)."""
    whole = value.replace(microsecond=0)
    return int(whole.timestamp()) * 1_000_000 + value.microsecond


def _ms_bound(kind: type[Filter], micros: int) -> Bound:
    """The bound in ms a comparison of a record's ms timestamp (as micros) with ``micros`` sets."""
    floor, exact = divmod(micros, 1000)
    ceiling = floor + (1 if exact else 0)
    return {
        GreaterThan: (floor + 1, None),
        GreaterThanOrEqual: (ceiling, None),
        LessThan: (None, ceiling),
        LessThanOrEqual: (None, floor + 1),
        EqualTo: (ceiling, floor + 1),
    }[kind]


@dataclass
class Pushed:
    """What the filters Spark pushed select: topics, partitions, and the records' offsets, timestamps and keys."""

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    partition_bound: Bound = (None, None)
    offsets: Bound = (None, None)
    timestamps: Bound = (None, None)
    keys: frozenset[bytes] | None = None

    def take(self, found: Filter, records: bool) -> bool:
        """Take ``found`` if it can be applied exactly (``records``: filters on records' columns too); True if so."""
        column = getattr(found, "attribute", ("",))
        if len(column) != 1:
            return False
        name: str = column[0]
        value: Any = getattr(found, "value", None)
        values: tuple[Any, ...] = tuple(value) if isinstance(found, In) else (value,)
        if name == "topic" and isinstance(found, EqualTo | In) and all(isinstance(v, str) for v in values):
            self.topics = frozenset(values) if self.topics is None else self.topics & frozenset(values)
            return True
        integers = all(isinstance(v, int) and not isinstance(v, bool) for v in values)
        if name == "partition" and integers:
            if isinstance(found, EqualTo | In):
                self.partitions = frozenset(values) if self.partitions is None else self.partitions & set(values)
                return True
            self.partition_bound = _tighter(self.partition_bound, *_int_bound(type(found), value))
            return True
        if not records:
            return False
        if name == "offset" and integers and not isinstance(found, In):
            self.offsets = _tighter(self.offsets, *_int_bound(type(found), value))
            return True
        if name == "timestamp" and isinstance(value, datetime) and not isinstance(found, In):
            self.timestamps = _tighter(self.timestamps, *_ms_bound(type(found), _micros(value)))
            return True
        if name == "key" and isinstance(found, EqualTo | In) and all(isinstance(v, bytes | bytearray) for v in values):
            keys = frozenset(bytes(v) for v in values)
            self.keys = keys if self.keys is None else self.keys & keys
            return True
        return False

    def allows(self, partition: int) -> bool:
        return (self.partitions is None or partition in self.partitions) and _within(partition, self.partition_bound)

    def record_filter(self, offsets: Bound) -> RecordFilter:
        bounds = _tighter(offsets, *self.offsets)
        return RecordFilter.of(self.keys, bounds, self.timestamps if self.timestamps != (None, None) else None)


def _int_bound(kind: type[Filter], value: int) -> Bound:
    return {
        GreaterThan: (value + 1, None),
        GreaterThanOrEqual: (value, None),
        LessThan: (None, value),
        LessThanOrEqual: (None, value + 1),
        EqualTo: (value, value + 1),
    }[kind]


def _offset(spec: Offsets, topic: str, part: PartitionFiles, end: bool) -> int | None:
    """A partition's bound from ``startingOffsets`` (``end`` False) or ``endingOffsets``; None: its log's own."""
    if isinstance(spec, str):
        return part.log_end_offset if spec == "latest" and not end else None
    number = spec.get(topic, {}).get(part.tp.partition)
    if number is None or number == EARLIEST:
        return None
    return part.log_end_offset if number == LATEST else number


class ReadPartition(InputPartition):
    """A Spark task of the read: a unit of the read path (its partition names the rows' topic and partition)."""

    def __init__(self, task: ReadTask) -> None:
        super().__init__(None)
        self.task = task


def read_tasks(store: Store, options: ReadOptions, pushed: Pushed, schema: pa.Schema) -> list[ReadTask]:
    """The read's units: each live file that may match, or (``latest``) each partition, in topic and partition order."""
    settings = options.store.settings() if options.latest else None
    columns = tuple(record_columns(schema))
    tasks: list[ReadTask] = []
    for topic, assigned in options.subscription.select(store).items():
        if pushed.topics is not None and topic not in pushed.topics:
            continue
        partitions = [p for p in (assigned if assigned is not None else store.partitions(topic)) if pushed.allows(p)]
        if not partitions:
            continue
        version = options.version if not isinstance(options.version, dict) else options.version.get(topic)
        strategy, header = options.strategy_of(settings, topic) if settings is not None else (Strategy.OFFSET, "")
        for part in resolve(store, topic, partitions, version):
            offsets = (_offset(options.starting, topic, part, False), _offset(options.ending, topic, part, True))
            chosen = RecordFilter.of(offsets=offsets) if options.latest else pushed.record_filter(offsets)
            task = ReadTask(store, part, columns, chosen, False, options.latest, strategy.value, header)
            tasks.extend(task.split())
    return tasks


class StoreReader(DataSourceReader):
    """A batch read of the store, without filter pushdown (Spark filters what it returns)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.schema = read_schema(options.include_headers, options.include_store_columns)
        self.pushed = Pushed()

    def partitions(self) -> Sequence[InputPartition]:
        return [
            ReadPartition(task)
            for task in read_tasks(self.options.store.open(), self.options, self.pushed, self.schema)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ReadPartition)
        task = partition.task
        tp = task.part.tp
        for batch in task.batches():
            yield to_kafka(batch, tp.topic, tp.partition, self.schema)


class PushingReader(StoreReader):
    """A batch read that takes the filters Spark pushes down (``spark.sql.python.filterPushdown.enabled``)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        for found in filters:
            if not self.pushed.take(found, records=not self.options.latest):
                yield found


def pushdown_enabled() -> bool:
    """Whether Spark pushes filters to the reader being created (``spark.sql.python.filterPushdown.enabled``).

    Spark has it off by default; a reader that implements ``pushFilters`` is then refused at planning
    (DATA_SOURCE_PUSHDOWN_DISABLED), so the reader a session gets must depend on the setting, which pyspark's
    planning worker holds as the local ``enable_pushdown`` of the frame that asks for the reader (the worker that
    pushes filters, where it is on, has none). Elsewhere (another engine's worker) filters are taken if offered.
    """
    frame: Any = sys._getframe(1)
    while frame is not None:
        if "enable_pushdown" in frame.f_locals:
            return bool(frame.f_locals["enable_pushdown"])
        frame = frame.f_back
    return True


def new_reader(options: ReadOptions) -> StoreReader:
    return PushingReader(options) if pushdown_enabled() else StoreReader(options)
