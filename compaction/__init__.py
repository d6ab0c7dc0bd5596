"""An offline log cleaner: Kafka's log-compaction guarantees for segment stores on object storage.

Vocabulary (Kafka's; every identifier in this package uses these words):

- **segment**: an immutable object holding the records of the offset range ``[base_offset, next_offset)``
  (``next_offset`` exclusive; offsets inside may have gaps).
- **manifest**: one committed version of a partition's log: its live segments in offset order plus
  ``log_start_offset``, ``last_stable_offset`` and the cleaner checkpoint. Versions are published with an
  exclusive create; the highest version is the current log.
- **log end offset**: the ``next_offset`` of the last segment (exclusive).
- **checkpoint** / ``first_dirty_offset``: the first offset not yet cleaned.
- **clean section**: ``[log_start_offset, first_dirty_offset)``; **dirty section**:
  ``[first_dirty_offset, log_end_offset)``.
- **active segment**: the last segment; never cleaned unless it counts as rolled (its first record is
  older than ``min(segment.ms, max.compaction.lag.ms)``).
- **first uncleanable offset**: ``min(active base, last_stable_offset, base of the first dirty segment
  newer than min.compaction.lag.ms)`` rounded down to a segment boundary (exclusive end of cleaning).
- **cleanable**: the part of the dirty section below the first uncleanable offset.
- **uncleanable partition**: one that cannot be cleaned in this run (unreadable manifest, corrupt
  segment), reported with its reason.
- **tombstone**: a keyed record whose value is null. Its **delete horizon** (``delete_horizon_ms``) is
  stamped by the first pass that keeps it (``now + delete.retention.ms``); a pass with ``now >= horizon``
  removes it.
- **marker**: a transaction control record (commit or abort).

No code below the command line reads the clock: ``now`` is always an argument.
"""

from compaction.errors import (
    CommitConflictError,
    CompactionError,
    ConfigError,
    CorruptManifestError,
    CorruptSegmentError,
    InvalidManifestError,
    InvalidRecordsError,
    MissingObjectError,
    OffsetOverlapError,
    PlanError,
    SegmentSchemaError,
    StoreError,
    StoreNotFoundError,
)

__all__ = [
    "CommitConflictError",
    "CompactionError",
    "ConfigError",
    "CorruptManifestError",
    "CorruptSegmentError",
    "InvalidManifestError",
    "InvalidRecordsError",
    "MissingObjectError",
    "OffsetOverlapError",
    "PlanError",
    "SegmentSchemaError",
    "StoreError",
    "StoreNotFoundError",
]
