"""The segment store: partitions' manifests, segment objects, reads, appends and the commit protocol.

Layout (SPEC §2)::

    <store>/<topic>/<partition>/segments/<20-digit base offset>-<unique id>.parquet   immutable objects
    <store>/<topic>/<partition>/_manifests/<20-digit version>.json                  one per version

A commit publishes version N+1 with an exclusive create. A writer that loses the race re-reads the newest
version and rebuilds its change on top of it (a rebase) or fails with :class:`CommitConflictError`.
Every call touches only the partition's own manifests and the objects it asks for.
"""

from __future__ import annotations

import fnmatch
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from compaction.errors import (
    CommitConflictError,
    CorruptManifestError,
    CorruptSegmentError,
    InvalidArgumentError,
    InvalidRecordsError,
    MissingObjectError,
    OffsetOverlapError,
    StoreError,
    StoreNotFoundError,
)
from compaction.store.manifest import (
    MANIFEST_DIR,
    MANIFEST_NAME,
    MAX_PARTITION,
    MAX_VERSION,
    DeletionVector,
    Manifest,
    SegmentMeta,
    WriterInfo,
    deletes_name,
    manifest_name,
    parse_manifest,
    partition_name_problem,
    segment_name,
    topic_name_problem,
)
from compaction.store.segment import (
    LONG_MAX,
    SEGMENT_SCHEMA,
    check_records,
    checksum,
    checksum_matches,
    conform,
    decode_parquet,
    encode_parquet,
    segment_stats,
)
from compaction.store.storage import Storage

MAX_COMMIT_ATTEMPTS = 64
DELETES_SCHEMA = pa.schema([("offset", pa.int64())])


@dataclass(frozen=True, order=True)
class TopicPartition:
    """A partition of a topic; printed the Kafka way (``orders-3``)."""

    topic: str
    partition: int

    def __post_init__(self) -> None:
        # The names become paths under the store: an illegal one could reach outside it ("..") or alias
        # another partition.
        problem = topic_name_problem(self.topic) if isinstance(self.topic, str) else "is not a string"
        if problem:
            raise InvalidArgumentError(f"topic name {self.topic!r} {problem}")
        if isinstance(self.partition, bool) or not isinstance(self.partition, int) \
                or not 0 <= self.partition <= MAX_PARTITION:
            raise InvalidArgumentError(f"partition {self.partition!r} of topic {self.topic} is not a partition "
                                       f"number (0 to {MAX_PARTITION})")

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def prefix(self) -> str:
        return f"{self.topic}/{self.partition}"


@dataclass(frozen=True)
class IllegalFolder:
    """A folder where a topic or a partition would be, whose name cannot be one: never read, never collected."""

    path: str  # relative to the store: "bad topic" or "orders/00"
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass(frozen=True)
class Writer:
    """Identifies who commits: the tool and the run (one run id per command invocation or job run)."""

    id: str = "compaction"
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)


