"""The streaming read: per micro-batch, the records each partition committed since the last, by offset.

A stream's offsets are the Kafka source's: per topic and partition, the next offset to read (``{"orders":
{"0": 120, "1": 98}}``). The newest manifests' log end offsets are where a batch ends; a batch reads each partition's
``[start, end)`` at the partition's newest version when its task runs, so a batch never delivers an offset a batch
before it delivered (their ranges do not meet), a compaction in between only removes records no longer live, and
a key erased before the task runs is not delivered. A partition that appears later is read from its log start, as
the Kafka source reads a new partition from its earliest offset; one whose log start moved past the stream's next
offset (retention deleted records it had not delivered) fails the batch unless ``failOnDataLoss`` is false.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from compaction.errors import InvalidArgumentError, StoreError
from compaction.read.files import partition_files
from compaction.read.filters import RecordFilter
from compaction.read.stream import partition_batches
from compaction.spark.options import EARLIEST, LATEST, ReadOptions
from compaction.spark.rows import read_schema, record_columns, to_kafka
from compaction.store import Manifest, Store, TopicPartition, read_manifests

#: A stream's offsets: topic -> partition (as a string, as in JSON) -> the next offset to read.
StreamOffsets = dict[str, dict[str, int]]


class RangePartition(InputPartition):
    """A task of a micro-batch: a partition's offsets ``[start, end)``; ``start`` None for a partition new to the
    stream (read from its log start, whatever it is by then)."""

    def __init__(self, topic: str, partition: int, start: int | None, end: int) -> None:
        super().__init__(None)
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


class StoreStreamReader(DataSourceStreamReader):
    """``spark.readStream.format("compaction")``."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.schema = read_schema(options.include_headers, options.include_store_columns)

    def _logs(self) -> dict[TopicPartition, Manifest]:
        """The newest manifest of every partition the stream subscribes to."""
        store = self.options.store.open()
        tps = [
            TopicPartition(topic, p)
            for topic, assigned in self.options.subscription.select(store).items()
            for p in (assigned if assigned is not None else store.partitions(topic))
        ]
        logs = {}
        for tp, found in read_manifests(store, tps).items():
            if isinstance(found, StoreError):
                if tp in tps and self.options.subscription.assigned is not None:
                    raise found
                continue  # a partition folder nobody committed to yet
            logs[tp] = found
        return logs

    def initialOffset(self) -> StreamOffsets:
        spec = self.options.starting
        offsets: StreamOffsets = {}
        for tp, log in self._logs().items():
            if isinstance(spec, str):
                start = log.log_start_offset if spec == "earliest" else log.log_end_offset
            else:
                given = spec.get(tp.topic, {}).get(tp.partition, EARLIEST)
                start = log.log_start_offset if given == EARLIEST else log.log_end_offset if given == LATEST else given
            offsets.setdefault(tp.topic, {})[str(tp.partition)] = start
        return offsets

    def latestOffset(self, start: StreamOffsets, limit: Any = None) -> StreamOffsets:
        latest: StreamOffsets = {topic: dict(parts) for topic, parts in start.items()}
        for tp, log in self._logs().items():
            latest.setdefault(tp.topic, {})[str(tp.partition)] = log.log_end_offset
        return latest

    def partitions(self, start: StreamOffsets, end: StreamOffsets) -> Sequence[InputPartition]:
        ranges: list[InputPartition] = []
        for topic, parts in sorted(end.items()):
            for partition, until in sorted(parts.items(), key=lambda item: int(item[0])):
                since = start.get(topic, {}).get(partition)
                if since is None or until > since:
                    ranges.append(RangePartition(topic, int(partition), since, until))
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        store: Store = self.options.store.open()
        tp = TopicPartition(partition.topic, partition.partition)
        part = partition_files(store, store.manifest(tp))
        if partition.start is not None and partition.start < part.log_start_offset and self.options.fail_on_data_loss:
            raise InvalidArgumentError(
                f"offsets [{partition.start}, {part.log_start_offset}) of {tp} were deleted (retention moved its log "
                "start) before the stream read them; set failOnDataLoss to false to go on from what is left"
            )
        for batch in partition_batches(
            store,
            part,
            columns=record_columns(self.schema),
            record_filter=RecordFilter.of(offsets=(partition.start, partition.end)),
        ):
            yield to_kafka(batch, tp.topic, tp.partition, self.schema)
