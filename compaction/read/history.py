"""A partition's committed versions, each with what its commit changed (``compaction history``).

A version's figures compare it with the version before: ``in`` counts the live records and bytes of the
segments it replaced or gave a new deletion vector (as they were), ``out`` those it added (as they are).
An append has nothing in; a clean pass has both; a commit that moved the log start forward (retention)
says so. The first version kept after gc pruned older ones has no figures: its predecessor is gone.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from compaction.read.files import topic_partitions
from compaction.store import Manifest, SegmentMeta, Store, TopicPartition


@dataclass(frozen=True)
class VersionEntry:
    """One committed version of a partition and its change against the version before (None: unknown)."""

    partition: str
    version: int
    time_ms: int
    operation: str  # append, clean, generate, as the writer recorded it; "+retention" when the log start moved
    writer: str
    run_id: str
    records_in: int | None
    records_out: int | None
    bytes_in: int | None
    bytes_out: int | None
    log_start_offset: int
    log_end_offset: int
    first_dirty_offset: int
    live_records: int
    segments: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _change(before: Manifest | None, after: Manifest) -> tuple[int, int, int, int]:
    """``(records in, records out, bytes in, bytes out)`` of the commit that made ``after``."""
    old: dict[str, SegmentMeta] = {s.path: s for s in before.segments} if before else {}
    new = {s.path: s for s in after.segments}
    gone = [s for path, s in old.items() if new.get(path) != s]
    came = [s for path, s in new.items() if old.get(path) != s]
    return (
        sum(s.live_records for s in gone),
        sum(s.live_records for s in came),
        sum(s.live_size_bytes for s in gone),
        sum(s.live_size_bytes for s in came),
    )


def entry(after: Manifest, before: Manifest | None, known: bool) -> VersionEntry:
    """``after``'s entry; ``known`` is False when the version before it is no longer there to compare with."""
    records_in = records_out = bytes_in = bytes_out = None
    if known:
        records_in, records_out, bytes_in, bytes_out = _change(before, after)
    operation: str = after.writer.operation
    if before is not None and after.log_start_offset > before.log_start_offset:
        operation += "+retention"
    return VersionEntry(
        partition=after.name,
        version=after.version,
        time_ms=after.writer.time_ms,
        operation=operation,
        writer=after.writer.id,
        run_id=after.writer.run_id,
        records_in=records_in,
        records_out=records_out,
        bytes_in=bytes_in,
        bytes_out=bytes_out,
        log_start_offset=after.log_start_offset,
        log_end_offset=after.log_end_offset,
        first_dirty_offset=after.first_dirty_offset,
        live_records=sum(s.live_records for s in after.segments),
        segments=len(after.segments),
    )


def partition_history(store: Store, tp: TopicPartition) -> list[VersionEntry]:
    """Every version the partition still has, oldest first."""
    versions = store.versions(tp)
    with ThreadPoolExecutor(max_workers=8) as pool:
        manifests = list(pool.map(lambda v: store.manifest(tp, v), versions))
    entries = []
    for index, manifest in enumerate(manifests):
        before = manifests[index - 1] if index and versions[index - 1] == manifest.version - 1 else None
        entries.append(entry(manifest, before, known=before is not None or manifest.version == 1))
    return entries


def history(store: Store | str, topic: str, partitions: int | Iterable[int] | None = None) -> list[VersionEntry]:
    """The versions of a topic's partitions (all, or those given), by partition, oldest first."""
    opened = store if isinstance(store, Store) else Store.open(store)
    return [e for tp in topic_partitions(opened, topic, partitions) for e in partition_history(opened, tp)]
