"""One publish: a topic at pinned manifest versions becomes the table's next Iceberg snapshot, committed through the
catalog's check, with the store told (pins) which versions the table's snapshots hold.

A snapshot is the whole log at its versions: a data manifest (every live Parquet segment, ``EXISTING`` when the
previous snapshot had it, ``ADDED`` otherwise, ``DELETED`` for the segments gone) and a delete manifest (the
position delete files, reused while their segment, deletion vector and log start are unchanged). Its summary names
each partition's manifest version (``compaction.versions``), so ``compaction read --version`` and Iceberg time
travel meet. The commit requires the table's ``main`` to still be the snapshot it was built on; a publisher that
loses that race builds again from the new state, bounded by :data:`MAX_ATTEMPTS`.

The store's gc must not collect what a retained snapshot reads: before the commit, each partition's version is
pinned for the new snapshot (:mod:`compaction.store.pins`); after it, the pins of the snapshots expired go. A
snapshot is expired once the one that replaced it has been current longer than gc's grace period, so a reader
that started on it has had that long to finish, as gc gives a superseded manifest version; one that reads a
version from before an erasure (which its pin would keep from gc) once it has been current longer than the
erasure grace period.
"""

from __future__ import annotations

import itertools
import json
import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    DataFile,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
    write_manifest,
    write_manifest_list,
)
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, SnapshotSummaryCollector, Summary, update_snapshot_summaries
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    AssertTableUUID,
    RemoveSnapshotsUpdate,
    SetSnapshotRefUpdate,
    TableRequirement,
    TableUpdate,
)

from compaction.errors import PublishConflictError, PublishError
from compaction.publish.files import data_file, deleted_positions, deletes_key, location, position_delete_file
from compaction.read.files import PartitionFiles, pinned_manifest
from compaction.store import Store, TopicPartition
from compaction.store.pins import Pin

#: The snapshot summary property naming each partition's manifest version: ``{"0": 12, "1": 9}``.
VERSIONS_PROPERTY = "compaction.versions"
MAX_ATTEMPTS = 8
AVRO_CODEC: Literal["deflate"] = "deflate"


@dataclass(frozen=True)
class PublishResult:
    """What a publish did: the table's current snapshot afterwards and whether this publish committed it."""

    table: str
    snapshot_id: int | None
    versions: dict[int, int]
    committed: bool  # False: the table already held these versions (nothing new, perhaps snapshots expired)
    expired: list[int] = field(default_factory=list)
    data_files: int = 0
    delete_files: int = 0
    attempts: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "snapshot_id": self.snapshot_id,
            "committed": self.committed,
            "versions": {str(p): v for p, v in self.versions.items()},
            "expired": self.expired,
            "data_files": self.data_files,
            "delete_files": self.delete_files,
            "attempts": self.attempts,
        }


def snapshot_versions(snapshot: Snapshot | None) -> dict[int, int] | None:
    """The manifest version of each partition a published snapshot reads (None for a snapshot of no publish)."""
    text = snapshot.summary.get(VERSIONS_PROPERTY) if snapshot is not None and snapshot.summary else None
    return {int(p): int(v) for p, v in json.loads(text).items()} if text else None


def commit_snapshot(
    store: Store,
    table_loader: Callable[[], Table],
    parts: Sequence[PartitionFiles],
    *,
    wall_ms: int,
    grace_ms: int,
    max_attempts: int = MAX_ATTEMPTS,
    erased: Mapping[int, int] | None = None,
    erasure_grace_ms: int | None = None,
) -> PublishResult:
    """Publish ``parts`` (the topic at pinned versions) as the next snapshot of the table ``table_loader()`` loads
    afresh, expiring snapshots past the grace period (see :func:`expirable` for ``erased``); retries a lost race
    from the new state."""
    versions = {part.tp.partition: part.version for part in parts}
    grace = Grace(grace_ms, grace_ms if erasure_grace_ms is None else erasure_grace_ms, dict(erased or {}))
    for attempt in range(1, max_attempts + 1):
        table: Table = table_loader()
        try:
            result = _publish_once(store, table, parts, versions, wall_ms, grace)
        except CommitFailedException as err:
            if attempt == max_attempts:
                raise PublishConflictError(
                    f"Iceberg table {'.'.join(table.name())}: another writer committed before "
                    f"each of {max_attempts} attempts ({err})"
                ) from err
            time.sleep(random.uniform(0, 0.05 * attempt))  # jitter, so that racing publishers part
            continue
        return PublishResult(**{**result.__dict__, "attempts": attempt})
    raise AssertionError("unreachable")  # pragma: no cover


