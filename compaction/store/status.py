"""Per-partition summaries of a store's manifests (what ``compaction status`` prints)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from compaction.store.manifest import Manifest


@dataclass(frozen=True)
class PartitionStatus:
    """One partition at its newest version; ``dirty_bytes`` counts segments from the one holding the checkpoint."""

    partition: str
    version: int
    format: str  # the segments' format: parquet, kafka, mixed (both), or - (no segment)
    segments: int
    size_bytes: int
    records: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int
    first_dirty_offset: int
    dirty_bytes: int
    tombstones: int
    last_operation: str
    last_commit_ms: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def partition_status(manifest: Manifest) -> PartitionStatus:
    dirty = sum(s.size_bytes for s in manifest.segments if s.next_offset > manifest.first_dirty_offset)
    formats = {s.format for s in manifest.segments}
    return PartitionStatus(
        partition=manifest.name,
        version=manifest.version,
        format=formats.pop() if len(formats) == 1 else "mixed" if formats else "-",
        segments=len(manifest.segments),
        size_bytes=manifest.size_bytes,
        records=sum(s.live_records for s in manifest.segments),
        log_start_offset=manifest.log_start_offset,
        log_end_offset=manifest.log_end_offset,
        last_stable_offset=manifest.last_stable_offset,
        first_dirty_offset=manifest.first_dirty_offset,
        dirty_bytes=dirty,
        tombstones=sum(s.tombstone_count for s in manifest.segments),
        last_operation=manifest.writer.operation,
        last_commit_ms=manifest.writer.time_ms,
    )
