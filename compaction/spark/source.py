"""The data source named ``compaction``: Spark's verbs (read, write, readStream, writeStream) on a store.

Each verb is a thin adapter: reads go to :mod:`.reader` and :mod:`.stream`, writes to :mod:`.sinks` and
:mod:`.writer`. Spark creates a data source per query from its options (:mod:`.options`, refused there when
unknown), asks it for a reader or a writer on the driver, and pickles that to its tasks; a write's commit runs on
the driver. ``pyspark_compaction`` (the installed top-level module Spark discovers) names
:class:`CompactionDataSource` as its ``DefaultSource``. Spark looks sources up, creates and plans them in Python
processes of their own, each importing this module: it imports a verb's modules only when that verb runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from compaction.errors import InvalidArgumentError
from compaction.spark.options import ReadOptions, WriteOptions
from compaction.spark.rows import read_ddl, read_schema

if TYPE_CHECKING:
    from compaction.spark.sinks import StoreStreamWriter, StoreWriter

NAME = "compaction"


class CompactionDataSource(DataSource):
    """The store as a Spark data source, in the column layout and option names of Spark's Kafka source."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        options = ReadOptions.of(self.options, streaming=False)
        return read_ddl(read_schema(options.include_headers, options.include_store_columns))

    def reader(self, schema: StructType) -> DataSourceReader:
        from compaction.spark.reader import new_reader

        return new_reader(ReadOptions.of(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from compaction.spark.stream import StoreStreamReader

        return StoreStreamReader(ReadOptions.of(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> StoreWriter:
        options = WriteOptions.of(self.options, streaming=False)
        if overwrite:
            raise InvalidArgumentError(
                "mode overwrite is refused: a store's log is append-only (a write adds records "
                "after each partition's log end); use mode append"
            )
        from compaction.spark.sinks import StoreWriter, plan_write

        return StoreWriter(plan_write(options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> StoreStreamWriter:
        options = WriteOptions.of(self.options, streaming=True)
        if overwrite:
            raise InvalidArgumentError(
                "output mode complete is refused: a store's log is append-only; use outputMode append"
            )
        if not options.checkpoint:
            raise InvalidArgumentError(
                "a streaming write to compaction needs the option checkpointLocation: exactly "
                "once records the query's id, kept there, with each micro-batch"
            )
        from compaction.spark.sinks import StoreStreamWriter, plan_write

        return StoreStreamWriter(options, plan_write(options, schema))