@dataclass(frozen=True)
class Grace:
    """How long a replaced snapshot is kept for its readers: ``grace_ms``, or ``erasure_ms`` for one that reads a
    partition at a version older than ``erased[partition]`` (the version its log is clean of an erased key from)."""

    grace_ms: int
    erasure_ms: int
    erased: dict[int, int]

    def of(self, snapshot: Snapshot) -> int:
        versions = snapshot_versions(snapshot) or {}
        holds = any(versions.get(p, since) < since for p, since in self.erased.items())
        return min(self.grace_ms, self.erasure_ms) if holds else self.grace_ms


def _publish_once(
    store: Store, table: Table, parts: Sequence[PartitionFiles], versions: dict[int, int], wall_ms: int, grace: Grace
) -> PublishResult:
    name = ".".join(table.name())
    current = table.current_snapshot()
    expired = expirable(table, wall_ms, grace)
    requirements: list[TableRequirement] = [
        AssertTableUUID(uuid=table.metadata.table_uuid),
        AssertRefSnapshotId.model_validate(
            {"ref": MAIN_BRANCH, "snapshot-id": current.snapshot_id if current else None}
        ),
    ]
    updates: list[TableUpdate] = []
    built: _Built | None = None
    if snapshot_versions(current) != versions:
        built = _build(store, table, parts, versions, wall_ms)
        updates += [
            AddSnapshotUpdate(snapshot=built.snapshot),
            SetSnapshotRefUpdate.model_validate(
                {"ref-name": MAIN_BRANCH, "type": SnapshotRefType.BRANCH, "snapshot-id": built.snapshot.snapshot_id}
            ),
        ]
    if expired:
        updates.append(RemoveSnapshotsUpdate.model_validate({"snapshot-ids": [s.snapshot_id for s in expired]}))
    if not updates:
        return PublishResult(name, current.snapshot_id if current else None, versions, committed=False)
    try:
        committed = table.catalog.commit_table(table, tuple(requirements), tuple(updates)).metadata
    except CommitFailedException:
        if built is not None:  # certainly not committed: nothing reads what this attempt wrote
            built.discard(store, table.io)
        raise
    _unpin_released(store, table, committed, parts, wall_ms, grace.grace_ms)
    _remove_expired_files(table, committed, expired)
    snapshot_id = built.snapshot.snapshot_id if built else current.snapshot_id if current else None
    return PublishResult(
        name,
        snapshot_id,
        versions,
        committed=built is not None,
        expired=[s.snapshot_id for s in expired],
        data_files=built.data_files if built else 0,
        delete_files=built.delete_files if built else 0,
    )


def expirable(table: Table, wall_ms: int, grace: Grace | int) -> list[Snapshot]:
    """The snapshots replaced as current more than the grace period ago (measured on the wall clock): their readers
    have had gc's grace period to finish. One that reads versions from before an erasure goes after the erasure
    grace period instead: its pin would otherwise keep gc from removing the erased records for as long as it is
    retained. The current snapshot is never among them."""
    grace = grace if isinstance(grace, Grace) else Grace(grace, grace, {})
    current = table.metadata.current_snapshot_id
    ordered = sorted(table.metadata.snapshots, key=lambda s: s.sequence_number or 0)  # the order of commits
    return [
        s
        for s, successor in itertools.pairwise(ordered)
        if s.snapshot_id != current and successor.timestamp_ms + grace.of(s) <= wall_ms
    ]


def holder(table: Table, snapshot_id: int) -> str:
    """The pin holder name of one snapshot of this table (its uuid, so that two tables never share pins)."""
    return f"iceberg-{table.metadata.table_uuid.hex}-{snapshot_id}"


@dataclass
class _Built:
    """A snapshot written but not committed: its files in the table's location and its pins in the store."""

    snapshot: Snapshot
    written: list[str]
    pins: list[tuple[TopicPartition, Pin]]
    data_files: int
    delete_files: int

    def discard(self, store: Store, io: FileIO) -> None:
        for tp, pin in self.pins:
            store.objects.unpin(tp, pin)
        for path in self.written:
            io.delete(path)


