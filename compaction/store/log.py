"""A partition log in the segment store: list partitions, read manifests and the live log, append and commit.

Layout (SPEC §2)::

    <store>/<topic>/<partition>/segments/<20-digit base offset>-<unique id>.<parquet|log>   immutable objects
    <store>/<topic>/<partition>/_manifests/<20-digit version>.json                        one per version

A segment is Parquet (one row per record) or Kafka's record batches (``.log``); :mod:`.formats` reads both
to the same record schema.

:class:`Store` is the face the rest of the product uses: the log, at the level of its manifests. Its
``objects`` (:class:`~compaction.store.objects.Objects`) read and write the objects themselves (segments,
deletion vectors, verdicts, pins); commits go through :mod:`~compaction.store.commit`. Every call touches only
the partition's own manifests and the objects it asks for.
"""

from __future__ import annotations

import fnmatch
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from compaction.errors import (
    CommitConflictError,
    CorruptBatchError,
    InvalidArgumentError,
    InvalidRecordsError,
    OffsetOverlapError,
    StoreError,
    StoreNotFoundError,
)
from compaction.schema import LONG_MAX
from compaction.store import commit as commits
from compaction.store import inputs
from compaction.store.commit import MAX_COMMIT_ATTEMPTS, Build, Replacement, Writer
from compaction.store.formats import SegmentFormat, check_batch_offsets, decode_log
from compaction.store.manifest import MANIFEST_DIR, MANIFEST_NAME, Manifest, SegmentMeta, producer_state
from compaction.store.names import (
    MAX_PARTITION,
    IllegalFolder,
    TopicPartition,
    partition_name_problem,
    topic_name_problem,
)
from compaction.store.objects import Objects
from compaction.store.segment import SEGMENT_SCHEMA, check_records, conform, first_set
from compaction.store.storage import Storage


