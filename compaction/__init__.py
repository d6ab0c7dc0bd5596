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

The package is laid out as its architecture (``docs/architecture.md``): :mod:`compaction.store` (the store:
storage, formats, manifests and commits), :mod:`compaction.clean` (choosing and cleaning partitions),
:mod:`compaction.read` (reading the clean log at a version, for every tool downstream), and the application
edge (:mod:`compaction.cli`, :mod:`compaction.job`, :mod:`compaction.config`,
:mod:`compaction.report`). The names below are the public API; they load on first use, so that importing
the package does not start the JVM libraries a store command never needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: Public name -> the module that defines it.
_API = {
    "CommitConflictError": "compaction.errors",
    "CompactionError": "compaction.errors",
    "ConfigError": "compaction.errors",
    "CorruptManifestError": "compaction.errors",
    "CorruptSegmentError": "compaction.errors",
    "InvalidManifestError": "compaction.errors",
    "InvalidRecordsError": "compaction.errors",
    "MissingObjectError": "compaction.errors",
    "OffsetOverlapError": "compaction.errors",
    "PlanError": "compaction.errors",
    "SegmentSchemaError": "compaction.errors",
    "StoreError": "compaction.errors",
    "StoreNotFoundError": "compaction.errors",
    "VersionNotFoundError": "compaction.errors",
    "DeletionVector": "compaction.store",
    "Manifest": "compaction.store",
    "SegmentMeta": "compaction.store",
    "Store": "compaction.store",
    "TopicPartition": "compaction.store",
    "Writer": "compaction.store",
    "verify": "compaction.store.verify",
    "collect_store": "compaction.store.gc",
    "records": "compaction.store.segment",
    "Plan": "compaction.clean.rules",
    "Strategy": "compaction.clean.rules",
    "CleanerSettings": "compaction.clean.settings",
    "TopicConfig": "compaction.clean.settings",
    "CompactionPlan": "compaction.clean.planner",
    "Decision": "compaction.clean.planner",
    "PartitionPlan": "compaction.clean.planner",
    "Cleaner": "compaction.clean.cleaner",
    "plan_store": "compaction.clean.cleaner",
    "CleanerStats": "compaction.clean.outcome",
    "PartitionResult": "compaction.clean.outcome",
    "RunReport": "compaction.clean.outcome",
    "Status": "compaction.clean.outcome",
    "Scan": "compaction.read.scan",
    "scan": "compaction.read.scan",
    "read_table": "compaction.read.scan",
    "read_batches": "compaction.read.scan",
    "RecordFilter": "compaction.read.filters",
    "PartitionFiles": "compaction.read.files",
    "LiveFile": "compaction.read.files",
    "VersionEntry": "compaction.read.history",
    "history": "compaction.read.history",
    "SnapshotResult": "compaction.read.export",
    "forget": "compaction.erasure",
    "attest": "compaction.erasure",
    "erasure_status": "compaction.erasure",
    "snapshot": "compaction.read.export",
    "Settings": "compaction.config",
    "GenerateSpec": "compaction.synthetic",
    "generate": "compaction.synthetic",
}

__all__ = [
    "Cleaner",
    "CleanerSettings",
    "CleanerStats",
    "CommitConflictError",
    "CompactionError",
    "CompactionPlan",
    "ConfigError",
    "CorruptManifestError",
    "CorruptSegmentError",
    "Decision",
    "DeletionVector",
    "GenerateSpec",
    "InvalidManifestError",
    "InvalidRecordsError",
    "LiveFile",
    "Manifest",
    "MissingObjectError",
    "OffsetOverlapError",
    "PartitionFiles",
    "PartitionPlan",
    "PartitionResult",
    "Plan",
    "PlanError",
    "RecordFilter",
    "RunReport",
    "Scan",
    "SegmentMeta",
    "SegmentSchemaError",
    "Settings",
    "SnapshotResult",
    "Status",
    "Store",
    "StoreError",
    "StoreNotFoundError",
    "Strategy",
    "TopicConfig",
    "TopicPartition",
    "VersionEntry",
    "VersionNotFoundError",
    "Writer",
    "attest",
    "collect_store",
    "erasure_status",
    "forget",
    "generate",
    "history",
    "plan_store",
    "read_batches",
    "read_table",
    "records",
    "scan",
    "snapshot",
    "verify",
]

if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load lazily
    from compaction.clean.cleaner import Cleaner, plan_store
    from compaction.clean.outcome import CleanerStats, PartitionResult, RunReport, Status
    from compaction.clean.planner import CompactionPlan, Decision, PartitionPlan
    from compaction.clean.rules import Plan, Strategy
    from compaction.clean.settings import CleanerSettings, TopicConfig
    from compaction.config import Settings
    from compaction.erasure import attest, erasure_status, forget
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
        VersionNotFoundError,
    )
    from compaction.read.export import SnapshotResult, snapshot
    from compaction.read.files import LiveFile, PartitionFiles
    from compaction.read.filters import RecordFilter
    from compaction.read.history import VersionEntry, history
    from compaction.read.scan import Scan, read_batches, read_table, scan
    from compaction.store import DeletionVector, Manifest, SegmentMeta, Store, TopicPartition, Writer
    from compaction.store.gc import collect_store
    from compaction.store.segment import records
    from compaction.store.verify import verify
    from compaction.synthetic import GenerateSpec, generate


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'compaction' has no attribute {name!r}")
    value = getattr(importlib.import_module(_API[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
