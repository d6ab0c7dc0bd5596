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
edge (:mod:`compaction.cli`, :mod:`compaction.job`, :mod:`compaction.config`, :mod:`compaction.report`).

The public API is written once, as the imports of the stub beside this file (``__init__.pyi``): type checkers
read them, and ``__all__`` and the names themselves come from them at run time, each loaded on first use, so
that importing the package does not start the JVM libraries a store command never needs.
"""

from __future__ import annotations

import ast
import importlib
import importlib.resources
from typing import Any

__version__ = "0.1.0"


def _public_api() -> dict[str, str]:
    """Each public name and the module that defines it, from the imports of the stub (read as a package resource,
    so that it is found in the zip a Spark Connect server's workers import this package from, too)."""
    stub = importlib.resources.files(__name__).joinpath("__init__.pyi").read_text(encoding="utf-8")
    return {alias.name: f"{__name__}.{node.module}" for node in ast.parse(stub).body
            if isinstance(node, ast.ImportFrom) for alias in node.names}


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
