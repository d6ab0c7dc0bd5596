"""Thin adapters from a :class:`~compaction.read.scan.Scan` to other engines; each streams the scan's batches. They
take a scan as what they use of it (:class:`Scannable`), so that this module does not import the one that calls it.

- Polars: a ``LazyFrame`` over an IO source: projections narrow the scan's columns, predicates and row
  limits apply batch by batch, nothing is materialised first.
- DuckDB: the scan registered on a connection as a view; every query over it streams the pinned versions
  again (DuckDB takes the scan through the Arrow PyCapsule stream interface).
- Spark: a ``DataFrame`` whose tasks each read one live file (one partition for ``latest``) with the same
  reading core, on executors, through the store's fsspec filesystem (local paths, S3 ...); classic and Spark
  Connect sessions alike.

Each engine is imported only when its adapter is used.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from compaction.engine.codec import loads
from compaction.read.task import ReadTask

if TYPE_CHECKING:
    import polars as pl
    from duckdb import DuckDBPyConnection, DuckDBPyRelation
    from pyspark.sql import DataFrame, SparkSession


class Scannable(Protocol):
    """What an adapter uses of a scan: its schema and batches, narrower scans, its read tasks, and the Arrow
    stream DuckDB reads."""

    @property
    def schema(self) -> pa.Schema: ...

    def select(self, columns: Sequence[str]) -> Scannable: ...

    def rows_per_batch(self, rows: int) -> Scannable: ...

    def batches(self) -> Iterator[pa.RecordBatch]: ...

    def tasks(self, split: bool = False) -> list[ReadTask]: ...

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any: ...


def to_polars(scan: Scannable) -> pl.LazyFrame:
    import polars as pl
    from polars.io.plugins import register_io_source

    schema = pl.from_arrow(scan.schema.empty_table()).schema  # type: ignore[union-attr]

    def source(
        with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None, batch_size: int | None
    ) -> Iterator[pl.DataFrame]:
        narrowed = scan if with_columns is None else scan.select(with_columns or ["offset"])
        if batch_size:
            narrowed = narrowed.rows_per_batch(batch_size)
        left = n_rows
        for batch in narrowed.batches():
            frame = pl.from_arrow(batch)
            assert isinstance(frame, pl.DataFrame)
            if with_columns is not None:
                frame = frame.select(with_columns)
            if predicate is not None:
                frame = frame.filter(predicate)
            if left is not None:
                frame = frame.head(left)
                left -= frame.height
            yield frame
            if left is not None and left <= 0:
                return

    return register_io_source(source, schema=schema)


def to_duckdb(scan: Scannable, connection: DuckDBPyConnection, name: str) -> DuckDBPyRelation:
    """Register ``scan`` as the view ``name`` on ``connection`` and return it as a relation."""
    connection.register(name, scan)
    return connection.table(name)


def _task_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: each input row is a read task; yields its records."""
    for batch in batches:
        for payload in batch.column("payload").to_pylist():
            task: ReadTask = loads(payload)
            yield from task.batches()


def to_spark(scan: Scannable, spark: SparkSession) -> DataFrame:
    """The scan as a Spark DataFrame (the same records, in no particular order), on a classic or a Spark Connect
    session: each read task is a row, read on an executor."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from compaction.engine.stages import task_frame

    return task_frame(spark, scan.tasks(split=True)).map(_task_batches, from_arrow_schema(scan.schema))