class Store:
    """A segment store rooted at a URL."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.objects = Objects(storage)

    @classmethod
    def open(cls, url: str, storage_options: Mapping[str, Any] | None = None) -> Store:
        return cls(Storage.from_url(url, storage_options))

    @property
    def url(self) -> str:
        return self.storage.url

    def describe(self, tp: TopicPartition, rel: str = "") -> str:
        return self.storage.describe(f"{tp.prefix}/{rel}" if rel else tp.prefix)

    # Listing -----------------------------------------------------------------------------------------

    def require_exists(self) -> None:
        """Fail with StoreNotFoundError if the store's root does not exist (a typo, a missing bucket)."""
        # Listing (not exists(), which hides why) reports an unreachable endpoint or missing credentials.
        if not self.storage.list_dir("", detail=False) and not self.storage.exists(""):
            raise StoreNotFoundError(f"store {self.storage.describe('')} does not exist")

    def topics(self) -> list[str]:
        """The topics: folders at the root named as Kafka names topics."""
        return [name for name in _folders(self.storage, "") if topic_name_problem(name) is None]

    def partitions(self, topic: str) -> list[int]:
        """A topic's partitions: its folders named by a partition number, written the one canonical way."""
        problem = topic_name_problem(topic)
        if problem:
            raise InvalidArgumentError(f"topic name {topic!r} {problem}")
        return sorted(int(name) for name in _folders(self.storage, topic) if partition_name_problem(name) is None)

    def scan(self, topics: str | Sequence[str] | None = None) -> tuple[list[TopicPartition], list[IllegalFolder]]:
        """All partitions, optionally of the topics matching glob pattern(s) such as ``orders*``, and the
        folders among them whose names cannot be a topic or a partition (reported, never read)."""
        patterns = [topics] if isinstance(topics, str) else list(topics or ["*"])
        illegal: list[IllegalFolder] = []
        names = []
        for name in _folders(self.storage, ""):
            if not any(fnmatch.fnmatchcase(name, p) for p in patterns):
                continue
            problem = topic_name_problem(name)
            if problem:
                illegal.append(IllegalFolder(name, f"not a topic: the name {problem}"))
            else:
                names.append(name)
        with ThreadPoolExecutor(max_workers=16) as pool:
            per_topic = list(pool.map(lambda name: _folders(self.storage, name), names))
        found = []
        for topic, folders in zip(names, per_topic, strict=True):
            for folder in folders:
                problem = partition_name_problem(folder)
                if problem:
                    illegal.append(
                        IllegalFolder(f"{topic}/{folder}", f"not a partition of {topic}: the name {problem}")
                    )
                else:
                    found.append(TopicPartition(topic, int(folder)))
        return sorted(found), illegal

    def topic_partitions(self, topics: str | Sequence[str] | None = None) -> list[TopicPartition]:
        """All partitions, optionally of the topics matching glob pattern(s) such as ``orders*``."""
        return self.scan(topics)[0]

    # Manifests ---------------------------------------------------------------------------------------

    def versions(self, tp: TopicPartition) -> list[int]:
        """Committed manifest versions of a partition, ascending."""
        return commits.manifest_versions(self.storage, tp)

    def manifest(self, tp: TopicPartition, version: int | None = None) -> Manifest:
        """The partition's manifest at ``version`` (default: the newest); StoreNotFoundError if it has none."""
        return commits.read_manifest(self.storage, tp, version)

    def latest(self, tp: TopicPartition) -> Manifest | None:
        """The newest manifest, or None for a partition nobody has committed to yet."""
        return commits.newest_manifest(self.storage, tp)

    def read(
        self,
        tp: TopicPartition,
        start: int | None = None,
        end: int | None = None,
        columns: Sequence[str] | None = None,
        manifest: Manifest | None = None,
    ) -> pa.Table:
        """The partition's live log in offset order, optionally only offsets in ``[start, end)``."""
        manifest = manifest or self.manifest(tp)
        low = max(manifest.log_start_offset, start if start is not None else 0)
        high = manifest.log_end_offset if end is None else min(end, manifest.log_end_offset)
        wanted = list(columns) if columns is not None else list(SEGMENT_SCHEMA.names)
        read_columns = wanted if "offset" in wanted else ["offset", *wanted]
        tables = []
        for segment in manifest.segments:
            if segment.next_offset <= low or segment.base_offset >= high:
                continue
            table = self.objects.read_segment(tp, segment, read_columns)
            if segment.base_offset < low or segment.next_offset > high:
                offsets = table.column("offset")
                table = table.filter(pc.and_(pc.greater_equal(offsets, low), pc.less(offsets, high)))
            tables.append(table)
        schema = pa.schema([SEGMENT_SCHEMA.field(c) for c in read_columns])
        result = pa.concat_tables([t.cast(schema) for t in tables]) if tables else schema.empty_table()
        return result.select(wanted)

    # Commits -----------------------------------------------------------------------------------------

    def commit(
        self,
        tp: TopicPartition,
        build: Build,
        *,
        writer: Writer,
        operation: str,
        now_ms: int,
        max_attempts: int = MAX_COMMIT_ATTEMPTS,
        rng: random.Random | None = None,
        expected: Manifest | None = None,
    ) -> Manifest:
        """Publish the next manifest version with ``build(latest)``'s log state (see :func:`.commit.commit`)."""
        return commits.commit(
            self.storage,
            tp,
            build,
            writer=writer,
            operation=operation,
            now_ms=now_ms,
            max_attempts=max_attempts,
            rng=rng,
            expected=expected,
        )

    def replace(
        self,
        tp: TopicPartition,
        change: Replacement,
        *,
        writer: Writer,
        now_ms: int,
        operation: str = "clean",
        expected: Manifest | None = None,
    ) -> Manifest:
        """Commit a cleaner's change; ``expected``: the version it was planned on (tried first, unread)."""
        return self.commit(
            tp,
            lambda latest: change.apply(latest, str(tp)),
            writer=writer,
            operation=operation,
            now_ms=now_ms,
            expected=expected,
        )

    def append(
        self,
        tp: TopicPartition,
        records: pa.Table,
        *,
        now_ms: int,
        writer: Writer | None = None,
        where: str | None = None,
        operation: str = "append",
        segment_format: SegmentFormat = SegmentFormat.PARQUET,
        annotate: Callable[[Manifest | None, pa.Table], Mapping[str, Any]] | None = None,
    ) -> Manifest:
        """Append records as one new segment (of ``segment_format``) at the log end and commit it.

        Offsets are assigned from the log end when the ``offset`` column is absent or all null; explicit
        offsets must be strictly increasing and start at or after the log end. On a lost race the records
        are re-based: auto-assigned offsets move to the new log end (a new object is written), explicit
        ones are kept if they still fit, else the append fails with CommitConflictError. ``annotate(latest,
        placed)`` adds to the commit's log state what goes with the records as placed (erasure requests naming
        their offsets), in the same commit.
        """
        where = where or f"records for {tp}"
        table = conform(records, where)
        if table.num_rows == 0:
            raise InvalidRecordsError(f"{where}: nothing to append (0 records)")
        explicit = table.column("offset").null_count == 0
        if not explicit and table.column("offset").null_count != table.num_rows:
            raise InvalidRecordsError(f"{where}: either every record has an offset or none has")
        if explicit:
            check_records(table, where)
        writer = writer or Writer()
        written: dict[int, SegmentMeta] = {}  # base offset -> object already written for that placement

        def build(latest: Manifest | None) -> dict[str, Any]:
            log_end = latest.log_end_offset if latest else 0
            if explicit:
                first = table.column("offset")[0].as_py()
                if latest is not None and first < log_end:
                    if written:
                        raise CommitConflictError(
                            f"{where}: a concurrent append took offsets up to {log_end}, past the explicit "
                            f"offset {first}"
                        )
                    raise OffsetOverlapError(
                        f"{where}: offsets start at {first}, but partition {self.describe(tp)} already holds "
                        f"offsets up to {log_end} (exclusive)"
                    )
                placed = table
                base = log_end if latest is not None else first
            else:
                if log_end + table.num_rows > LONG_MAX:
                    raise InvalidRecordsError(
                        f"{where}: {table.num_rows} record(s) from the log end {log_end} would leave no log end "
                        f"offset below Kafka's Long.MAX ({LONG_MAX})"
                    )
                offsets = pa.array(range(log_end, log_end + table.num_rows), pa.int64())
                placed = table.set_column(0, "offset", offsets)
                check_records(placed, where)
                base = log_end
            last = placed.column("offset")[placed.num_rows - 1].as_py()
            if base not in written:
                written[base] = self.objects.write_segment(
                    tp, placed, base, last + 1, created_ms=now_ms, segment_format=segment_format
                )
            state = appended_state(latest, [written[base]], placed, where)
            return {**state, **annotate(latest, placed)} if annotate is not None else state

        return self.commit(tp, build, writer=writer, operation=operation, now_ms=now_ms)

    def append_log(
        self,
        tp: TopicPartition,
        data: Any,
        *,
        now_ms: int,
        writer: Writer | None = None,
        where: str | None = None,
        operation: str = "append",
    ) -> Manifest:
        """Append a buffer of Kafka record batches (a ``.log`` file's bytes) as one new ``.log`` segment.

        The batches keep their offsets and bytes, so they must continue the log: the first batch's base offset
        is the log end offset (any offset for a partition nobody has written to). Bad bytes (a CRC that fails,
        a truncated batch, an unknown magic or codec), batches out of offset order, a delete horizon (the
        cleaner's alone, as for Parquet records) or a first offset elsewhere refuse the whole append, naming
        the batch's offset; nothing is written then.
        """
        where = where or f"batches for {tp}"
        try:
            segment = decode_log(data, where)
            check_batch_offsets(segment, where)
        except CorruptBatchError as err:
            raise InvalidRecordsError(str(err)) from err
        batches = segment.batches
        if batches.num_rows == 0:
            raise InvalidRecordsError(f"{where}: nothing to append (no record batch)")
        row = first_set(batches.column("delete_horizon_ms"))
        if row is not None:
            raise InvalidRecordsError(
                f"{where}: the batch at offset {batches.column('base_offset')[row].as_py()} carries a delete horizon "
                f"(attribute bit 6), which only the cleaner sets; appended batches must not"
            )
        records = segment.records
        if records.num_rows:
            check_records(records, where)
        first = batches.column("base_offset")[0].as_py()
        next_offset = int(segment.batch_last_offsets[-1]) + 1
        if first < 0 or next_offset > LONG_MAX:
            raise InvalidRecordsError(
                f"{where}: batches cover offsets [{first}, {next_offset}), outside Kafka's range [0, {LONG_MAX})"
            )
        payload = bytes(data)
        written: list[SegmentMeta] = []

        def build(latest: Manifest | None) -> dict[str, Any]:
            if latest is not None and first != latest.log_end_offset:
                expected = latest.log_end_offset
                if written:
                    raise CommitConflictError(
                        f"{where}: a concurrent append moved the log end to {expected}, "
                        f"past the batches' first offset {first}"
                    )
                problem = (
                    f"{where}: the first batch's base offset is {first}, but partition {self.describe(tp)} "
                    f"ends at offset {expected}: appended batches keep their offsets, so the first must "
                    f"be {expected}"
                )
                raise OffsetOverlapError(problem) if first < expected else InvalidRecordsError(problem)
            if not written:
                written.append(
                    self.objects.write_segment(
                        tp,
                        records,
                        first,
                        next_offset,
                        created_ms=now_ms,
                        segment_format=SegmentFormat.KAFKA,
                        encoded=payload,
                        batches=batches,
                    )
                )
            return appended_state(latest, written, records, where)

        return self.commit(tp, build, writer=writer or Writer(), operation=operation, now_ms=now_ms)

    def create_topic(self, topic: str, partitions: int, *, now_ms: int, writer: Writer | None = None) -> list[Manifest]:
        """Create ``topic`` with ``partitions`` empty partitions (version 1 of each, no segment; operation
        ``create``), as Kafka's ``kafka-topics --create``: writers append to it after. A topic that has partitions
        already is refused."""
        existing = self.partitions(topic)
        if existing:
            raise InvalidArgumentError(
                f"topic {topic} already exists in store {self.url} with {len(existing)} partition(s)"
            )
        if not 1 <= partitions <= MAX_PARTITION + 1:
            raise InvalidArgumentError(f"a topic has 1 to {MAX_PARTITION + 1} partitions, not {partitions}")
        empty = SEGMENT_SCHEMA.empty_table()

        def create(tp: TopicPartition) -> Manifest:
            def build(latest: Manifest | None) -> dict[str, Any]:
                if latest is not None:
                    raise CommitConflictError(f"partition {self.describe(tp)} was created meanwhile by another writer")
                return appended_state(None, [], empty, f"topic {topic}")

            return self.commit(tp, build, writer=writer or Writer(), operation="create", now_ms=now_ms)

        with ThreadPoolExecutor(max_workers=min(16, partitions)) as pool:
            return list(pool.map(create, [TopicPartition(topic, p) for p in range(partitions)]))

    def append_file(
        self,
        tp: TopicPartition,
        path: str | Path,
        *,
        now_ms: int,
        writer: Writer | None = None,
        fill_timestamps: bool = True,
    ) -> Manifest:
        """Append a file as one new segment: a Kafka ``.log`` file's batches as they are (:meth:`append_log`), or
        the records of a Parquet or JSON Lines file (:meth:`append`; without a timestamp they get ``now_ms``
        unless ``fill_timestamps`` is false)."""
        path = Path(path)
        if not path.exists():
            raise InvalidRecordsError(f"input file {path} does not exist")
        if path.suffix == ".log":  # Kafka record batches: kept byte for byte, offsets and all
            return self.append_log(tp, path.read_bytes(), now_ms=now_ms, writer=writer, where=str(path))
        table = inputs.read_records(path)
        if fill_timestamps:
            table = inputs.fill_timestamps(table, now_ms)
        return self.append(tp, table, now_ms=now_ms, writer=writer, where=str(path))


