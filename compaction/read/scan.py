"""The Python read API: a scan of a topic's live log at pinned versions, and what it turns into.

``scan(store, "orders")`` resolves every partition's newest manifest once (or the versions asked for) and
returns a :class:`Scan`; nothing is read until one of its ``to_*`` methods runs, and every one of them
reads exactly the pinned versions, however often it runs and whatever commits meanwhile (for gc's grace
period). The adapters (:mod:`compaction.read.adapters`) are thin: each streams this scan's batches.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from compaction.errors import InvalidArgumentError
from compaction.read.ahead import in_order
from compaction.read.files import PartitionFiles, Versions, resolve
from compaction.read.filters import RecordFilter
from compaction.read.stream import check_columns, output_schema
from compaction.read.task import ReadTask
from compaction.rules import Strategy
from compaction.store import Store
from compaction.store.segment import BATCH_ROWS

#: Live files (or, for ``latest``, partitions) a local read decodes at the same time, on worker threads.
READ_AHEAD = 2

if TYPE_CHECKING:
    import pandas as pd
    import polars as pl
    from duckdb import DuckDBPyConnection, DuckDBPyRelation
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class Scan:
    """A read of a topic's live log (some partitions or all) at pinned manifest versions.

    ``columns`` are record columns (:data:`compaction.store.segment.SEGMENT_SCHEMA`); ``with_partition``
    puts an int32 ``partition`` column first. With ``latest`` the scan is the table view: one record per key,
    its winner under ``strategy`` (see :mod:`compaction.read.latest`). Rows come in partition order, then
    offset order.
    """

    store: Store
    topic: str
    parts: tuple[PartitionFiles, ...]
    columns: tuple[str, ...]
    record_filter: RecordFilter = field(default_factory=RecordFilter)
    with_partition: bool = True
    latest: bool = False
    strategy: Strategy = Strategy.OFFSET
    strategy_header: str = ""
    batch_rows: int = BATCH_ROWS
    read_ahead: int = READ_AHEAD

    @property
    def schema(self) -> pa.Schema:
        return output_schema(self.columns, self.with_partition)

    @property
    def versions(self) -> dict[int, int]:
        """The pinned manifest version of each partition read."""
        return {p.tp.partition: p.version for p in self.parts}

    def files(self) -> list[PartitionFiles]:
        """Each partition's live files with their deletion vectors and offset bounds (``plan_files``)."""
        return list(self.parts)

    def select(self, columns: Sequence[str]) -> Scan:
        """The same scan (same versions, filter and view) of other columns; ``partition`` may be among them."""
        names = list(columns)
        return replace(
            self,
            columns=tuple(check_columns([c for c in names if c != "partition"])),
            with_partition="partition" in names,
        )

    def rows_per_batch(self, rows: int) -> Scan:
        """The same scan in batches of at most ``rows`` records."""
        return replace(self, batch_rows=rows)

    def tasks(self, split: bool = False) -> list[ReadTask]:
        """The scan as units of reading: one per partition, or with ``split`` one per live file where
        possible (a latest read keeps a partition whole)."""
        tasks = [
            ReadTask(
                self.store,
                part,
                self.columns,
                self.record_filter,
                self.with_partition,
                self.latest,
                self.strategy.value,
                self.strategy_header,
                self.batch_rows,
            )
            for part in self.parts
        ]
        return [piece for task in tasks for piece in task.split()] if split else tasks

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The records in order; ``read_ahead`` live files (partitions for ``latest``) are read at a time."""
        return in_order([task.batches for task in self.tasks(split=True)], self.read_ahead)

    def to_batches(self) -> pa.RecordBatchReader:
        """Stream the records: memory holds a batch at a time (and, for ``latest``, one partition's keys)."""
        return pa.RecordBatchReader.from_batches(self.schema, self.batches())

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        """The Arrow PyCapsule stream interface: any Arrow-aware library can consume a scan directly; each
        call streams the scan again."""
        return self.to_batches().__arrow_c_stream__(requested_schema)

    def to_arrow(self) -> pa.Table:
        return pa.Table.from_batches(list(self.batches()), schema=self.schema)

    def to_pandas(self) -> pd.DataFrame:
        return self.to_arrow().to_pandas()

    def to_polars(self) -> pl.LazyFrame:
        from compaction.read.adapters import to_polars

        return to_polars(self)

    def to_duckdb(self, connection: DuckDBPyConnection, name: str) -> DuckDBPyRelation:
        from compaction.read.adapters import to_duckdb

        return to_duckdb(self, connection, name)

    def to_spark(self, spark: SparkSession) -> DataFrame:
        from compaction.read.adapters import to_spark

        return to_spark(self, spark)


def _strategy(strategy: Strategy | str, header: str) -> Strategy:
    try:
        chosen = Strategy(str(strategy).lower())
    except ValueError:
        raise InvalidArgumentError(
            f"compaction strategy {strategy!r} is not one of {[s.value for s in Strategy]}"
        ) from None
    if chosen is Strategy.HEADER and not header:
        raise InvalidArgumentError("the header strategy needs the header's name (compaction.strategy.header)")
    return chosen


def scan(
    store: Store | str,
    topic: str,
    partitions: int | Iterable[int] | None = None,
    *,
    version: Versions = None,
    columns: Sequence[str] | None = None,
    keys: Iterable[bytes | str] | None = None,
    offsets: tuple[int | None, int | None] | None = None,
    timestamps: tuple[int | None, int | None] | None = None,
    latest: bool = False,
    strategy: Strategy | str = Strategy.OFFSET,
    strategy_header: str = "",
    storage_options: Mapping[str, Any] | None = None,
    batch_rows: int = BATCH_ROWS,
    read_ahead: int = READ_AHEAD,
) -> Scan:
    """Pin ``topic`` (all partitions, a list, or one) at ``version`` and describe what to read of it.

    - ``store``: a :class:`Store` or a URL (with ``storage_options``, as ``Store.open`` takes them).
    - ``partitions``: one partition number gives its records without a ``partition`` column; ``None`` (all)
      or a list adds the column.
    - ``version``: one version for every partition, or ``{partition: version}`` (others at their newest).
    - ``columns``: record columns to read (default all); filters read what they need on their own.
    - ``keys``, ``offsets`` (``[start, end)``), ``timestamps`` (``[since, until)`` in ms): pushed down to
      segments, row groups and rows.
    - ``latest``: the table view, each key's winner under ``strategy`` (``offset``, ``timestamp`` or
      ``header`` with ``strategy_header``: the topic's ``compaction.strategy``) among the records the
      filters select; tombstoned keys absent, keyless records left out.
    - ``batch_rows``: the most rows a batch holds; ``read_ahead``: how many live files (partitions for
      ``latest``) are decoded at the same time (1: all on the calling thread).
    """
    opened = store if isinstance(store, Store) else Store.open(store, storage_options)
    if batch_rows < 1:
        raise InvalidArgumentError(f"batch_rows must be at least 1, not {batch_rows}")
    return Scan(
        store=opened,
        topic=topic,
        parts=tuple(resolve(opened, topic, partitions, version)),
        columns=tuple(check_columns(columns)),
        record_filter=RecordFilter.of(keys, offsets, timestamps),
        with_partition=not isinstance(partitions, int),
        latest=latest,
        strategy=_strategy(strategy, strategy_header),
        strategy_header=strategy_header,
        batch_rows=batch_rows,
        read_ahead=read_ahead,
    )


def read_table(
    store: Store | str, topic: str, partitions: int | Iterable[int] | None = None, **options: Any
) -> pa.Table:
    """The records of :func:`scan` as one ``pyarrow.Table``."""
    return scan(store, topic, partitions, **options).to_arrow()


def read_batches(
    store: Store | str, topic: str, partitions: int | Iterable[int] | None = None, **options: Any
) -> pa.RecordBatchReader:
    """The records of :func:`scan` as a stream of ``RecordBatch``es."""
    return scan(store, topic, partitions, **options).to_batches()
