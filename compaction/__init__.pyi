# The public API of ``compaction``, written once: type checkers read these imports (``X as X``: a stub's
# re-exports), and compaction/__init__.py derives ``__all__`` and the lazily loaded names from them (so: imports
# from this package's modules only, ``from .module import Name as Name``).

from .clean.cleaner import Cleaner as Cleaner, plan_store as plan_store
from .clean.outcome import (
    CleanerStats as CleanerStats,
    PartitionResult as PartitionResult,
    RunReport as RunReport,
    Status as Status,
)
from .clean.planner import CompactionPlan as CompactionPlan, Decision as Decision, PartitionPlan as PartitionPlan
from .clean.rules import Plan as Plan, Strategy as Strategy
from .clean.settings import CleanerSettings as CleanerSettings, TopicConfig as TopicConfig
from .config import Settings as Settings
from .errors import (
    CommitConflictError as CommitConflictError,
    CompactionError as CompactionError,
    ConfigError as ConfigError,
    CorruptManifestError as CorruptManifestError,
    CorruptSegmentError as CorruptSegmentError,
    InvalidManifestError as InvalidManifestError,
    InvalidRecordsError as InvalidRecordsError,
    MissingObjectError as MissingObjectError,
    OffsetOverlapError as OffsetOverlapError,
    SegmentSchemaError as SegmentSchemaError,
    StoreError as StoreError,
    StoreNotFoundError as StoreNotFoundError,
    VersionNotFoundError as VersionNotFoundError,
)
from .read.export import SnapshotResult as SnapshotResult, snapshot as snapshot
from .read.files import LiveFile as LiveFile, PartitionFiles as PartitionFiles
from .read.filters import RecordFilter as RecordFilter
from .read.history import VersionEntry as VersionEntry, history as history
from .read.scan import Scan as Scan, read_batches as read_batches, read_table as read_table, scan as scan
from .store import (
    DeletionVector as DeletionVector,
    Manifest as Manifest,
    SegmentMeta as SegmentMeta,
    Store as Store,
    TopicPartition as TopicPartition,
    Writer as Writer,
)
from .store.gc import collect_store as collect_store
from .store.segment import records as records
from .store.verify import verify as verify
from .synthetic import GenerateSpec as GenerateSpec, generate as generate

__version__: str
__all__: list[str]