def _folders(storage: Storage, rel: str) -> list[str]:
    """The names of the folders directly under ``rel``, sorted."""
    return sorted(e.name for e in storage.list_dir(rel, detail=False) if e.is_dir)


def appended_state(
    latest: Manifest | None, segments: Sequence[SegmentMeta], records: pa.Table, where: str
) -> dict[str, Any]:
    """The log state (for :meth:`Store.commit`) once ``segments``, which hold ``records``, follow ``latest``.

    The segments start at or after ``latest``'s log end; none appends nothing. The last stable offset is
    Kafka's: the first offset of the earliest transaction still open (those ``latest`` left open, less those
    the records' markers end, plus those they begin), or the log end when none is.
    """
    log_end = latest.log_end_offset if latest else 0
    base = segments[0].base_offset if segments else log_end
    next_offset = segments[-1].next_offset if segments else log_end
    open_txns = dict(latest.open_transactions) if latest else {}
    _track_transactions(records, open_txns, where)
    # A log never written, or emptied by retention (its start at its end), starts where the new records do; one
    # that cleaning emptied keeps its log start, which only retention moves, as Kafka's cleaner never does.
    kept = latest if latest is not None and latest.segments else None
    if latest is None or (kept is None and latest.log_start_offset == latest.log_end_offset):
        log_start = base
    else:
        log_start = latest.log_start_offset
    return {
        "log_start_offset": log_start,
        "log_end_offset": next_offset,
        "last_stable_offset": min(open_txns.values(), default=next_offset),
        "first_dirty_offset": kept.first_dirty_offset if kept else base,
        "open_transactions": open_txns,
        "producers": tuple(producer_state(segments, latest.producer_state if latest else None).values()),
        "segments": (*(latest.segments if latest else ()), *segments),
    }


