"""The manifest: one committed version of a partition's log, its JSON form and its structural rules."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from compaction.errors import CorruptManifestError, InvalidManifestError
from compaction.schema import LONG_MAX, LONG_MIN
from compaction.store.formats import SegmentFormat
from compaction.store.names import MAX_PARTITION, topic_name_problem

MANIFEST_DIR = "_manifests"
SEGMENT_DIR = "segments"

#: Segment and deletion-vector objects live in the partition's own ``segments/`` folder and are named
#: ``<20-digit base offset>-<unique id>.<ext>``; anything else (``..``, absolute paths) is rejected.
#: Digits are ASCII only and ``\Z`` ends a name: ``\d`` would take other scripts' digits (which ``int()``
#: reads) and ``$`` a trailing newline, so two names could stand for one offset or version.
SEGMENT_NAME = re.compile(r"^segments/([0-9]{20})-([0-9A-Za-z_-]{1,64})\.(parquet|log)\Z")
#: Deletion vectors are written ``_<20-digit base offset>-<unique id>.deletes.parquet``: readers that skip
#: ``_`` and ``.`` files (Spark, Hadoop, pyarrow datasets) then never take one for a segment. Names written
#: before that, without the ``_``, are still read.
DELETES_NAME = re.compile(r"^segments/_?([0-9]{20})-([0-9A-Za-z_-]{1,64})\.deletes\.parquet\Z")
DELETES_PREFIX = "_"
MANIFEST_NAME = re.compile(r"^([0-9]{20})\.json\Z")
#: The largest version a 20-digit manifest name holds: a version past it could be written but never listed.
MAX_VERSION = 10**20 - 1


def manifest_name(version: int) -> str:
    return f"{version:020d}.json"


def segment_name(base_offset: int, unique_id: str, extension: str = "parquet") -> str:
    return f"{SEGMENT_DIR}/{base_offset:020d}-{unique_id}.{extension}"


def deletes_name(base_offset: int, unique_id: str) -> str:
    return f"{SEGMENT_DIR}/{DELETES_PREFIX}{base_offset:020d}-{unique_id}.deletes.parquet"


#: Every number a manifest holds is one of Kafka's: a Long (offsets, times, counts, sizes, producer ids) or a
#: Short (a producer epoch). JSON integers are unbounded, and a value past these would fail far from its file
#: (in Arrow, in a struct) instead of naming the manifest and the field here.
Long = Annotated[int, Field(ge=LONG_MIN, le=LONG_MAX)]
NonNegativeLong = Annotated[int, Field(ge=0, le=LONG_MAX)]
PositiveLong = Annotated[int, Field(ge=1, le=LONG_MAX)]
Short = Annotated[int, Field(ge=-(2**15), le=2**15 - 1)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=False)


class DeletionVector(_Frozen):
    """Offsets of a segment that are logically removed without rewriting it (an object of sorted offsets)."""

    path: str
    count: PositiveLong
    size_bytes: NonNegativeLong
    checksum: str
    created_ms: Long
    # The segment's figures over the records it still shows (what the planner decides on):
    live_min_delete_horizon_ms: Long | None = None
    live_first_timestamp: Long | None = None
    live_max_timestamp: Long | None = None

    @model_validator(mode="after")
    def _check_path(self) -> DeletionVector:
        if not DELETES_NAME.match(self.path):
            raise ValueError(
                f"deletion vector path {self.path!r} is not a segments/_<20-digit base>-<id>.deletes.parquet "
                "name inside the partition"
            )
        return self


class ProducerState(_Frozen):
    """A producer's last batch in a segment (what Kafka's producer state keeps of it): its epoch, its last offset
    and max timestamp, and the last offset of its last data batch of that epoch (None when the epoch has only
    markers in the segment: Kafka's ``lastDataOffset`` is empty after an epoch bump)."""

    producer_id: NonNegativeLong
    producer_epoch: Short
    last_offset: NonNegativeLong
    max_timestamp: Long
    last_data_offset: NonNegativeLong | None = None


class EmptyBatch(_Frozen):
    """A batch of a ``.log`` segment that holds no record (kept for a producer's state or the log's last offset)."""

    last_offset: NonNegativeLong
    producer_id: Long = -1
    producer_epoch: Short = -1
    control: bool = False


class SegmentMeta(_Frozen):
    """A live segment as the manifest records it; ``[base_offset, next_offset)`` is its offset range."""

    path: str
    format: SegmentFormat = SegmentFormat.PARQUET  # a .parquet object, or a .log of Kafka record batches
    base_offset: NonNegativeLong
    next_offset: NonNegativeLong
    record_count: NonNegativeLong
    size_bytes: NonNegativeLong
    checksum: str
    created_ms: Long
    first_timestamp: Long | None = None
    max_timestamp: Long | None = None
    tombstone_count: NonNegativeLong = 0
    keyless_count: NonNegativeLong = 0
    transactional_count: NonNegativeLong = 0
    control_count: NonNegativeLong = 0
    min_delete_horizon_ms: Long | None = None
    deletes: DeletionVector | None = None
    producers: tuple[ProducerState, ...] = ()  # each producer's last batch (a record, in Parquet), by producer id
    empty_batches: tuple[EmptyBatch, ...] = ()  # a .log segment's batches without records

    @model_validator(mode="after")
    def _check(self) -> SegmentMeta:
        match = SEGMENT_NAME.match(self.path)
        if not match:
            raise ValueError(
                f"segment path {self.path!r} is not a segments/<20-digit base>-<id>.parquet (or .log) name inside "
                "the partition"
            )
        if match.group(3) != self.format.extension:
            raise ValueError(
                f"segment {self.path} is a .{match.group(3)} object, but the manifest gives format "
                f"{str(self.format)!r} (.parquet objects are parquet, .log objects kafka)"
            )
        if int(match.group(1)) != self.base_offset:
            raise ValueError(
                f"segment {self.path} is named for base offset {int(match.group(1))}, "
                f"but the manifest gives base_offset {self.base_offset}"
            )
        if self.next_offset <= self.base_offset:
            raise ValueError(
                f"segment {self.path} has next_offset {self.next_offset} <= base_offset {self.base_offset}"
            )
        if self.deletes is not None and self.deletes.count > self.record_count:
            raise ValueError(f"segment {self.path} deletes {self.deletes.count} of {self.record_count} records")
        return self

    @property
    def live_records(self) -> int:
        """Records a reader sees: the stored ones minus those its deletion vector removes."""
        return self.record_count - (self.deletes.count if self.deletes else 0)

    @property
    def live_size_bytes(self) -> int:
        """The bytes of the records a reader sees: the object's size, less its deleted records' share."""
        if self.deletes is None or not self.record_count:
            return self.size_bytes
        return self.size_bytes * self.live_records // self.record_count

    @property
    def live_min_delete_horizon_ms(self) -> int | None:
        """The earliest delete horizon among the records a reader sees (what tombstone purging looks at)."""
        return self.deletes.live_min_delete_horizon_ms if self.deletes else self.min_delete_horizon_ms

    @property
    def live_first_timestamp(self) -> int | None:
        return self.deletes.live_first_timestamp if self.deletes else self.first_timestamp

    @property
    def live_max_timestamp(self) -> int | None:
        return self.deletes.live_max_timestamp if self.deletes else self.max_timestamp

    @property
    def time_ms(self) -> int:
        """The segment's age for retention and min.compaction.lag.ms: its largest live timestamp, or its
        creation time when no live record has one (Kafka falls back to the file's modification time)."""
        latest = self.live_max_timestamp
        return latest if latest is not None else self.created_ms


def producer_state(
    segments: Sequence[SegmentMeta], state: Mapping[int, ProducerState] | None = None
) -> dict[int, ProducerState]:
    """Each producer's last batch once ``segments`` (in offset order) follow ``state``, as Kafka's producer state
    has it: a segment whose producer has only markers of the same epoch keeps the earlier last data offset."""
    state = dict(state or {})
    for segment in segments:
        for last in segment.producers:
            before = state.get(last.producer_id)
            if last.last_data_offset is None and before is not None and before.producer_epoch == last.producer_epoch:
                last = last.model_copy(update={"last_data_offset": before.last_data_offset})
            state[last.producer_id] = last
    return state


#: A key as an erasure request records it: its SHA-256 digest, 64 lowercase hex digits (never the key itself).
KEY_DIGEST = re.compile(r"^[0-9a-f]{64}\Z")


class HeldObject(_Frozen):
    """An object found holding a record of an erased key below the request's tombstone: where (relative to the
    partition's folder), when it was found, and when it was seen gone (None while it is there)."""

    path: str
    found_ms: Long
    removed_ms: Long | None = None

    @model_validator(mode="after")
    def _check_path(self) -> HeldObject:
        parts = self.path.split("/")
        if not self.path or self.path.startswith("/") or any(part in ("", ".", "..") for part in parts):
            raise ValueError(f"held object path {self.path!r} is not a path inside the partition's folder")
        return self


class ErasureRequest(_Frozen):
    """A request to forget a key (``compaction forget``): every record of the key below ``tombstone_offset``, the
    tombstone appended for it, must be gone from the live log by ``deadline_ms``, and from every object the erasure
    grace period after it.

    It is *pending* until a pass commits a log whose live segments hold no such record (``rewritten_ms``, in
    version ``rewritten_version``), and *gone* once no object under the partition's folders holds one
    (``completed_ms``, set by gc). ``held`` lists the objects found holding one and when each went.
    """

    key_sha256: str
    tombstone_offset: NonNegativeLong
    requested_ms: Long
    deadline_ms: Long
    rewritten_ms: Long | None = None
    rewritten_version: PositiveLong | None = None
    completed_ms: Long | None = None
    held: tuple[HeldObject, ...] = ()

    @model_validator(mode="after")
    def _check(self) -> ErasureRequest:
        if not KEY_DIGEST.match(self.key_sha256):
            raise ValueError(f"erasure request key_sha256 {self.key_sha256!r} is not 64 lowercase hex digits")
        if self.deadline_ms < self.requested_ms:
            raise ValueError(
                f"erasure request {self.key_sha256[:12]}: deadline_ms {self.deadline_ms} is before "
                f"requested_ms {self.requested_ms}"
            )
        if (self.rewritten_ms is None) != (self.rewritten_version is None):
            raise ValueError(f"erasure request {self.key_sha256[:12]}: rewritten_ms and rewritten_version go together")
        if self.completed_ms is not None and self.rewritten_ms is None:
            raise ValueError(f"erasure request {self.key_sha256[:12]} is completed but was never rewritten")
        return self

    @property
    def state(self) -> Literal["pending", "rewritten", "gone"]:
        if self.completed_ms is not None:
            return "gone"
        return "pending" if self.rewritten_ms is None else "rewritten"

    @property
    def ident(self) -> tuple[str, int]:
        """What tells two requests apart: the key's digest and the tombstone's offset."""
        return self.key_sha256, self.tombstone_offset

    def overdue(self, now_ms: int, grace_ms: int) -> bool:
        """Late at ``now_ms``: still pending past its deadline (no pass carried it out in time), or not yet physically
        gone ``grace_ms`` (the erasure grace period, which readers of older versions get) past it."""
        if self.state == "pending":
            return now_ms > self.deadline_ms
        return self.state == "rewritten" and now_ms > min(LONG_MAX, self.deadline_ms + grace_ms)


class WriterInfo(_Frozen):
    """Who published a version: the tool, the run (one id per command or job run), what it did and when.

    ``commit_id`` is unique per attempt, so a writer whose PUT had an unknown outcome can tell whether the
    version that exists now is its own.
    """

    id: str
    run_id: str
    operation: Literal["append", "clean", "generate", "forget", "erasure", "create"]
    time_ms: Long
    commit_id: str


class Manifest(_Frozen):
    """One committed version of a partition's log."""

    format_version: Literal[1] = 1
    topic: str
    partition: int = Field(ge=0, le=MAX_PARTITION)
    version: int = Field(ge=1)
    log_start_offset: NonNegativeLong
    log_end_offset: NonNegativeLong
    last_stable_offset: NonNegativeLong
    first_dirty_offset: NonNegativeLong
    # The cleaner's promise that below first_dirty_offset no two competing records share a key (true after
    # every pass); a later pass then only compares clean keys the dirty section has.
    clean_keys_unique: bool = False
    # The time (`now`) of the last pass that decided the cleaned range, and the earliest delete horizon
    # still to come among the records it kept there: the next tombstone purge is due then. (Records whose
    # horizon had passed and that it kept are guarded by stale records beyond that range.)
    last_clean_ms: Long | None = None
    next_horizon_ms: Long | None = None
    open_transactions: dict[NonNegativeLong, NonNegativeLong] = Field(default_factory=dict)  # producer id: 1st offset
    # Each producer's last batch as Kafka's producer state keeps it: from the appends, whatever a pass removed since
    # (a pass drops only the producers that have expired). None in a version written before the log kept it: then
    # its segments' own summaries.
    producers: tuple[ProducerState, ...] | None = None
    segments: tuple[SegmentMeta, ...] = ()
    # Requests to forget a key (compaction forget), pending until physically done (and kept a while after).
    erasures: tuple[ErasureRequest, ...] = ()
    # Streaming writes this log took: per streaming query's id, the last micro-batch it committed here (carried by
    # every later commit), so that a batch replayed after a crash finds itself and commits nothing twice.
    streams: dict[str, NonNegativeLong] = Field(default_factory=dict)
    writer: WriterInfo

    @model_validator(mode="after")
    def _check(self) -> Manifest:
        problem = topic_name_problem(self.topic)
        if problem:
            raise ValueError(f"topic name {self.topic!r} {problem}")
        if self.version > MAX_VERSION:
            raise ValueError(f"version {self.version} does not fit a 20-digit manifest name (at most {MAX_VERSION})")
        previous = None
        for segment in self.segments:
            if previous is not None and segment.base_offset < previous.next_offset:
                raise ValueError(
                    f"segment {segment.path} starts at {segment.base_offset} but the previous segment "
                    f"{previous.path} ends at {previous.next_offset}: segments must be in offset order and "
                    "must not overlap"
                )
            previous = segment
        if self.log_start_offset > self.log_end_offset:
            raise ValueError(f"log_start_offset {self.log_start_offset} is past the log end {self.log_end_offset}")
        if self.segments and self.log_end_offset < self.segments[-1].next_offset:
            raise ValueError(
                f"log_end_offset {self.log_end_offset} is below the last segment's "
                f"next_offset {self.segments[-1].next_offset}"
            )
        if self.last_stable_offset > self.log_end_offset:
            raise ValueError(f"last_stable_offset {self.last_stable_offset} is past the log end {self.log_end_offset}")
        paths = [s.path for s in self.segments]
        if len(set(paths)) != len(paths):
            raise ValueError("a segment path is listed twice")
        requests = [r.ident for r in self.erasures]
        if len(set(requests)) != len(requests):
            raise ValueError("an erasure request (key digest and tombstone offset) is listed twice")
        for request in self.erasures:
            if request.tombstone_offset >= self.log_end_offset:
                raise ValueError(
                    f"erasure request {request.key_sha256[:12]} names its tombstone at offset "
                    f"{request.tombstone_offset}, at or past the log end {self.log_end_offset}"
                )
            if request.rewritten_version is not None and request.rewritten_version > self.version:
                raise ValueError(
                    f"erasure request {request.key_sha256[:12]} was rewritten in version "
                    f"{request.rewritten_version}, after this version {self.version}"
                )
        return self

    @property
    def producer_state(self) -> dict[int, ProducerState]:
        """Each producer's last batch, by producer id (:attr:`producers`, or its segments' in a version that has
        none)."""
        if self.producers is None:
            return producer_state(self.segments)
        return {p.producer_id: p for p in self.producers}

    def expired_producers(self, expiration_ms: int, now_ms: int) -> tuple[tuple[int, int], ...]:
        """The producers that have expired at ``now_ms`` (Kafka: no transaction open, and ``now - lastTimestamp >=
        producer.id.expiration.ms``), each as (producer id, its last batch's last offset)."""
        return tuple(
            (pid, last.last_offset)
            for pid, last in sorted(self.producer_state.items())
            if pid not in self.open_transactions and now_ms - last.max_timestamp >= expiration_ms
        )

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self.segments)

    def to_json(self) -> bytes:
        return self.model_dump_json(indent=1).encode()


def _problem(err: ValidationError) -> str:
    """The first rule a manifest breaks, and where: `` at segments.0.path: segment path ... is not ...``."""
    first = err.errors()[0]
    location = ".".join(str(part) for part in first.get("loc", ()))
    reason = first.get("msg", str(err)).removeprefix("Value error, ")
    return f"{f' at {location}' if location else ''}: {reason}"


def parse_manifest(data: bytes, where: str) -> Manifest:
    """Parse and validate a manifest; any problem becomes a CorruptManifestError naming ``where``."""
    try:
        return Manifest.model_validate_json(data)
    except ValidationError as err:
        if err.errors()[0].get("type") == "json_invalid":
            raise CorruptManifestError(f"manifest {where} is not valid JSON{_problem(err)}") from err
        raise CorruptManifestError(f"manifest {where} is invalid{_problem(err)}") from err


def new_manifest(where: str, **fields: Any) -> Manifest:
    """A manifest to commit, from its fields; any problem becomes an InvalidManifestError naming ``where``."""
    try:
        return Manifest(**fields)
    except ValidationError as err:
        raise InvalidManifestError(f"the change would commit an invalid manifest {where}{_problem(err)}") from err
