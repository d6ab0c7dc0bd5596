"""An offline log cleaner: Kafka's log-compaction guarantees for segment stores on object storage.

Vocabulary (Kafka's where it has a word; one word per concept, and every identifier in this package uses these
words; a range ``[a, b)`` includes ``a`` and excludes ``b``):

The log

- **segment**: an immutable object holding the records of the offset range ``[base_offset, next_offset)``
  (offsets inside may have gaps). Its **format** (:class:`SegmentFormat`) is Parquet or Kafka's record batches.
- **manifest**: one committed version of a partition's log: its live segments in offset order plus
  ``log_start_offset``, ``last_stable_offset`` and the checkpoint. Versions are published with an exclusive
  create (a **commit**); the highest version is the current log.
- **log end offset**: the ``next_offset`` of the last segment (exclusive).
- **checkpoint** / ``first_dirty_offset``: the first offset not yet cleaned; only a commit moves it.
- **clean section**: ``[log_start_offset, first_dirty_offset)``; **dirty section**:
  ``[first_dirty_offset, log_end_offset)``.
- **active segment**: the last segment; never cleaned unless it counts as **rolled** (its first record is
  older than ``min(segment.ms, max.compaction.lag.ms)``, or an erasure request's tombstone lies in it).
- **first uncleanable offset**: ``min(active base, last_stable_offset, base of the first dirty segment
  newer than now - min.compaction.lag.ms)`` rounded down to a segment boundary (exclusive end of cleaning).
- **cleanable**: the part of the dirty section below the first uncleanable offset,
  ``[first_dirty_offset, first_uncleanable_offset)``.
- **uncleanable partition**: one that cannot be cleaned in this pass (unreadable manifest, corrupt
  segment), reported with its reason.
- **tombstone**: a keyed record whose value is null. **horizon** means only its **delete horizon**
  (``delete_horizon_ms``), stamped by the first pass that keeps it (``now + delete.retention.ms``); a pass with
  ``now >= horizon`` removes it. (``now - min.compaction.lag.ms`` is the compaction lag's bound, not a horizon.)
- **marker**: a transaction control record (commit or abort).
- **deletion vector**: the offsets of a segment that readers skip, an object beside it: how a pass removes a
  few records from a clean segment without rewriting it.

A pass

- **pass**: one run of the cleaner over a store: the plan, then for each selected partition the winner search,
  the verdicts, the layout and the new objects, then one commit per partition (Kafka's ``doClean``).
- **plan**: the pass's choice, a pure function of the manifests, the configuration and ``now``
  (:class:`CompactionPlan`, one :class:`PartitionPlan` per partition: :class:`Selected`, :class:`Skipped` or
  :class:`Uncleanable`): a **decision** (:class:`Decision`: clean, skip or uncleanable) with its reasons and, to
  clean, the range (``LogToClean``); ``compaction plan`` prints it. "Decision" is this word only.
- **key range**: the keys of a split partition that a hash of their bytes puts together; a partition too large for
  one task is cleaned as key ranges, a task each (``task.max.records``).
- **winner search**: finding each key's **winner**, the greatest of its records that compete under the
  strategy: with Arrow in a task (:mod:`compaction.winners`), or Spark SQL's window or aggregate
  (:class:`WinnerSearch`). Its setting keeps its user-facing name, ``dedupe.plan`` (``--plan``), the one "plan"
  that is not the pass's.
- **verdict**: what a pass decides of one record: kept, or dropped with its reason (:mod:`compaction.rules`);
  a segment's verdicts are counted in its :class:`~compaction.clean.layout.SegmentCounts` and, for a stage that
  applies them elsewhere, listed in the store. To **decide** is to reach the verdicts.
- **layout**: which objects a pass writes from the verdicts (:func:`compaction.clean.layout.lay_out`): a
  segment that loses nothing stays, a clean one that loses a few gets a deletion vector, the others are
  **rewritten**: a **rewrite** is a new segment of the survivors of one or more adjacent segments (merged up
  to ``segment.bytes``), which replaces them at the commit.

No code below the command line reads the clock: ``now`` is always an argument.

The package is laid out as its architecture (``docs/architecture.md``): :mod:`compaction.store` (the store:
storage, formats, manifests and commits), :mod:`compaction.clean` (choosing and cleaning partitions),
:mod:`compaction.read` (reading the clean log at a version, for every tool downstream), and the application
edge (:mod:`compaction.cli`, :mod:`compaction.job`, :mod:`compaction.config`, :mod:`compaction.report`).

The public API is written once, as the imports under ``TYPE_CHECKING`` below: type checkers read them, and at run
time ``__all__`` and the names themselves come from the same lines (read from this file's source), each loaded on
first use, so that importing the package does not start the JVM libraries a store command never needs.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:  # the public API: one name per import, from the module that defines it
    from compaction.clean.cleaner import Cleaner, plan_store
    from compaction.clean.planner import CompactionPlan, Decision, PartitionPlan, Selected, Skipped, Uncleanable
    from compaction.clean.results import CleanerStats, PartitionResult, RunReport, Status
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
    from compaction.rules import Strategy, WinnerSearch
    from compaction.store import DeletionVector, Manifest, SegmentFormat, SegmentMeta, Store, TopicPartition, Writer
    from compaction.store.gc import collect_store
    from compaction.store.segment import records
    from compaction.store.verify import verify
    from compaction.synthetic import GenerateSpec, generate


def _public_api() -> dict[str, str]:
    """Each public name and its module: the imports under ``TYPE_CHECKING`` above, read from this file's source
    through the module's loader (so that a zip on --py-files or a Spark Connect artifact serves it too)."""
    try:
        source = inspect.getsource(sys.modules[__name__])
    except OSError as err:  # an installation of compiled files only
        raise ImportError(
            "compaction's public API is read from the source of compaction/__init__.py, which this "
            "installation does not hold: install the wheel of `make dist`"
        ) from err
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return {
                alias.name: str(imported.module)
                for imported in node.body
                if isinstance(imported, ast.ImportFrom)
                for alias in imported.names
            }
    raise ImportError("compaction/__init__.py has no `if TYPE_CHECKING:` block of public names")


_API = _public_api()
__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'compaction' has no attribute {name!r}")
    value = getattr(importlib.import_module(_API[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