def _track_transactions(table: pa.Table, open_txns: dict[int, int], where: str) -> None:
    """Update producer id -> first offset of its open transaction with the records' transactional rows."""
    is_control = pc.fill_null(table.column("is_control"), False)
    transactional = pc.or_(is_control, pc.fill_null(table.column("is_transactional"), False))
    if not pc.any(transactional).as_py():
        return
    rows = table.filter(transactional).select(["offset", "producer_id", "is_control"]).to_pylist()
    for row in rows:
        producer = row["producer_id"]
        if producer is None or producer < 0:
            raise InvalidRecordsError(f"{where}: transactional record at offset {row['offset']} has no producer id")
        if row["is_control"]:
            open_txns.pop(producer, None)
        else:
            open_txns.setdefault(producer, row["offset"])


#: Requests at once when many partitions' manifests are read: on an object store each is a round trip, so a store of
#: 10,000 partitions is read in the time of a few hundred.
MANIFEST_READ_THREADS = 64
#: From this many partitions of a topic on an object store, their manifest versions come from listing the topic's
#: objects (a page of 1,000 names a request; ten listings at once, by the partition number's first digit) rather
#: than each partition's ``_manifests`` folder (a request each, and on some servers a scan of the whole bucket).
FLAT_LISTING_PARTITIONS = 256