@dataclass(frozen=True)
class Replacement:
    """A cleaner's change to one partition: replace live segments by new ones, move checkpoint and log start.

    It applies on top of any newer version in which every replaced segment is still live and unchanged
    and nobody else moved the checkpoint or the log start: that is the rebase rule.
    """

    removed: tuple[SegmentMeta, ...]
    added: tuple[SegmentMeta, ...]
    expected_first_dirty_offset: int
    first_dirty_offset: int
    expected_log_start_offset: int
    log_start_offset: int
    clean_keys_unique: bool | None = None  # None: as in the version it applies to
    last_clean_ms: int | None = None  # with next_horizon_ms; None: as in the version it applies to
    next_horizon_ms: int | None = None

    def apply(self, latest: Manifest | None, name: str) -> dict[str, Any]:
        if latest is None:
            raise CommitConflictError(f"partition {name} has no manifest to replace segments in")
        live = {segment.path: segment for segment in latest.segments}
        for segment in self.removed:
            if live.get(segment.path) != segment:
                raise CommitConflictError(
                    f"segment {name}/{segment.path} is no longer live and unchanged in manifest version "
                    f"{latest.version}: another writer replaced it"
                )
        if latest.first_dirty_offset != self.expected_first_dirty_offset:
            raise CommitConflictError(
                f"partition {name}: manifest version {latest.version} moved the checkpoint from "
                f"{self.expected_first_dirty_offset} to {latest.first_dirty_offset}: another cleaner ran"
            )
        if latest.log_start_offset != self.expected_log_start_offset:
            raise CommitConflictError(
                f"partition {name}: manifest version {latest.version} moved the log start from "
                f"{self.expected_log_start_offset} to {latest.log_start_offset}"
            )
        gone = {segment.path for segment in self.removed}
        segments = sorted([s for s in latest.segments if s.path not in gone] + list(self.added),
                          key=lambda s: s.base_offset)
        return {
            "log_start_offset": self.log_start_offset,
            "log_end_offset": latest.log_end_offset,
            "last_stable_offset": latest.last_stable_offset,
            "first_dirty_offset": self.first_dirty_offset,
            "clean_keys_unique": latest.clean_keys_unique if self.clean_keys_unique is None
            else self.clean_keys_unique,
            **({"last_clean_ms": latest.last_clean_ms, "next_horizon_ms": latest.next_horizon_ms}
               if self.last_clean_ms is None else
               {"last_clean_ms": self.last_clean_ms, "next_horizon_ms": self.next_horizon_ms}),
            "open_transactions": latest.open_transactions,
            "segments": tuple(segments),
        }


