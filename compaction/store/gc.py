"""Garbage collection: prunes old manifest versions and deletes objects no manifest references.

Safety rules (SPEC §2, §5): only names inside the partition's own ``segments/`` and ``_manifests/`` folders
are deleted; an object is deleted only when no retained manifest references it and it is older than
the grace period; a manifest version is pruned only when it is beyond the retained count *and* was
superseded more than the grace period ago, so a reader that started on it has had the grace period to
finish, and an object it alone referenced was replaced at least that long ago. A version that a pin holds (an
Iceberg snapshot published from the store, :mod:`compaction.store.pins`) is never pruned, whatever its age, nor
are the versions after it, so that the retained versions stay continuous.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compaction.errors import StoreError
from compaction.store.log import Store
from compaction.store.manifest import MANIFEST_DIR, MANIFEST_NAME, SEGMENT_DIR, manifest_name
from compaction.store.names import TopicPartition
from compaction.store.pins import list_pins
from compaction.store.storage import TEMP_PREFIX
from compaction.store.verify import is_store_object

DEFAULT_GRACE_MS = 86_400_000
DEFAULT_KEEP_VERSIONS = 10


@dataclass
class GcResult:
    """What one partition's collection did (or, on a dry run, would do)."""

    partition: str
    pruned_versions: list[int] = field(default_factory=list)
    pinned_versions: list[int] = field(default_factory=list)  # kept, however old, for a reader outside the store
    deleted_objects: list[str] = field(default_factory=list)
    deleted_bytes: int = 0
    waiting_objects: int = 0
    unknown_objects: list[str] = field(default_factory=list)


def collect_garbage(store: Store, tp: TopicPartition, *, wall_ms: int, grace_ms: int = DEFAULT_GRACE_MS,
                    keep_versions: int = DEFAULT_KEEP_VERSIONS, dry_run: bool = False) -> GcResult:
    """Collect one partition. Raises StoreError (and deletes nothing) if any retained manifest is unreadable.

    The grace period is measured on the wall clock only (``wall_ms``, read once by the caller): objects by
    their modification time, a manifest version by when its successor was written (that object's
    modification time), never by the ``now`` a run was given, which may be a backfill's.
    """
    if keep_versions < 1:
        raise ValueError("keep_versions must be at least 1")
    result = GcResult(str(tp))
    written = {int(m.group(1)): e.mtime_ms for e in store.storage.list_dir(f"{tp.prefix}/{MANIFEST_DIR}")
               if (m := MANIFEST_NAME.match(e.name))}
    versions = sorted(written)
    manifests = {v: store.manifest(tp, v) for v in versions}  # unreadable -> StoreError, nothing deleted
    pinned = {pin.version for pin in list_pins(store.storage, tp)}
    result.pinned_versions = sorted(pinned & set(versions))
    prunable = []
    for version in versions[: max(0, len(versions) - keep_versions)]:
        superseded = written.get(version + 1)
        # Retained versions stay continuous (readers and verify rely on it): a pin keeps the versions after it too.
        if superseded is None or superseded + grace_ms > wall_ms or version in pinned:
            break
        prunable.append(version)
    retained = [manifests[v] for v in versions if v not in set(prunable)]
    referenced = {seg.path for m in retained for seg in m.segments}
    referenced |= {seg.deletes.path for m in retained for seg in m.segments if seg.deletes is not None}

    # Prune manifests before deleting objects: a crash in between leaves only unreferenced objects behind.
    for version in prunable:
        if not dry_run:
            store.storage.delete(f"{tp.prefix}/{MANIFEST_DIR}/{manifest_name(version)}")
        result.pruned_versions.append(version)

    for folder, is_ours in ((SEGMENT_DIR, is_store_object), (MANIFEST_DIR, lambda name: False)):
        for entry in store.storage.list_dir(f"{tp.prefix}/{folder}"):
            rel = f"{folder}/{entry.name}"
            if entry.is_dir or rel in referenced or (folder == MANIFEST_DIR and not entry.name.startswith(TEMP_PREFIX)):
                continue
            if not (is_ours(entry.name) or entry.name.startswith(TEMP_PREFIX)):
                result.unknown_objects.append(rel)
                continue
            if entry.mtime_ms is None or entry.mtime_ms + grace_ms > wall_ms:
                result.waiting_objects += 1
                continue
            if not dry_run:
                store.storage.delete(f"{tp.prefix}/{rel}")
            result.deleted_objects.append(rel)
            result.deleted_bytes += entry.size
    return result


def collect_store(store: Store, partitions: list[TopicPartition], **kwargs: int | bool
                  ) -> tuple[list[GcResult], dict[str, StoreError]]:
    """Collect each partition; a partition that fails is reported and left untouched, the others go on."""
    results, failures = [], {}
    for tp in partitions:
        try:
            results.append(collect_garbage(store, tp, **kwargs))  # type: ignore[arg-type]
        except StoreError as err:
            failures[str(tp)] = err
    return results, failures
