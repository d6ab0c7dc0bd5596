"""The write's adapters for Spark's verbs: ``df.write`` and ``df.writeStream`` on :mod:`.writer`'s tasks and commit.

Spark creates a writer on the driver when a write (or a micro-batch) starts, pickles it to the tasks, and commits
with it on the driver (a streaming commit with a writer created anew for it, from the query's options).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

import fsspec
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.pandas.types import from_arrow_type
from pyspark.sql.types import StructType

from compaction.errors import InvalidArgumentError
from compaction.spark.options import WriteOptions
from compaction.spark.rows import check_write_schema
from compaction.spark.writer import (
    Stream,
    WriteMessage,
    WritePlan,
    abort_write,
    commit_write,
    wall_clock_ms,
    write_task,
)


def _task() -> int:
    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


def _messages(messages: Sequence[WriterCommitMessage | None]) -> list[WriteMessage | None]:
    return [m if isinstance(m, WriteMessage) else None for m in messages]


def _fields(schema: StructType | pa.Schema) -> list[tuple[str, str]]:
    """The frame's columns as ``(name, Spark's simpleString type)``: Spark hands a writer a StructType, Sail an Arrow
    schema."""
    if isinstance(schema, pa.Schema):
        return [(f.name, from_arrow_type(f.type).simpleString()) for f in schema]
    return [(f.name, f.dataType.simpleString()) for f in schema.fields]


def plan_write(options: WriteOptions, schema: StructType | pa.Schema) -> WritePlan:
    check_write_schema(_fields(schema), options.topic is not None)
    return WritePlan.of(options.store.open(), options.store.settings(), options.topic, wall_clock_ms())


class StoreWriter(DataSourceArrowWriter):
    """``df.write.format("compaction").mode("append")``."""

    def __init__(self, plan: WritePlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteMessage:
        return write_task(self.plan, iterator, _task())

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        commit_write(self.plan.store, _messages(messages), time_ms=self.plan.time_ms)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        abort_write(self.plan.store, _messages(messages))


def query_id(checkpoint: str) -> str:
    """A streaming query's id, as Spark keeps it in its checkpoint (``<checkpointLocation>/metadata``): the same
    across restarts of the query, so that a micro-batch replayed after a crash is known again."""
    try:
        fs, path = fsspec.core.url_to_fs(checkpoint)
        found = _id_of(fs.cat_file(f"{path.rstrip('/')}/metadata"))
    except (OSError, ValueError, ImportError) as err:
        raise InvalidArgumentError(
            f"cannot read the streaming query's id from its checkpoint {checkpoint}/metadata "
            f"({err}): a streaming write to compaction records it with each micro-batch"
        ) from err
    return found


def _id_of(data: bytes) -> str:
    first = data.decode().splitlines()[0]
    found = json.loads(first).get("id")
    if not isinstance(found, str) or not found:
        raise ValueError("it names no id")
    return found


class StoreStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("compaction")``: exactly once, by the query's id and the micro-batch's."""

    def __init__(self, options: WriteOptions, plan: WritePlan) -> None:
        self.options = options
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteMessage:
        return write_task(self.plan, iterator, _task())

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        assert self.options.checkpoint is not None
        commit_write(
            self.plan.store,
            _messages(messages),
            time_ms=wall_clock_ms(),
            stream=Stream(query_id(self.options.checkpoint), batchId),
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        abort_write(self.plan.store, _messages(messages))
