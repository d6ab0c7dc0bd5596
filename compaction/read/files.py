"""Resolving a topic at a version: each partition's live segment files, deletion vectors and offset bounds.

This is all a reader needs to know of a partition's log, and all another engine needs to be wired up
(``compaction files --json``): read each file's records with offsets in ``[log_start_offset,
log_end_offset)``, skipping the offsets its deletion vector lists. Globbing a segment folder instead
reads superseded segments that wait for gc, and ignores deletion vectors and the log start.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from compaction.errors import MissingObjectError, StoreNotFoundError, VersionNotFoundError
from compaction.store import Manifest, SegmentMeta, Store, TopicPartition

#: A version for every partition (``12``) or per partition (``{0: 12, 3: 7}``; the others at their newest).
Versions = int | Mapping[int, int] | None


@dataclass(frozen=True)
class LiveFile:
    """One live segment of a pinned version: its object, offset range ``[base_offset, next_offset)`` and the
    deletion vector whose offsets readers skip (``None`` when it has none)."""

    segment: SegmentMeta
    url: str  # the object's full name (a local path or s3://...), for other engines
    deletes_url: str | None

    def to_dict(self) -> dict[str, Any]:
        s = self.segment
        deletes = None
        if s.deletes is not None:
            deletes = {
                "url": self.deletes_url,
                "path": s.deletes.path,
                "count": s.deletes.count,
                "size_bytes": s.deletes.size_bytes,
                "checksum": s.deletes.checksum,
            }
        return {
            "url": self.url,
            "path": s.path,
            "base_offset": s.base_offset,
            "next_offset": s.next_offset,
            "record_count": s.record_count,
            "live_records": s.live_records,
            "size_bytes": s.size_bytes,
            "checksum": s.checksum,
            "max_timestamp": s.max_timestamp,
            "deletes": deletes,
        }


@dataclass(frozen=True)
class PartitionFiles:
    """A partition at one manifest version: what a reader of that version reads, to the end, whatever commits
    after it (gc keeps a superseded version's objects for its grace period)."""

    tp: TopicPartition
    manifest: Manifest
    files: tuple[LiveFile, ...]

    @property
    def version(self) -> int:
        return self.manifest.version

    @property
    def log_start_offset(self) -> int:
        return self.manifest.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.manifest.log_end_offset

    @property
    def live_records(self) -> int:
        """Records of the live segments that their deletion vectors leave (records below the log start
        included: the manifest does not count them apart)."""
        return sum(f.segment.live_records for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        m = self.manifest
        return {
            "topic": self.tp.topic,
            "partition": self.tp.partition,
            "version": m.version,
            "log_start_offset": m.log_start_offset,
            "log_end_offset": m.log_end_offset,
            "last_stable_offset": m.last_stable_offset,
            "first_dirty_offset": m.first_dirty_offset,
            "files": [f.to_dict() for f in self.files],
        }


def version_for(versions: Versions, partition: int) -> int | None:
    if versions is None or isinstance(versions, int):
        return versions
    return versions.get(partition)


def pinned_manifest(store: Store, tp: TopicPartition, version: int | None) -> Manifest:
    """The manifest of ``version`` (default: the newest); VersionNotFoundError names the readable versions
    when gc has removed it or it was never committed."""
    committed = store.versions(tp)
    if not committed:
        raise StoreNotFoundError(f"partition {store.describe(tp)} has no committed manifest")
    if version is None:
        version = committed[-1]
    elif version not in committed:
        raise _version_error(store, tp, version, committed)
    try:
        return store.manifest(tp, version)
    except MissingObjectError:  # pruned between the listing and the read
        raise _version_error(store, tp, version, store.versions(tp)) from None


def _version_error(
    store: Store, tp: TopicPartition, version: int, committed: list[int], during: str = ""
) -> VersionNotFoundError:
    readable = (
        f"the oldest readable version is {committed[0]} (the newest {committed[-1]})"
        if committed
        else "no version is readable"
    )
    if committed and version > committed[-1]:
        why = "was never committed"
    elif committed and version >= committed[0]:
        why = "is missing (manifest versions must be continuous: run verify)"
    else:
        why = f"was removed by gc{during}"
    return VersionNotFoundError(f"version {version} of partition {tp} in {store.url} {why}: {readable}")


def version_gone(store: Store, tp: TopicPartition, version: int, err: MissingObjectError) -> Exception:
    """What a read of a pinned version raises when one of its objects is missing: VersionNotFoundError if gc
    pruned the version meanwhile (a reader slower than gc's grace), else the missing object itself."""
    committed = store.versions(tp)
    if version in committed:
        return err
    return _version_error(store, tp, version, committed, " while it was being read (it outlived gc's grace)")


def live_file(store: Store, tp: TopicPartition, segment: SegmentMeta) -> LiveFile:
    deletes = store.describe(tp, segment.deletes.path) if segment.deletes else None
    return LiveFile(segment, store.describe(tp, segment.path), deletes)


def partition_files(store: Store, manifest: Manifest) -> PartitionFiles:
    """The manifest's live files: segments wholly below the log start (waiting for the next run to drop them)
    are left out, as no reader sees their records."""
    tp = TopicPartition(manifest.topic, manifest.partition)
    files = tuple(live_file(store, tp, s) for s in manifest.segments if s.next_offset > manifest.log_start_offset)
    return PartitionFiles(tp, manifest, files)


def topic_partitions(store: Store, topic: str, partitions: int | Iterable[int] | None) -> list[TopicPartition]:
    """The partitions asked for (all of the topic's by default), each checked to exist."""
    if partitions is None:
        found = store.partitions(topic)
        if not found:
            raise StoreNotFoundError(f"topic {topic} has no partitions in store {store.url}")
        return [TopicPartition(topic, p) for p in found]
    wanted = [partitions] if isinstance(partitions, int) else sorted(set(partitions))
    return [TopicPartition(topic, p) for p in wanted]


def resolve(
    store: Store, topic: str, partitions: int | Iterable[int] | None = None, version: Versions = None, threads: int = 16
) -> list[PartitionFiles]:
    """Each partition's live files at ``version`` (default: its newest), in partition order.

    The manifests are read once, here: everything read afterwards comes from the versions pinned now.
    """
    tps = topic_partitions(store, topic, partitions)

    def one(tp: TopicPartition) -> PartitionFiles:
        return partition_files(store, pinned_manifest(store, tp, version_for(version, tp.partition)))

    if len(tps) == 1:
        return [one(tps[0])]
    with ThreadPoolExecutor(max_workers=min(threads, len(tps))) as pool:
        return list(pool.map(one, tps))
