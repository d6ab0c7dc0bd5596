"""Checks a store's invariants: manifests, object presence, sizes, checksums and offsets, and what pins hold."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import pairwise
from typing import cast

import pyarrow as pa
import pyarrow.compute as pc

from compaction.errors import CorruptSegmentError, StoreError
from compaction.store.claims import CLAIM_NAME
from compaction.store.handover import HANDOVER_NAMES
from compaction.store.log import Store
from compaction.store.manifest import (
    DELETES_NAME,
    MANIFEST_DIR,
    MANIFEST_NAME,
    SEGMENT_DIR,
    SEGMENT_NAME,
    Manifest,
    SegmentMeta,
)
from compaction.store.names import TopicPartition
from compaction.store.pins import PIN_DIR, Pin, describe_pin, list_pins
from compaction.store.segment import SEGMENT_SCHEMA, segment_stats, timestamp_stats
from compaction.store.storage import TEMP_PREFIX


@dataclass(frozen=True)
class Problem:
    """One broken invariant: where (a partition and an object, or the store) and what is wrong."""

    partition: str
    object: str
    message: str

    def __str__(self) -> str:
        return f"{self.partition}: {self.object}: {self.message}"


@dataclass(frozen=True)
class PartitionReport:
    partition: str
    version: int | None
    segments: int
    records: int
    orphans: int
    problems: tuple[Problem, ...]


def verify_partition(store: Store, tp: TopicPartition, check_data: bool = True) -> PartitionReport:
    """Check one partition; ``check_data`` also reads every live object (checksums, offsets, statistics)."""
    problems: list[Problem] = []

    def problem(obj: str, message: str) -> None:
        problems.append(Problem(str(tp), obj, message))

    versions = []
    for name in (e.name for e in store.storage.list_dir(f"{tp.prefix}/{MANIFEST_DIR}", detail=False)):
        match = MANIFEST_NAME.match(name)
        if match:
            versions.append(int(match.group(1)))
        elif not name.startswith(TEMP_PREFIX):
            problem(
                store.describe(tp, f"{MANIFEST_DIR}/{name}"), "is not named <20-digit version>.json: readers ignore it"
            )
    versions.sort()
    if not versions:
        problem(store.describe(tp), "partition folder has no committed manifest")
        return PartitionReport(str(tp), None, 0, 0, 0, tuple(problems))
    gaps = _gaps(versions)
    if gaps:
        problem(store.describe(tp, "_manifests"), f"manifest versions are not continuous: missing {gaps}")
    manifests: list[Manifest] = []
    for version in versions:
        try:
            manifests.append(store.manifest(tp, version))
        except StoreError as err:
            problem(f"version {version}", str(err))
    # A pinned version is read by another engine (an Iceberg snapshot): its loss is named with its holder.
    pins: dict[int, list[Pin]] = {}
    for pin in list_pins(store.storage, tp):
        pins.setdefault(pin.version, []).append(pin)
        if pin.version not in versions:
            problem(
                store.describe(tp, f"{PIN_DIR}/{pin.name}"),
                f"{_holder(store, tp, pin)} holds manifest version {pin.version}, which is missing",
            )

    def held(version: int) -> str:
        return "".join(f"; {_holder(store, tp, pin)} holds that version" for pin in pins.get(version, []))

    listing = {e.name: e for e in store.storage.list_dir(f"{tp.prefix}/{SEGMENT_DIR}")}
    referenced: set[str] = set()
    for manifest in manifests:
        for segment in manifest.segments:
            for rel, size in _objects(segment):
                referenced.add(rel)
                entry = listing.get(rel.rsplit("/", 1)[-1])
                if entry is None:
                    problem(
                        store.describe(tp, rel),
                        f"missing, but manifest version {manifest.version} references it{held(manifest.version)}",
                    )
                elif entry.size != size:
                    problem(
                        store.describe(tp, rel),
                        f"is {entry.size} bytes, manifest version {manifest.version} records {size}",
                    )
    latest = manifests[-1] if manifests and manifests[-1].version == versions[-1] else None
    records = 0
    if latest is not None:
        _check_offsets(latest, problem)
        if check_data:
            for segment in latest.segments:
                if segment.path.rsplit("/", 1)[-1] in listing:  # a missing object is reported above
                    records += _check_segment(store, tp, segment, latest.log_start_offset, problem)
        else:
            records = sum(s.live_records for s in latest.segments)
    orphans = sum(
        1 for name in listing if f"{SEGMENT_DIR}/{name}" not in referenced and not name.startswith(TEMP_PREFIX)
    )
    return PartitionReport(
        str(tp), versions[-1], len(latest.segments) if latest else 0, records, orphans, tuple(problems)
    )


def _gaps(versions: list[int], shown: int = 10) -> str:
    """The versions missing between sorted ``versions``, as ranges (``2, 5-99999999999999999998``): a gap may
    span most of the 20-digit version space, so it is never listed version by version."""
    gaps = [(low + 1, high - 1) for low, high in pairwise(versions) if high - low > 1]
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in gaps[:shown])
    return text + (f" and {len(gaps) - shown} more gap(s)" if len(gaps) > shown else "")


def _holder(store: Store, tp: TopicPartition, pin: Pin) -> str:
    try:
        return describe_pin(store.storage, tp, pin)
    except StoreError as err:
        return f"pin {pin.name} ({err})"


def _objects(segment: SegmentMeta) -> Iterable[tuple[str, int]]:
    yield segment.path, segment.size_bytes
    if segment.deletes is not None:
        yield segment.deletes.path, segment.deletes.size_bytes


def _check_offsets(manifest: Manifest, problem: Callable[[str, str], None]) -> None:
    where = f"manifest version {manifest.version}"
    if manifest.open_transactions:
        lso = min(manifest.open_transactions.values())
        if manifest.last_stable_offset != lso:
            problem(
                where,
                f"last_stable_offset {manifest.last_stable_offset} but the earliest open transaction starts at {lso}",
            )
    if manifest.first_dirty_offset > manifest.log_end_offset:
        problem(
            where,
            f"checkpoint {manifest.first_dirty_offset} is past the log end {manifest.log_end_offset} "
            "(the planner will reset it to the log start)",
        )


def _check_segment(
    store: Store, tp: TopicPartition, segment: SegmentMeta, log_start: int, problem: Callable[[str, str], None]
) -> int:
    name = store.describe(tp, segment.path)
    try:  # every record, deleted or not, read whole: its size, checksum and (a .log's) batches checked
        table = pa.Table.from_batches(list(store.objects.segment_rows(tp, segment)), schema=SEGMENT_SCHEMA)
    except CorruptSegmentError as err:
        problem(name, str(err))
        return 0
    except StoreError as err:
        problem(name, f"cannot be read: {err}")
        return 0
    offsets = table.column("offset")
    if table.num_rows:
        low, high = pc.min(offsets).as_py(), pc.max(offsets).as_py()
        if low < segment.base_offset or high >= segment.next_offset:
            problem(
                name, f"holds offsets [{low}, {high}] outside its range [{segment.base_offset}, {segment.next_offset})"
            )
        if table.num_rows > 1 and not pc.all(pc.greater(offsets[1:], offsets[:-1])).as_py():
            problem(name, "offsets are not strictly increasing")
    stats = segment_stats(table)
    for field in ("record_count", "tombstone_count", "keyless_count", "max_timestamp", "min_delete_horizon_ms"):
        if getattr(stats, field) != getattr(segment, field):
            problem(name, f"{field} is {getattr(stats, field)}, the manifest records {getattr(segment, field)}")
    live = table.num_rows
    if segment.deletes is not None:
        try:
            deleted = store.objects.read_deletes(tp, segment.deletes)
        except StoreError as err:
            problem(store.describe(tp, segment.deletes.path), str(err))
            return cast(int, live)
        if len(deleted) != segment.deletes.count:
            problem(
                store.describe(tp, segment.deletes.path),
                f"holds {len(deleted)} offsets, the manifest records {segment.deletes.count}",
            )
        present = pc.sum(pc.is_in(deleted, offsets)).as_py() or 0
        if present != len(deleted):
            problem(
                store.describe(tp, segment.deletes.path),
                f"deletes {len(deleted) - present} offset(s) the segment does not hold",
            )
        # The live figures describe what readers see: the store's rule of live rows.
        shown = table.filter(pa.array(store.objects.live_rows(tp, segment, offsets, log_start)))
        first, largest = timestamp_stats(shown.column("timestamp"))
        live_figures = {
            "live_min_delete_horizon_ms": pc.min(shown.column("delete_horizon_ms")).as_py(),
            "live_first_timestamp": first,
            "live_max_timestamp": largest,
        }
        for field, value in live_figures.items():
            recorded = getattr(segment.deletes, field)
            if value != recorded:
                problem(
                    store.describe(tp, segment.deletes.path),
                    f"{field} is {value} for the records left, the manifest records {recorded}",
                )
        live -= present
    return cast(int, live)


def verify(
    store: Store, partitions: Iterable[TopicPartition] | None = None, check_data: bool = True, threads: int = 8
) -> list[PartitionReport]:
    """Verify every partition (or the given ones); problems are returned, never raised."""
    partitions = list(partitions) if partitions is not None else store.topic_partitions()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(lambda tp: verify_partition(store, tp, check_data), partitions))


def is_store_object(name: str) -> bool:
    rel = f"{SEGMENT_DIR}/{name}"
    return bool(
        SEGMENT_NAME.match(rel)
        or DELETES_NAME.match(rel)
        or CLAIM_NAME.match(rel)
        or any(n.match(rel) for n in HANDOVER_NAMES)
    )
