"""Typed exceptions: one class per thing that can go wrong, each naming the object involved."""

from __future__ import annotations

# The exit codes of every command and of the job (docs/commands.md), defined here once.
EXIT_OK = 0
EXIT_FAILED = 1  # the command failed, verify found problems, or an internal error (a bug) stopped some partition
EXIT_USAGE = 2  # argparse's own code for bad arguments
EXIT_PARTIAL = 3  # some partitions failed on their data or the store (the others were committed)
EXIT_INVALID = 4  # invalid configuration or input; nothing was changed


class CompactionError(Exception):
    """Raised for any failure the product itself detects (the base of every error below)."""


class StoreError(CompactionError):
    """Raised when the segment store cannot be read or written as the store format requires."""


class StoreNotFoundError(StoreError):
    """Raised when a topic or partition asked for does not exist in the store."""


class VersionNotFoundError(StoreNotFoundError):
    """Raised when a manifest version asked for is not readable: gc removed it (or its objects), or it was never
    committed; the message names the version and the versions that can be read."""


class MissingObjectError(StoreError):
    """Raised when a manifest references an object that is not in the store."""


class CorruptManifestError(StoreError):
    """Raised when a manifest is not valid JSON or breaks the manifest format's rules."""


class InvalidManifestError(StoreError):
    """Raised when a writer's change would commit a manifest that breaks the manifest format's rules: a bug
    in the writer, never a conflict."""


class CorruptSegmentError(StoreError):
    """Raised when a segment object cannot be read as a segment (truncated, unreadable, bad checksum)."""


class CorruptBatchError(CorruptSegmentError):
    """Raised when a Kafka record batch cannot be read (bad CRC, framing, codec or magic); names the object and
    the batch's base offset."""

    def __init__(self, message: str, *, where: str, base_offset: int | None) -> None:
        super().__init__(message)
        self.where = where
        self.base_offset = base_offset


class SegmentChangedError(CorruptSegmentError):
    """Raised when a segment's rows differ between two reads of one pass (its object changed under the pass)."""


class SegmentSchemaError(CorruptSegmentError):
    """Raised when a segment's columns do not match the segment format (a missing, extra or mistyped column)."""


class InvalidArgumentError(CompactionError):
    """Raised when an argument is unusable: a topic or partition that breaks Kafka's naming rules, a time
    outside Kafka's Long range or in the future."""


class InvalidRecordsError(CompactionError):
    """Raised when records given to append are unusable (bad columns, unordered offsets, bad control types)."""


class OffsetOverlapError(StoreError):
    """Raised when appended offsets overlap offsets the partition's log already holds."""


class CommitConflictError(StoreError):
    """Raised when a commit lost the race for its manifest version and its change no longer applies."""


class ConfigError(CompactionError):
    """Raised when configuration is invalid; the message uses Kafka's wording where Kafka has one."""


class SparkStartError(CompactionError):
    """Raised when Spark cannot start: no Java, a JVM that exits at once, a master that does not answer; the
    message names the cause and what to do."""


class PayloadVersionError(CompactionError):
    """Raised when a task or result shipped between the driver and executors was built by another version of
    this library (the driver and the executors run different builds)."""


class PublishError(CompactionError):
    """Raised when a topic cannot be published as an Iceberg table as it is: a live Kafka ``.log`` segment (no
    engine reads one as a data file), a store other engines cannot reach, or a table that is not the topic's."""


class PublishConflictError(CompactionError):
    """Raised when a publish lost the race for the table's next snapshot more often than it retries."""


class CatalogError(CompactionError):
    """Raised when an Iceberg catalog cannot be reached or refuses a request (names the catalog and the table)."""