class Store:
    """A segment store rooted at a URL."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

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

    def _folders(self, rel: str) -> list[str]:
        return sorted(e.name for e in self.storage.list_dir(rel, detail=False) if e.is_dir)

    def topics(self) -> list[str]:
        """The topics: folders at the root named as Kafka names topics."""
        return [name for name in self._folders("") if topic_name_problem(name) is None]

    def partitions(self, topic: str) -> list[int]:
        """A topic's partitions: its folders named by a partition number, written the one canonical way."""
        problem = topic_name_problem(topic)
        if problem:
            raise InvalidArgumentError(f"topic name {topic!r} {problem}")
        return sorted(int(name) for name in self._folders(topic) if partition_name_problem(name) is None)

    def scan(self, topics: str | Sequence[str] | None = None) -> tuple[list[TopicPartition], list[IllegalFolder]]:
        """All partitions, optionally of the topics matching glob pattern(s) such as ``orders*``, and the
        folders among them whose names cannot be a topic or a partition (reported, never read)."""
        patterns = [topics] if isinstance(topics, str) else list(topics or ["*"])
        illegal: list[IllegalFolder] = []
        names = []
        for name in self._folders(""):
            if not any(fnmatch.fnmatchcase(name, p) for p in patterns):
                continue
            problem = topic_name_problem(name)
            if problem:
                illegal.append(IllegalFolder(name, f"not a topic: the name {problem}"))
            else:
                names.append(name)
        with ThreadPoolExecutor(max_workers=16) as pool:
            per_topic = list(pool.map(self._folders, names))
        found = []
        for topic, folders in zip(names, per_topic, strict=True):
            for folder in folders:
                problem = partition_name_problem(folder)
                if problem:
                    illegal.append(IllegalFolder(f"{topic}/{folder}", f"not a partition of {topic}: the name "
                                                                      f"{problem}"))
                else:
                    found.append(TopicPartition(topic, int(folder)))
        return sorted(found), illegal

    def topic_partitions(self, topics: str | Sequence[str] | None = None) -> list[TopicPartition]:
        """All partitions, optionally of the topics matching glob pattern(s) such as ``orders*``."""
        return self.scan(topics)[0]

    # Manifests ---------------------------------------------------------------------------------------

    def versions(self, tp: TopicPartition) -> list[int]:
        """Committed manifest versions of a partition, ascending."""
        found = (MANIFEST_NAME.match(e.name) for e in self.storage.list_dir(f"{tp.prefix}/{MANIFEST_DIR}"))
        return sorted(int(m.group(1)) for m in found if m)

    def manifest(self, tp: TopicPartition, version: int | None = None) -> Manifest:
        """The partition's manifest at ``version`` (default: the newest); StoreNotFoundError if it has none."""
        if version is None:
            found = self.versions(tp)
            if not found:
                raise StoreNotFoundError(f"partition {self.describe(tp)} has no committed manifest")
            version = found[-1]
        rel = f"{tp.prefix}/{MANIFEST_DIR}/{manifest_name(version)}"
        where = self.storage.describe(rel)
        manifest = parse_manifest(self.storage.read_bytes(rel), where)
        if (manifest.topic, manifest.partition, manifest.version) != (tp.topic, tp.partition, version):
            raise CorruptManifestError(
                f"manifest {where} describes {manifest.topic}-{manifest.partition} version {manifest.version}, "
                f"expected {tp} version {version}"
            )
        return manifest

    def latest(self, tp: TopicPartition) -> Manifest | None:
        """The newest manifest, or None for a partition nobody has committed to yet."""
        try:
            return self.manifest(tp)
        except StoreNotFoundError:
            return None

    # Segments ----------------------------------------------------------------------------------------

    def write_segment(self, tp: TopicPartition, table: pa.Table, base_offset: int, next_offset: int,
                      created_ms: int, compression: str = "zstd", object_id: str | None = None) -> SegmentMeta:
        """Write records as a new segment object covering ``[base_offset, next_offset)``; not yet committed.

        ``object_id`` (default: a random one) names the object and must be unique to this write."""
        stats = segment_stats(table)
        data = encode_parquet(table, compression)
        rel = segment_name(base_offset, object_id or uuid.uuid4().hex)
        self.storage.write_bytes(f"{tp.prefix}/{rel}", data)
        return SegmentMeta(
            path=rel, base_offset=base_offset, next_offset=next_offset, record_count=stats.record_count,
            size_bytes=len(data), checksum=checksum(data), created_ms=created_ms,
            first_timestamp=stats.first_timestamp, max_timestamp=stats.max_timestamp,
            tombstone_count=stats.tombstone_count, keyless_count=stats.keyless_count,
            transactional_count=stats.transactional_count, control_count=stats.control_count,
            min_delete_horizon_ms=stats.min_delete_horizon_ms,
        )

    def write_deletes(self, tp: TopicPartition, segment: SegmentMeta, offsets: pa.Array, created_ms: int,
                      live_min_delete_horizon_ms: int | None, live_first_timestamp: int | None = None,
                      live_max_timestamp: int | None = None, object_id: str | None = None) -> DeletionVector:
        """Write a deletion vector (sorted offsets) for ``segment``; not yet committed. The caller gives the
        figures of the records it leaves visible (earliest delete horizon, first and largest timestamp) and
        may name the object as :meth:`write_segment`."""
        offsets = pc.unique(offsets.cast(pa.int64()))
        offsets = offsets.take(pc.sort_indices(offsets))
        sink = pa.BufferOutputStream()
        pq.write_table(pa.table([offsets], schema=DELETES_SCHEMA), sink, compression="zstd")
        data = sink.getvalue().to_pybytes()
        rel = deletes_name(segment.base_offset, object_id or uuid.uuid4().hex)
        self.storage.write_bytes(f"{tp.prefix}/{rel}", data)
        return DeletionVector(path=rel, count=len(offsets), size_bytes=len(data), checksum=checksum(data),
                              created_ms=created_ms, live_min_delete_horizon_ms=live_min_delete_horizon_ms,
                              live_first_timestamp=live_first_timestamp, live_max_timestamp=live_max_timestamp)

    def _read_whole(self, rel: str, kind: str, size: int, recorded: str) -> pa.Buffer:
        """An object's bytes, checked against the size and checksum its manifest recorded: bytes that
        changed since the commit are never decoded, rewritten or given a fresh checksum."""
        where = self.storage.describe(rel)
        data = self.storage.read_buffer(rel)
        if data.size != size:
            raise CorruptSegmentError(f"{kind} {where} is {data.size} bytes, but the manifest records {size}")
        if not checksum_matches(data, recorded):
            raise CorruptSegmentError(f"{kind} {where} does not match the checksum the manifest records "
                                      f"({recorded}): its bytes changed after it was committed")
        return data

    def read_deletes(self, tp: TopicPartition, vector: DeletionVector) -> pa.Array:
        rel = f"{tp.prefix}/{vector.path}"
        where = self.storage.describe(rel)
        data = self._read_whole(rel, "deletion vector", vector.size_bytes, vector.checksum)
        try:
            table = pq.read_table(pa.BufferReader(data), use_threads=False)
        except (pa.ArrowException, OSError) as err:
            raise CorruptSegmentError(f"deletion vector {where} is not a readable Parquet file: {err}") from err
        if table.schema != DELETES_SCHEMA:
            raise CorruptSegmentError(f"deletion vector {where} has columns {table.schema}, expected {DELETES_SCHEMA}")
        return table.column("offset").combine_chunks()

    def read_segment(self, tp: TopicPartition, segment: SegmentMeta, columns: Sequence[str] | None = None,
                     start: int | None = None) -> pa.Table:
        """A segment's live records (the asked columns): its deletion vector applied and, with ``start``
        (the log start offset), the records below it left out.

        Reading every column reads the whole object and checks its size and checksum; reading some reads
        only their pages, which check their own CRCs. Either way the schema is checked.
        """
        rel = f"{tp.prefix}/{segment.path}"
        where = self.storage.describe(rel)
        wanted = None if columns is None else list(dict.fromkeys(columns))
        trim = start is not None and segment.base_offset < start
        needs_offset = (segment.deletes is not None or trim) and wanted is not None and "offset" not in wanted
        if wanted is None or set(wanted) >= set(SEGMENT_SCHEMA.names):
            data = self._read_whole(rel, "segment", segment.size_bytes, segment.checksum)
            table = decode_parquet(data, where, None if wanted is None else wanted)
        else:
            source, size = self.storage.open_input(rel)
            try:
                if size != segment.size_bytes:
                    raise CorruptSegmentError(f"segment {where} is {size} bytes, but the manifest records "
                                              f"{segment.size_bytes}")
                table = decode_parquet(source, where, ["offset", *wanted] if needs_offset else wanted)
            finally:
                source.close()
        if segment.deletes is not None:
            deleted = self.read_deletes(tp, segment.deletes)
            table = table.filter(pc.invert(pc.is_in(table.column("offset"), deleted)))
        if trim:
            table = table.filter(pc.greater_equal(table.column("offset"), start))
        return table.drop_columns(["offset"]) if needs_offset else table

    def read(self, tp: TopicPartition, start: int | None = None, end: int | None = None,
             columns: Sequence[str] | None = None, manifest: Manifest | None = None) -> pa.Table:
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
            table = self.read_segment(tp, segment, read_columns)
            if segment.base_offset < low or segment.next_offset > high:
                offsets = table.column("offset")
                table = table.filter(pc.and_(pc.greater_equal(offsets, low), pc.less(offsets, high)))
            tables.append(table)
        schema = pa.schema([SEGMENT_SCHEMA.field(c) for c in read_columns])
        result = pa.concat_tables([t.cast(schema) for t in tables]) if tables else schema.empty_table()
        return result.select(wanted)

    # Commits -----------------------------------------------------------------------------------------

    def commit(self, tp: TopicPartition, build: Callable[[Manifest | None], Mapping[str, Any]], *,
               writer: Writer, operation: str, now_ms: int, max_attempts: int = MAX_COMMIT_ATTEMPTS,
               rng: random.Random | None = None) -> Manifest:
        """Publish the next manifest version, rebuilding the change on the newest version until it wins.

        ``build(latest)`` returns the new log state (or raises CommitConflictError when its change no
        longer applies); this method is the only code that publishes manifests. Who holds a version is
        decided by :meth:`_publish`, which reads it back whenever the create's outcome is not a plain success.
        """
        rng = rng or random.Random()
        lost: Manifest | None = None  # the version that another writer won, as read back
        for attempt in range(max_attempts):
            latest = self.latest(tp) if lost is None else self._newest_from(tp, lost)
            # The cleaner's partition-level state carries over unless the change sets it.
            state = {"clean_keys_unique": latest.clean_keys_unique if latest else False,
                     "last_clean_ms": latest.last_clean_ms if latest else None,
                     "next_horizon_ms": latest.next_horizon_ms if latest else None, **build(latest)}
            version = latest.version + 1 if latest else 1
            commit_id = uuid.uuid4().hex
            try:
                manifest = Manifest(
                    topic=tp.topic, partition=tp.partition, version=version,
                    writer=WriterInfo(id=writer.id, run_id=writer.run_id, operation=operation,  # type: ignore[arg-type]
                                      time_ms=now_ms, commit_id=commit_id),
                    **state,
                )
            except ValueError as err:
                raise CommitConflictError(f"partition {tp}: the change does not apply to version "
                                          f"{version - 1}: {err}") from err
            holder = self._publish(tp, manifest, rng)
            if holder.writer.commit_id == commit_id:
                return holder
            lost = holder
            # Lost the race for this version: back off (exponential, jittered), then rebase on the newer one.
            time.sleep(rng.uniform(0, min(0.5, 0.005 * 2 ** min(attempt, 7))))
        raise CommitConflictError(f"partition {tp}: gave up after {max_attempts} commit attempts lost to "
                                  "concurrent writers")

    def _publish(self, tp: TopicPartition, manifest: Manifest, rng: random.Random) -> Manifest:
        """Create ``manifest``'s version exclusively; return the manifest that holds it, ours or another's.

        A refused create is not proof of a lost race, nor a failed one proof of nothing written: a PUT
        can land and lose its answer, and then botocore's retry of it is refused (412). So, as Delta
        resolves an unknown outcome, the version is read back and its ``commit_id`` decides. Absent or
        unreadable after a failure: the same bytes are sent again (one commit id, so whichever copy lands
        is ours), until the storage's retry budget runs out; then the outcome is reported unknown. (On local
        disk and in memory a failed create wrote nothing, so its error is raised at once.)
        """
        rel = f"{tp.prefix}/{MANIFEST_DIR}/{manifest_name(manifest.version)}"
        data = manifest.to_json()
        deadline: float | None = None
        failure: Exception | None = None
        pauses = 0
        while True:
            try:
                if self.storage.create_exclusive(rel, data):
                    return manifest
            except (OSError, StoreError) as err:
                failure = err
            try:
                return self.manifest(tp, manifest.version)
            except MissingObjectError:
                if failure is not None and self.storage.outcomes_are_certain:
                    raise failure from None  # nothing was written: a plain failure
                # Never landed, or not yet: send it again.
            except CorruptManifestError:
                raise
            except (OSError, StoreError) as err:
                failure = err
            now = time.monotonic()
            deadline = deadline or now + self.storage.retry_budget_ms / 1000
            if now >= deadline:
                raise StoreError(
                    f"the outcome of the commit of {self.storage.describe(rel)} is unknown: the store did not "
                    f"confirm it within the retry budget of {self.storage.retry_budget_ms / 1000:g} s "
                    f"({failure or 'refused, yet absent when read back'}); readers see version "
                    f"{manifest.version - 1} or {manifest.version}"
                ) from failure
            time.sleep(min(deadline - now, rng.uniform(0, min(2.0, 0.05 * 2 ** pauses))))
            pauses += 1

    def _newest_from(self, tp: TopicPartition, newest: Manifest) -> Manifest:
        """The newest manifest, from one known to exist: probe the versions after it."""
        while True:
            try:
                newest = self.manifest(tp, newest.version + 1)
            except MissingObjectError:
                return newest

    def replace(self, tp: TopicPartition, change: Replacement, *, writer: Writer, now_ms: int,
                operation: str = "clean") -> Manifest:
        return self.commit(tp, lambda latest: change.apply(latest, str(tp)), writer=writer,
                           operation=operation, now_ms=now_ms)

    def append(self, tp: TopicPartition, records: pa.Table, *, now_ms: int, writer: Writer | None = None,
               operation: str = "append") -> Manifest:
        """Append records as one new segment at the log end and commit it.

        Offsets are assigned from the log end when the ``offset`` column is absent or all null; explicit
        offsets must be strictly increasing and start at or after the log end. On a lost race the records
        are re-based: auto-assigned offsets move to the new log end (a new object is written), explicit
        ones are kept if they still fit, else the append fails with CommitConflictError.
        """
        where = f"records for {tp}"
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
            if latest is not None and latest.version >= MAX_VERSION:
                raise StoreError(f"partition {self.describe(tp)} is at manifest version {latest.version}, the "
                                 f"last a 20-digit manifest name holds ({MAX_VERSION}): it takes no more commits")
            log_end = latest.log_end_offset if latest else 0
            if explicit:
                first = table.column("offset")[0].as_py()
                if latest is not None and first < log_end:
                    if written:
                        raise CommitConflictError(
                            f"{where}: a concurrent append took offsets up to {log_end}, past the explicit "
                            f"offset {first}")
                    raise OffsetOverlapError(
                        f"{where}: offsets start at {first}, but partition {self.describe(tp)} already holds "
                        f"offsets up to {log_end} (exclusive)")
                placed = table
                base = log_end if latest is not None else first
            else:
                if log_end + table.num_rows > LONG_MAX:
                    raise InvalidRecordsError(
                        f"{where}: {table.num_rows} record(s) from the log end {log_end} would leave no log end "
                        f"offset below Kafka's Long.MAX ({LONG_MAX})")
                offsets = pa.array(range(log_end, log_end + table.num_rows), pa.int64())
                placed = table.set_column(0, "offset", offsets)
                check_records(placed, where)
                base = log_end
            last = placed.column("offset")[placed.num_rows - 1].as_py()
            if base not in written:
                written[base] = self.write_segment(tp, placed, base, last + 1, created_ms=now_ms)
            segment = written[base]
            open_txns = dict(latest.open_transactions) if latest else {}
            _track_transactions(placed, open_txns, where)
            next_offset = last + 1
            return {
                "log_start_offset": latest.log_start_offset if latest and latest.segments else base,
                "log_end_offset": next_offset,
                "last_stable_offset": min(open_txns.values(), default=next_offset),
                "first_dirty_offset": latest.first_dirty_offset if latest and latest.segments else base,
                "open_transactions": open_txns,
                "segments": (*(latest.segments if latest else ()), segment),
            }

        return self.commit(tp, build, writer=writer, operation=operation, now_ms=now_ms)


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


def read_manifests(store: Store, partitions: Iterable[TopicPartition],
                   threads: int = 16) -> dict[TopicPartition, Manifest | StoreError]:
    """Newest manifest of each partition, read in parallel; a failure is returned in place of the manifest."""

    def one(tp: TopicPartition) -> Manifest | StoreError:
        try:
            return store.manifest(tp)
        except StoreError as err:
            return err

    partitions = list(partitions)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return dict(zip(partitions, pool.map(one, partitions), strict=True))
