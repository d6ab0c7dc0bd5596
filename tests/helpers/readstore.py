"""A store with the history readers must honour, an oracle for its live log written without the read API, and
the readers the read tests hold to ``compaction read``.

``build`` gives topic ``orders`` (3 partitions) four versions each:

1. generated records: keyed, keyless, tombstones, records without a timestamp, a ``seq`` version header;
2. an append per partition with transactions: producer 7's records end in an abort marker, producer 8's in a
   commit marker (``ABORTED`` lists the aborted offsets per partition);
3. deletion vectors on two segments (every third offset of partition 0's second segment and partition 1's
   first) and a segment of partition 2 whose vector deletes all but one record;
4. log starts moved forward: inside partition 0's first segment, and past partition 2's first segment.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from compaction.cli import main
from compaction.read.scan import Scan, read_batches, scan
from compaction.store import Manifest, Replacement, Store, TopicPartition, Writer
from compaction.store.segment import records
from compaction.synthetic import GenerateSpec, generate
from tests.helpers.cli import run

TOPIC = "orders"
PARTITIONS = 3
NOW = 1_767_225_600_000  # 2026-01-01T00:00:00Z
HEADER = "seq"
SPEC = GenerateSpec(
    topics=(TOPIC,),
    partitions=PARTITIONS,
    records=3_600,
    keys=150,
    segment_records=300,
    tombstone_ratio=0.1,
    keyless_ratio=0.05,
    missing_timestamp_ratio=0.05,
    version_header=HEADER,
    end_time_ms=NOW - 60_000,
    time_span_ms=86_400_000,
    seed=7,
)
LOG_STARTS = {0: 170, 2: 300}
#: The versions ``build`` leaves: 1 generated, 2 appended, 3 deletion vectors, 4 log starts.
NEWEST, OLDER = 4, 2


def _transactions(first: int) -> pa.Table:
    """Producer 7 updates two existing keys and aborts; producer 8 updates one and commits; then plain records."""

    def row(offset: int, **fields: Any) -> dict[str, Any]:
        return {"offset": first + offset, "timestamp": NOW - 1_000 + offset, **fields}

    return records(
        [
            row(0, key="key-0000000003", value="aborted-1", producer_id=7, producer_epoch=0, is_transactional=True),
            row(1, key="key-0000000006", value="committed", producer_id=8, producer_epoch=0, is_transactional=True),
            row(2, key="key-0000000000", value="aborted-2", producer_id=7, producer_epoch=0, is_transactional=True),
            row(
                3,
                key=None,
                value=None,
                producer_id=7,
                producer_epoch=0,
                is_control=True,
                control_type="abort",
                is_transactional=True,
            ),
            row(
                4,
                key=None,
                value=None,
                producer_id=8,
                producer_epoch=0,
                is_control=True,
                control_type="commit",
                is_transactional=True,
            ),
            row(5, key="key-0000000009", value=None),
            row(6, key=None, value="keyless"),
        ]
    )


#: Offsets (relative to the appended batch) of producer 7's aborted records.
ABORTED_AT = (0, 2)


def _with_deletes(store: Store, tp: TopicPartition, index: int, keep: int | None = None) -> None:
    """Give live segment ``index`` a deletion vector: every third offset, or all but ``keep`` records."""
    manifest = store.manifest(tp)
    segment = manifest.segments[index]
    table = (
        pq.read_table(store.storage.path(f"{tp.prefix}/{segment.path}"))
        if store.storage.is_local
        else pq.read_table(pa.BufferReader(store.storage.read_bytes(f"{tp.prefix}/{segment.path}")))
    )
    offsets = table.column("offset").to_numpy()
    doomed = offsets[offsets % 3 == 0] if keep is None else offsets[keep:]
    vector = store.objects.write_deletes(tp, segment, pa.array(doomed), created_ms=NOW, live_min_delete_horizon_ms=None)
    changed = segment.model_copy(update={"deletes": vector})
    store.replace(
        tp,
        Replacement(
            (segment,),
            (changed,),
            manifest.first_dirty_offset,
            manifest.first_dirty_offset,
            manifest.log_start_offset,
            manifest.log_start_offset,
        ),
        writer=Writer(),
        now_ms=NOW,
    )


def _same(store: Store, tp: TopicPartition, log_start: int | None = None) -> None:
    """Commit a version that changes nothing but (optionally) the log start."""
    m = store.manifest(tp)
    store.replace(
        tp,
        Replacement(
            (),
            (),
            m.first_dirty_offset,
            max(m.first_dirty_offset, log_start or 0),
            m.log_start_offset,
            log_start if log_start is not None else m.log_start_offset,
        ),
        writer=Writer(),
        now_ms=NOW,
    )


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
                deleted = pq.read_table(
                    pa.BufferReader(store.storage.read_bytes(f"{tp.prefix}/{segment.deletes.path}"))
                ).column("offset")
                keep = pc.and_(keep, pc.invert(pc.is_in(data.column("offset"), value_set=deleted)))
            data = data.filter(keep)
            tables.append(data.add_column(0, "partition", pa.array(np.full(data.num_rows, p, np.int32))))
    return pa.concat_tables(tables)


# Reading it: compaction read (the reference), and every reader's way of reading a scan ---------------------


ORDER = [("partition", "ascending"), ("offset", "ascending")]


class Built:
    """A built store: how to open it, the CLI flags that reach it, and its aborted offsets."""

    def __init__(self, url: str, options: dict[str, Any], flags: list[str], aborted: dict[int, list[int]]):
        self.url, self.options, self.flags, self.aborted = url, options, flags, aborted

    def store(self) -> Store:
        return Store.open(self.url, self.options)


def backend(request: pytest.FixtureRequest, name: str) -> Built:
    return request.getfixturevalue(name)


def cli(built: Built, *args: str, capsys: pytest.CaptureFixture[str] | None = None) -> tuple[int, str]:
    """``compaction COMMAND STORE ARGS`` on the built store; what it printed when ``capsys`` is given."""
    argv = [*args[:1], built.url, *args[1:], *built.flags]
    return run(capsys, *argv) if capsys else (main(argv), "")


_READS: dict[tuple[str, ...], pa.Table] = {}


def cli_table(built: Built, tmp_path: Path, *args: str) -> pa.Table:
    """``compaction read STORE orders ARGS --format parquet -o FILE``, as a table (each read once per store:
    the stores built for a module never change; tests that change one work on a copy)."""
    if (built.url, *args) not in _READS:
        target = tmp_path / f"read-{time.perf_counter_ns()}.parquet"
        assert cli(built, "read", TOPIC, *args, "--format", "parquet", "-o", str(target))[0] == 0
        _READS[built.url, *args] = pq.read_table(target)
    return _READS[built.url, *args]


def canonical(table: pa.Table, schema: pa.Schema) -> pa.Table:
    return table.select(schema.names).cast(schema).sort_by(ORDER)


def stream(the_scan: Scan) -> pa.Table:
    batches = list(
        read_batches(
            the_scan.store,
            the_scan.topic,
            None,
            version=the_scan.versions,
            latest=the_scan.latest,
            strategy=the_scan.strategy,
            strategy_header=HEADER,
            batch_rows=100,
        )
    )
    assert all(b.num_rows <= 100 for b in batches), "a stream's batches are bounded"
    return pa.Table.from_batches(batches, schema=the_scan.schema)


def with_duckdb(the_scan: Scan) -> pa.Table:
    con = duckdb.connect()
    try:
        view = the_scan.to_duckdb(con, "orders")
        first = view.to_arrow_table()
        assert con.sql("select count(*) from orders").fetchall() == [(first.num_rows,)], "the view can be scanned again"
        return first
    finally:
        con.close()


READERS: dict[str, Callable[[Scan], pa.Table]] = {
    "table": lambda s: s.to_arrow(),
    "stream": stream,
    "polars": lambda s: s.to_polars().collect().to_arrow(),
    "pandas": lambda s: pa.Table.from_pandas(s.to_pandas(), schema=s.schema, preserve_index=False),
    "duckdb": with_duckdb,
}


def the_scan(built: Built, version: int | None, latest: bool = False) -> Scan:
    return scan(built.url, TOPIC, version=version, latest=latest, strategy_header=HEADER, storage_options=built.options)


def latest_in_duckdb(log: pa.Table, aborted: dict[int, list[int]], strategy: str) -> pa.Table:
    """Per partition and key, the greatest competing record of the log; tombstones then dropped."""
    order = {
        "offset": '"offset" DESC',
        "timestamp": "coalesce(timestamp >= 0, false) DESC, CASE WHEN timestamp >= 0 THEN timestamp ELSE -1 END DESC, "
        '"offset" DESC',
    }[strategy]
    gone = pa.table(
        {
            "partition": pa.array([p for p, offsets in aborted.items() for _ in offsets], pa.int32()),
            "offset": pa.array([o for offsets in aborted.values() for o in offsets], pa.int64()),
        }
    )
    con = duckdb.connect()
    try:
        con.register("log", log)
        con.register("aborted", gone)
        return con.sql(f"""
            SELECT * FROM (
                SELECT * FROM log
                WHERE key IS NOT NULL AND NOT is_control
                  AND ("partition", "offset") NOT IN (SELECT ("partition", "offset") FROM aborted)
                QUALIFY row_number() OVER (PARTITION BY "partition", key ORDER BY {order}) = 1)
            WHERE value IS NOT NULL ORDER BY "partition", "offset" """).to_arrow_table()
    finally:
        con.close()


def latest_by_header(log: pa.Table, aborted: dict[int, list[int]]) -> list[tuple[int, int]]:
    """The header strategy in plain Python: the last ``seq`` header as an 8-byte big-endian long wins."""
    best: dict[tuple[int, bytes], tuple[tuple[int, int, int], dict[str, Any]]] = {}
    for row in log.to_pylist():
        if row["key"] is None or row["is_control"] or row["offset"] in aborted[row["partition"]]:
            continue
        values = [h["value"] for h in row["headers"] or [] if h["key"] == HEADER]
        valid = bool(values) and len(values[-1]) == 8
        rank = (int(valid), int.from_bytes(values[-1], "big", signed=True) if valid else -1, row["offset"])
        if (row["partition"], row["key"]) not in best or rank > best[row["partition"], row["key"]][0]:
            best[row["partition"], row["key"]] = (rank, row)
    return sorted((r["partition"], r["offset"]) for _, r in best.values() if r["value"] is not None)


def segments_folder(built: Built, partition: int) -> Path:
    return Path(built.url) / TOPIC / str(partition) / "segments"


def built_locally(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The store built in a local folder (a module's ``local`` fixture)."""
    url = str(tmp_path_factory.mktemp("read") / "store")
    return Built(url, {}, [], build(Store.open(url)))