class _DeleteManifestWriter(ManifestWriterV2):
    """A v2 manifest of delete files (pyiceberg 0.12 writes data manifests only)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


@dataclass
class _Changes:
    """What a new snapshot holds against its parent, per manifest content: the parent's entries it keeps, the files
    it adds, and the parent's entries still in ``previous`` once every live file is placed (those it removes)."""

    previous: dict[ManifestContent, dict[str, ManifestEntry]]
    reusable: dict[str, ManifestEntry]  # the parent's position delete files, by what they delete (deletes_key)
    kept: dict[ManifestContent, list[ManifestEntry]] = field(
        default_factory=lambda: {ManifestContent.DATA: [], ManifestContent.DELETES: []}
    )
    added: dict[ManifestContent, list[DataFile]] = field(
        default_factory=lambda: {ManifestContent.DATA: [], ManifestContent.DELETES: []}
    )

    @classmethod
    def against(cls, parent: Snapshot | None, io: FileIO) -> _Changes:
        previous: dict[ManifestContent, dict[str, ManifestEntry]] = {
            ManifestContent.DATA: {},
            ManifestContent.DELETES: {},
        }
        for manifest in parent.manifests(io) if parent else []:
            previous[manifest.content].update((e.data_file.file_path, e) for e in manifest.fetch_manifest_entry(io))
        return cls(
            previous,
            {path.rsplit("/", 1)[-1].split("-", 1)[0]: e for path, e in previous[ManifestContent.DELETES].items()},
        )

    def files(self, content: ManifestContent) -> int:
        """How many files of ``content`` the snapshot holds."""
        return len(self.kept[content]) + len(self.added[content])

    @property
    def only_appends(self) -> bool:
        return (
            not self.previous[ManifestContent.DATA]
            and not self.added[ManifestContent.DELETES]
            and not self.previous[ManifestContent.DELETES]
        )


def _build(
    store: Store, table: Table, parts: Sequence[PartitionFiles], versions: dict[int, int], wall_ms: int
) -> _Built:
    snapshot_id = uuid.uuid4().int >> 65  # a positive Long, as pyiceberg draws them
    parent = table.current_snapshot()
    changes = _Changes.against(parent, table.io)
    built = _Built(Snapshot.model_validate({"snapshot-id": snapshot_id, "manifest-list": ""}), [], [], 0, 0)
    try:
        for part in parts:
            _place(store, table, part, changes, built.written)
        manifests, collector = _write_manifests(table, snapshot_id, changes, built.written)
        summary = Summary(
            Operation.APPEND if changes.only_appends else Operation.OVERWRITE,
            **collector.build(),
            **{VERSIONS_PROPERTY: json.dumps({str(p): v for p, v in versions.items()})},
        )
        built.snapshot = _write_snapshot(table, parent, manifests, summary, wall_ms, built)
        built.data_files = changes.files(ManifestContent.DATA)
        built.delete_files = changes.files(ManifestContent.DELETES)
        _pin(store, table, parts, built)
    except BaseException:
        built.discard(store, table.io)
        raise
    return built


def _place(store: Store, table: Table, part: PartitionFiles, changes: _Changes, written: list[str]) -> None:
    """Each live file of ``part`` as a data file, the parent's or added, and what a reader skips in it as a position
    delete file: the parent's while its segment, deletion vector and log start are unchanged, else a new one."""
    metadata, io = table.metadata, table.io
    folder = table.location_provider().new_data_location(f"partition={part.tp.partition}")
    for live in part.files:
        path = location(store, f"{part.tp.prefix}/{live.segment.path}")
        entry = changes.previous[ManifestContent.DATA].pop(path, None)
        if entry is not None:
            changes.kept[ManifestContent.DATA].append(entry)
            target = entry.data_file
        else:
            target = data_file(store, part.tp, live, metadata)
            changes.added[ManifestContent.DATA].append(target)
        key = deletes_key(live, part.log_start_offset)
        old = changes.reusable.get(key)
        if old is not None and old.data_file.file_path in changes.previous[ManifestContent.DELETES]:
            changes.kept[ManifestContent.DELETES].append(
                changes.previous[ManifestContent.DELETES].pop(old.data_file.file_path)
            )
            continue
        positions = deleted_positions(store, part.tp, live, part.log_start_offset)
        if len(positions):
            delete_file = position_delete_file(io, folder, key, target, positions, metadata.default_spec_id)
            written.append(delete_file.file_path)
            changes.added[ManifestContent.DELETES].append(delete_file)


def _write_manifests(
    table: Table, snapshot_id: int, changes: _Changes, written: list[str]
) -> tuple[list[ManifestFile], SnapshotSummaryCollector]:
    """A data manifest and a delete manifest (each when it has an entry): entries kept as ``EXISTING``, files
    added as ``ADDED``, the parent's others as ``DELETED``; and the summary of what changed."""
    metadata, io = table.metadata, table.io
    manifests: list[ManifestFile] = []
    collector = SnapshotSummaryCollector()
    for content in (ManifestContent.DATA, ManifestContent.DELETES):
        removed = list(changes.previous[content].values())
        if not (changes.kept[content] or changes.added[content] or removed):
            continue
        path = table.location_provider().new_metadata_location(f"{uuid.uuid4()}-m{len(manifests)}.avro")
        written.append(path)
        writer = (
            write_manifest(2, metadata.spec(), metadata.schema(), io.new_output(path), snapshot_id, AVRO_CODEC)
            if content == ManifestContent.DATA
            else _DeleteManifestWriter(metadata.spec(), metadata.schema(), io.new_output(path), snapshot_id, AVRO_CODEC)
        )
        with writer:
            for entry in changes.kept[content]:
                writer.existing(entry)
            for new in changes.added[content]:
                writer.add(
                    ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id, data_file=new)
                )
                collector.add_file(new, metadata.schema(), metadata.spec())
            for entry in removed:
                writer.delete(entry)
                collector.remove_file(entry.data_file, metadata.schema(), metadata.spec())
        manifests.append(writer.to_manifest_file())
    return manifests, collector


