"""A store with the history readers must honour, and an oracle for its live log written without the read API.

``build`` gives topic ``orders`` (3 partitions) four versions each:

1. generated records: keyed, keyless, tombstones, records without a timestamp, a ``seq`` version header;
2. an append per partition with transactions: producer 7's records end in an abort marker, producer 8's in a
   commit marker (``ABORTED`` lists the aborted offsets per partition);
3. deletion vectors on two segments (every third offset of partition 0's second segment and partition 1's
   first) and a segment of partition 2 whose vector deletes all but one record;
4. log starts moved forward: inside partition 0's first segment, and past partition 2's first segment.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from compaction.store import Manifest, Replacement, Store, TopicPartition, Writer
from compaction.store.segment import records
from compaction.synthetic import GenerateSpec, generate

TOPIC = "orders"
PARTITIONS = 3
NOW = 1_767_225_600_000  # 2026-01-01T00:00:00Z
HEADER = "seq"
SPEC = GenerateSpec(topics=(TOPIC,), partitions=PARTITIONS, records=3_600, keys=150, segment_records=300,
                    tombstone_ratio=0.1, keyless_ratio=0.05, missing_timestamp_ratio=0.05, version_header=HEADER,
                    end_time_ms=NOW - 60_000, time_span_ms=86_400_000, seed=7)
LOG_STARTS = {0: 170, 2: 300}
#: The versions ``build`` leaves: 1 generated, 2 appended, 3 deletion vectors, 4 log starts.
NEWEST, OLDER = 4, 2


def _transactions(first: int) -> pa.Table:
    """Producer 7 updates two existing keys and aborts; producer 8 updates one and commits; then plain records."""
    def row(offset: int, **fields: Any) -> dict[str, Any]:
        return {"offset": first + offset, "timestamp": NOW - 1_000 + offset, **fields}

    return records([
        row(0, key="key-0000000003", value="aborted-1", producer_id=7, producer_epoch=0, is_transactional=True),
        row(1, key="key-0000000006", value="committed", producer_id=8, producer_epoch=0, is_transactional=True),
        row(2, key="key-0000000000", value="aborted-2", producer_id=7, producer_epoch=0, is_transactional=True),
        row(3, key=None, value=None, producer_id=7, producer_epoch=0, is_control=True, control_type="abort",
            is_transactional=True),
        row(4, key=None, value=None, producer_id=8, producer_epoch=0, is_control=True, control_type="commit",
            is_transactional=True),
        row(5, key="key-0000000009", value=None),
        row(6, key=None, value="keyless"),
    ])


#: Offsets (relative to the appended batch) of producer 7's aborted records.
ABORTED_AT = (0, 2)


def _with_deletes(store: Store, tp: TopicPartition, index: int, keep: int | None = None) -> None:
    """Give live segment ``index`` a deletion vector: every third offset, or all but ``keep`` records."""
    manifest = store.manifest(tp)
    segment = manifest.segments[index]
    table = pq.read_table(store.storage.path(f"{tp.prefix}/{segment.path}")) if store.storage.is_local else \
        pq.read_table(pa.BufferReader(store.storage.read_bytes(f"{tp.prefix}/{segment.path}")))
    offsets = table.column("offset").to_numpy()
    doomed = offsets[offsets % 3 == 0] if keep is None else offsets[keep:]
    vector = store.write_deletes(tp, segment, pa.array(doomed), created_ms=NOW, live_min_delete_horizon_ms=None)
    changed = segment.model_copy(update={"deletes": vector})
    store.replace(tp, Replacement((segment,), (changed,), manifest.first_dirty_offset, manifest.first_dirty_offset,
                                  manifest.log_start_offset, manifest.log_start_offset), writer=Writer(), now_ms=NOW)


def _same(store: Store, tp: TopicPartition, log_start: int | None = None) -> None:
    """Commit a version that changes nothing but (optionally) the log start."""
    m = store.manifest(tp)
    store.replace(tp, Replacement((), (), m.first_dirty_offset, max(m.first_dirty_offset, log_start or 0),
                                  m.log_start_offset, log_start if log_start is not None else m.log_start_offset),
                  writer=Writer(), now_ms=NOW)


def build(store: Store) -> dict[int, list[int]]:
    """Build the store; returns the aborted offsets of each partition."""
    generate(store, SPEC, now_ms=NOW - 60_000)
    aborted = {}
    for p in range(PARTITIONS):
        tp = TopicPartition(TOPIC, p)
        first = store.manifest(tp).log_end_offset
        store.append(tp, _transactions(first), now_ms=NOW)
        aborted[p] = [first + i for i in ABORTED_AT]
    _with_deletes(store, TopicPartition(TOPIC, 0), 1)
    _with_deletes(store, TopicPartition(TOPIC, 1), 0)
    _with_deletes(store, TopicPartition(TOPIC, 2), 2, keep=1)
    for p in range(PARTITIONS):
        _same(store, TopicPartition(TOPIC, p), LOG_STARTS.get(p))
    return aborted


def oracle(store: Store, versions: dict[int, int] | None = None) -> pa.Table:
    """The live log of every partition at ``versions`` (default newest), read with plain pyarrow from the
    manifests: every listed segment, minus its deletion vector's offsets, minus offsets below the log start."""
    tables = []
    for p in range(PARTITIONS):
        tp = TopicPartition(TOPIC, p)
        manifest: Manifest = store.manifest(tp, (versions or {}).get(p))
        for segment in manifest.segments:
            data = pq.read_table(pa.BufferReader(store.storage.read_bytes(f"{tp.prefix}/{segment.path}")))
            keep = pc.greater_equal(data.column("offset"), manifest.log_start_offset)
            if segment.deletes is not None:
                deleted = pq.read_table(pa.BufferReader(
                    store.storage.read_bytes(f"{tp.prefix}/{segment.deletes.path}"))).column("offset")
                keep = pc.and_(keep, pc.invert(pc.is_in(data.column("offset"), value_set=deleted)))
            data = data.filter(keep)
            tables.append(data.add_column(0, "partition", pa.array(np.full(data.num_rows, p, np.int32))))
    return pa.concat_tables(tables)