def newest_versions(store: Store, topic: str) -> dict[int, int]:
    """Per partition of ``topic``, its newest committed manifest version, from listings of the topic's objects (the
    partitions whose number starts with each digit listed side by side)."""

    def listed(digit: str) -> list[str]:
        return store.storage.find(topic, prefix=digit)

    newest: dict[int, int] = {}
    with ThreadPoolExecutor(max_workers=10) as pool:
        for names in pool.map(listed, "0123456789"):
            for name in names:
                partition, _, rest = name.partition("/")
                folder, _, file = rest.partition("/")
                found = MANIFEST_NAME.match(file) if folder == MANIFEST_DIR else None
                if found and partition_name_problem(partition) is None:
                    newest[int(partition)] = max(newest.get(int(partition), 0), int(found.group(1)))
    return newest


def read_manifests(
    store: Store, partitions: Iterable[TopicPartition], threads: int = MANIFEST_READ_THREADS
) -> dict[TopicPartition, Manifest | StoreError]:
    """Newest manifest of each partition, read in parallel; a failure is returned in place of the manifest.

    A topic of many partitions on an object store has its versions listed at once (:func:`newest_versions`): what
    the listing finds is the newest version as of the listing, as a plan would have read it a moment earlier (a
    commit on top of it rebases over a version written since)."""
    partitions = list(partitions)
    topics = {tp.topic for tp in partitions}
    versions: dict[TopicPartition, int] = {}
    if not store.storage.calls_fail_whole:
        for topic in topics:
            mine = [tp for tp in partitions if tp.topic == topic]
            if len(mine) >= FLAT_LISTING_PARTITIONS:
                found = newest_versions(store, topic)
                versions.update({tp: found[tp.partition] for tp in mine if tp.partition in found})

    def one(tp: TopicPartition) -> Manifest | StoreError:
        try:
            return store.manifest(tp, versions.get(tp))
        except StoreError as err:
            return err

    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(partitions)))) as pool:
        return dict(zip(partitions, pool.map(one, partitions), strict=True))