def _write_snapshot(
    table: Table, parent: Snapshot | None, manifests: list[ManifestFile], summary: Summary, wall_ms: int, built: _Built
) -> Snapshot:
    """The snapshot of ``manifests`` (with the id ``built`` holds, its manifest list written and listed in
    ``built``), its ``summary`` naming each partition's version."""
    snapshot_id, written = built.snapshot.snapshot_id, built.written
    metadata = table.metadata
    list_path = table.location_provider().new_metadata_location(f"snap-{snapshot_id}-0-{uuid.uuid4()}.avro")
    written.append(list_path)
    sequence_number = metadata.next_sequence_number()
    with write_manifest_list(
        2,
        table.io.new_output(list_path),
        snapshot_id,
        parent.snapshot_id if parent else None,
        sequence_number,
        AVRO_CODEC,
    ) as list_writer:
        list_writer.add_manifests(manifests)
    summary = update_snapshot_summaries(summary, parent.summary if parent else None)
    return Snapshot.model_validate(
        {
            "snapshot-id": snapshot_id,
            "sequence-number": sequence_number,
            "parent-snapshot-id": parent.snapshot_id if parent else None,
            # Engines (Iceberg's Java library) refuse a table whose snapshot log goes back
            # in time: never before the table's last update.
            "timestamp-ms": max(wall_ms, metadata.last_updated_ms),
            "manifest-list": list_path,
            "summary": summary,
            "schema-id": metadata.current_schema_id,
        }
    )


def _pin(store: Store, table: Table, parts: Sequence[PartitionFiles], built: _Built) -> None:
    """Pin each partition's version for the snapshot, then check it is still there: a gc that pruned it before the
    pin was written would leave the snapshot reading objects it may delete."""
    snapshot_id = built.snapshot.snapshot_id
    description = f"Iceberg snapshot {snapshot_id} of table {'.'.join(table.name())} ({table.metadata.table_uuid})"
    for part in parts:
        built.pins.append((part.tp, store.objects.pin(part.tp, part.version, holder(table, snapshot_id), description)))
    for part in parts:
        if part.version not in store.versions(part.tp):
            pinned_manifest(store, part.tp, part.version)  # raises VersionNotFoundError naming what can be read
            raise PublishError(f"version {part.version} of partition {part.tp} went while it was being published")


def _unpin_released(
    store: Store, table: Table, committed: TableMetadata, parts: Sequence[PartitionFiles], wall_ms: int, grace_ms: int
) -> None:
    """Delete this table's pins of snapshots it no longer retains: expired ones, and those of attempts that never
    committed (a publisher that crashed), once older than the grace period (a publisher may be about to commit)."""
    prefix = f"iceberg-{committed.table_uuid.hex}-"
    for part in parts:
        for pin in store.objects.pins(part.tp):
            suffix = pin.holder.removeprefix(prefix)
            if suffix == pin.holder or not suffix.isascii() or not suffix.isdigit():
                continue  # another table's pin, or not a publisher's
            snapshot_id = int(suffix)
            if committed.snapshot_by_id(snapshot_id) is not None:
                continue
            expired = table.metadata.snapshot_by_id(snapshot_id) is not None  # retained before this commit
            if expired or (pin.written_ms is not None and pin.written_ms + grace_ms <= wall_ms):
                store.objects.unpin(part.tp, pin)


def _remove_expired_files(table: Table, committed: TableMetadata, expired: Sequence[Snapshot]) -> None:
    """Delete the manifest lists, manifests and position delete files only expired snapshots read. Data files are
    the store's segments and never deleted here (gc collects them once no pin holds them)."""
    if not expired:
        return
    io, root = table.io, table.location().rstrip("/") + "/"

    def files(snapshot: Snapshot) -> set[str]:
        found = {snapshot.manifest_list}
        for manifest in snapshot.manifests(io):
            found.add(manifest.manifest_path)
            if manifest.content == ManifestContent.DELETES:
                found |= {e.data_file.file_path for e in manifest.fetch_manifest_entry(io)}
        return found

    live = set().union(*(files(s) for s in committed.snapshots))
    for path in set().union(*(files(s) for s in expired)) - live:
        if path.startswith(root):
            io.delete(path)
