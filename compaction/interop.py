"""Kafka partition directories in and out: import a directory's ``*.log`` files as segments, export the live log
as a directory Kafka's tools and brokers read (``.log`` files with the ``.index``, ``.timeindex`` and ``.txnindex``
files Kafka's ``LogSegment`` builds).

Import reads ``<20-digit base offset>.log`` files in offset order; each covers ``[its base offset, the next file's
base offset)``, the last one up to its last batch's last offset. Every batch is checked (framing, magic, codec,
CRC-32C, offsets inside its file's range), aborted transactions come from the abort markers and are checked
against the ``.txnindex`` files when there are any; ``.index``, ``.timeindex`` and ``.snapshot`` files are
ignored (they are rebuilt on export). Anything wrong refuses the whole import, naming the file and the offset,
before anything is written. The files become ``.log`` segments byte for byte, so an import exported again gives
the same files.

Export writes each live segment as ``<20-digit base offset>.log``: a ``.log`` segment as it is, or without the
records its deletion vector (or the log start offset) hides, its batches rebuilt as a cleaning pass rebuilds
them; Parquet segments are framed in batches. Indexes are built as ``LogSegment.recover`` builds them: an
offset and a time index entry each time more than ``index.interval.bytes`` (4096) were written since the last
one (the batch's last offset and position; the largest timestamp so far and its batch's last offset), a final
time index entry for the largest timestamp, and an aborted transaction entry for each abort marker in the
segment that holds it.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction.clean.batches import BatchPolicy, frame_records, reframe
from compaction.errors import CommitConflictError, CorruptBatchError, InvalidArgumentError, InvalidRecordsError
from compaction.kafka.layout import CONTROL, TRANSACTIONAL
from compaction.store import Manifest, SegmentFormat, Store, TopicPartition, Writer
from compaction.store.formats import LogSegment, check_batch_offsets, decode_log
from compaction.store.log import appended_state
from compaction.store.manifest import SegmentMeta

LOG_FILE = re.compile(r"^([0-9]{20})\.log\Z")
#: Kafka's default ``index.interval.bytes``.
INDEX_INTERVAL_BYTES = 4096
_OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
_TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
_ABORTED_TXN = struct.Struct(">hqqqq")  # version 0, producer id, first offset, last offset, last stable offset


def file_name(base_offset: int, extension: str) -> str:
    return f"{base_offset:020d}.{extension}"


@dataclass(frozen=True)
class AbortedTxn:
    """An entry of a ``.txnindex`` file: a transaction that ended in an abort marker at ``last_offset``."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def pack(self) -> bytes:
        return _ABORTED_TXN.pack(0, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


class _Transactions:
    """Kafka's producer state as far as the transaction index needs it: each producer's ongoing transaction."""

    def __init__(self) -> None:
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its transaction

    def read(self, log: LogSegment) -> list[AbortedTxn]:
        """Walk a segment's batches in order; the aborted transactions whose markers it holds."""
        batches = log.batches
        attributes = batches.column("attributes").to_numpy()
        producers = batches.column("producer_id").to_numpy()
        bases = batches.column("base_offset").to_numpy()
        lasts = bases + batches.column("last_offset_delta").to_numpy().astype(np.int64)
        counts = batches.column("record_count").to_numpy()
        first_record = np.cumsum(counts) - counts
        types = log.records.column("control_type").to_pylist()
        aborted = []
        for j in np.flatnonzero((attributes & (TRANSACTIONAL | CONTROL)) != 0).tolist():
            producer = int(producers[j])
            if not attributes[j] & CONTROL:
                self.ongoing.setdefault(producer, int(bases[j]))
                continue
            if not counts[j]:
                continue  # an empty marker batch: the transaction was cleaned away, nothing to index
            first = self.ongoing.pop(producer, int(lasts[j]))
            if types[first_record[j]] == "abort":
                stable = min(self.ongoing.values(), default=int(lasts[j]) + 1)
                aborted.append(AbortedTxn(producer, first, int(lasts[j]), stable))
        return aborted


def _read_txn_index(path: Path) -> list[AbortedTxn]:
    data = path.read_bytes()
    if len(data) % _ABORTED_TXN.size:
        raise InvalidRecordsError(
            f"{path}: {len(data)} bytes is not a whole number of {_ABORTED_TXN.size}-byte aborted transaction entries"
        )
    return [AbortedTxn(*entry[1:]) for entry in _ABORTED_TXN.iter_unpack(data)]


@dataclass(frozen=True)
class _LogFile:
    path: Path
    base_offset: int
    data: bytes
    log: LogSegment


def _read_directory(directory: Path) -> list[_LogFile]:
    """Every ``.log`` file of a partition directory, decoded and checked, in offset order."""
    if not directory.is_dir():
        raise InvalidArgumentError(f"{directory} is not a directory")
    named = sorted((int(m.group(1)), p) for p in directory.iterdir() if (m := LOG_FILE.match(p.name)))
    if not named:
        raise InvalidRecordsError(f"{directory} holds no <20-digit base offset>.log file")
    files = []
    for i, (base, path) in enumerate(named):
        next_base = named[i + 1][0] if i + 1 < len(named) else None
        data = path.read_bytes()
        try:
            log = decode_log(data, str(path))
            check_batch_offsets(log, str(path), base, next_base)
        except CorruptBatchError as err:
            raise InvalidRecordsError(str(err)) from err
        offsets = log.records.column("offset").to_numpy()
        if len(offsets) > 1 and (np.diff(offsets) <= 0).any():
            at = int(offsets[1:][np.diff(offsets) <= 0][0])
            raise InvalidRecordsError(f"{path}: the record at offset {at} does not follow the one before it")
        files.append(_LogFile(path, base, data, log))
    return files


def _check_txn_indexes(files: Sequence[_LogFile]) -> None:
    """The aborted transactions the markers give must be the ``.txnindex`` files' (where there are any)."""
    state = _Transactions()
    for file in files:
        found = {(t.producer_id, t.last_offset) for t in state.read(file.log)}
        index = file.path.with_suffix(".txnindex")
        if not index.exists():
            continue
        listed = {(t.producer_id, t.last_offset) for t in _read_txn_index(index)}
        for producer, offset in sorted(listed - found):
            raise InvalidRecordsError(
                f"{index}: aborted transaction of producer {producer} ending at offset "
                f"{offset} has no abort marker there in {file.path.name}"
            )
        for producer, offset in sorted(found - listed):
            raise InvalidRecordsError(
                f"{file.path}: the abort marker at offset {offset} (producer {producer}) is missing from {index.name}"
            )


def import_partition(
    store: Store, tp: TopicPartition, directory: str | Path, *, now_ms: int, writer: Writer | None = None
) -> Manifest:
    """Load a Kafka partition directory's ``.log`` files as segments and commit them as the partition's log (or
    after it, when the first file starts at its log end offset)."""
    directory = Path(directory)
    files = _read_directory(directory)
    _check_txn_indexes(files)
    first = files[0].base_offset
    latest = store.latest(tp)
    if latest is not None and latest.log_end_offset != first:
        raise InvalidRecordsError(
            f"{directory}: the first file starts at offset {first}, but partition {tp} ends at "
            f"offset {latest.log_end_offset}: an import keeps its offsets, so it must start "
            "there (or go into a partition of its own)"
        )
    segments: list[SegmentMeta] = []
    transactional = []
    for i, file in enumerate(files):
        batches = file.log.batches
        if not batches.num_rows:
            continue  # an empty file (a fresh active segment) holds no offset
        last = int(file.log.batch_last_offsets[-1])
        next_offset = files[i + 1].base_offset if i + 1 < len(files) else last + 1
        segments.append(
            store.objects.write_segment(
                tp,
                file.log.records,
                file.base_offset,
                next_offset,
                created_ms=now_ms,
                segment_format=SegmentFormat.KAFKA,
                batches=batches,
                encoded=file.data,
            )
        )
        records = file.log.records
        involved = pc.or_(
            pc.fill_null(records.column("is_control"), False), pc.fill_null(records.column("is_transactional"), False)
        )
        transactional.append(records.filter(involved))
    if not segments:
        raise InvalidRecordsError(f"{directory}: its .log files hold no record batch")
    where = f"import of {directory} into {tp}"
    trailing = files[-1].base_offset if not files[-1].log.batches.num_rows else None

    def build(current: Manifest | None) -> dict[str, Any]:
        if (current.log_end_offset if current else None) != (latest.log_end_offset if latest else None):
            raise CommitConflictError(f"{where}: partition {tp} changed during the import")
        state = appended_state(current, segments, pa.concat_tables(transactional), where)
        if trailing is not None and trailing > state["log_end_offset"]:  # an empty active segment's base
            open_transactions = state["open_transactions"]
            state.update(log_end_offset=trailing, last_stable_offset=min(open_transactions.values(), default=trailing))
        return state

    return store.commit(tp, build, writer=writer or Writer(id="compaction-import"), operation="append", now_ms=now_ms)


def build_indexes(
    log: LogSegment, base_offset: int, index_interval_bytes: int = INDEX_INTERVAL_BYTES
) -> tuple[bytes, bytes]:
    """The ``.index`` and ``.timeindex`` of a segment file, as ``LogSegment.recover`` builds and trims them."""
    batches = log.batches
    positions = batches.column("position").to_numpy()
    lasts = log.batch_last_offsets
    max_timestamps = batches.column("max_timestamp").to_numpy()
    offset_index, time_index = [], []
    last_entry = 0
    top, top_offset = -1, -1  # TimestampOffset.UNKNOWN
    last_time = -1  # an empty time index's last entry has no timestamp

    def time_entry(timestamp: int, offset: int) -> None:
        nonlocal last_time
        if timestamp > last_time:
            time_index.append(_TIME_ENTRY.pack(timestamp, offset - base_offset))
            last_time = timestamp

    for position, last, max_timestamp in zip(positions.tolist(), lasts.tolist(), max_timestamps.tolist(), strict=True):
        if max_timestamp > top:
            top, top_offset = max_timestamp, last
        if position - last_entry > index_interval_bytes:
            offset_index.append(_OFFSET_ENTRY.pack(last - base_offset, position))
            time_entry(top, top_offset)
            last_entry = position
    time_entry(top, top_offset)  # a closed segment always ends with its largest timestamp
    return b"".join(offset_index), b"".join(time_index)


def _exported(
    store: Store, tp: TopicPartition, manifest: Manifest, segment: SegmentMeta, policy: BatchPolicy
) -> LogSegment:
    """A live segment as the batches Kafka reads: hidden records left out, Parquet records framed."""
    where = store.describe(tp, segment.path)
    if segment.format != SegmentFormat.KAFKA:
        framed = frame_records(store.objects.read_segment(tp, segment, start=manifest.log_start_offset), 0)
        return decode_log(framed.data, where)
    log = store.objects.read_log_segment(tp, segment)
    live = store.objects.live_rows(tp, segment, log.records.column("offset"), manifest.log_start_offset)
    if live.all():
        return log
    framed = reframe(log, live, np.zeros(0, dtype=np.int64), 0, policy)
    return decode_log(framed.data, where)


def export_partition(store: Store, tp: TopicPartition, directory: str | Path) -> list[Path]:
    """Write the partition's live log as a Kafka partition directory (which must be new or empty); returns the
    files written."""
    directory = Path(directory)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise InvalidArgumentError(f"{directory} exists and is not an empty directory: export writes a new one")
    manifest = store.manifest(tp)
    # A batch a deletion vector empties stays as an empty batch while it is its producer's last.
    policy = BatchPolicy(
        -1, {pid: (last.producer_epoch, last.last_data_offset) for pid, last in manifest.producer_state.items()}
    )
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    transactions = _Transactions()
    for segment in manifest.segments:
        if segment.next_offset <= manifest.log_start_offset:
            continue
        log = _exported(store, tp, manifest, segment, policy)
        if not log.batches.num_rows:
            continue
        offset_index, time_index = build_indexes(log, segment.base_offset)
        aborted = transactions.read(log)
        files = {"log": bytes(memoryview(log.data)), "index": offset_index, "timeindex": time_index}
        if aborted:
            files["txnindex"] = b"".join(t.pack() for t in aborted)
        for extension, data in files.items():
            path = directory / file_name(segment.base_offset, extension)
            path.write_bytes(data)
            written.append(path)
    return written
