"""Garbage collection: prunes old manifest versions and deletes objects no manifest references.

Safety rules (SPEC §2, §5): only names inside the partition's own ``segments/`` and ``_manifests/`` folders
are deleted; an object is deleted only when no retained manifest references it and it is older than
the grace period; a manifest version is pruned only when it is beyond the retained count *and* was
superseded more than the grace period ago, so a reader that started on it has had the grace period to
finish, and an object it alone referenced was replaced at least that long ago. A version that a pin holds (an
Iceberg snapshot published from the store, :mod:`compaction.store.pins`) is never pruned, whatever its age, nor
are the versions after it, so that the retained versions stay continuous.

Erasure requests (:mod:`compaction.store.erasure`) shorten the wait for what holds an erased key: once a pass has
carried a request out, the objects that still hold a record it erases (superseded segments, orphans) go after
``erasure_grace_ms`` instead of the grace period, and so do the versions that reference them, however few
versions are kept: their readers must fit in that time. A pin still holds its version. When nothing under the
partition's folders holds such a record any more, gc commits the request as complete (operation ``erasure``),
with the objects it found and when each went.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compaction.errors import StoreError
from compaction.store import erasure
from compaction.store.commit import Writer
from compaction.store.log import Store
from compaction.store.manifest import (
    MANIFEST_DIR,
    MANIFEST_NAME,
    SEGMENT_DIR,
    ErasureRequest,
    Manifest,
    manifest_name,
)
from compaction.store.names import TopicPartition
from compaction.store.pins import Pin, describe_pin, list_pins
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
    erased_objects: list[str] = field(default_factory=list)  # of the deleted objects, those holding an erased key
    erasure_waits: list[str] = field(default_factory=list)  # why an erasure request is not complete yet
    erasures_completed: list[str] = field(default_factory=list)  # the key digests of the requests it completed


@dataclass
class _Collection:
    """One partition's collection under way: the manifest versions gc read (each with when its object was
    written), the pins, its clock and settings, and its result so far."""

    store: Store
    tp: TopicPartition
    written: dict[int, int | None]
    manifests: dict[int, Manifest]
    pins: list[Pin]
    wall_ms: int
    erasure_grace: int
    dry_run: bool
    result: GcResult

    @property
    def versions(self) -> list[int]:
        return sorted(self.written)

    def superseded_since(self, version: int, grace: int) -> bool:
        """Whether ``version``'s successor was written ``grace`` ago or more (by the wall clock)."""
        successor = self.written.get(version + 1)
        return successor is not None and successor + grace <= self.wall_ms


def collect_garbage(
    store: Store,
    tp: TopicPartition,
    *,
    wall_ms: int,
    grace_ms: int = DEFAULT_GRACE_MS,
    keep_versions: int = DEFAULT_KEEP_VERSIONS,
    dry_run: bool = False,
    erasure_grace_ms: int | None = None,
) -> GcResult:
    """Collect one partition. Raises StoreError (and deletes nothing) if any retained manifest is unreadable.

    The grace period is measured on the wall clock only (``wall_ms``, read once by the caller): objects by
    their modification time, a manifest version by when its successor was written (that object's
    modification time), never by the ``now`` a run was given, which may be a backfill's. What holds a key an
    erasure request erases waits ``erasure_grace_ms`` instead (default: the grace period).
    """
    if keep_versions < 1:
        raise ValueError("keep_versions must be at least 1")
    erasure_grace = grace_ms if erasure_grace_ms is None else erasure_grace_ms
    result = GcResult(str(tp))
    written = {
        int(m.group(1)): e.mtime_ms
        for e in store.storage.list_dir(f"{tp.prefix}/{MANIFEST_DIR}")
        if (m := MANIFEST_NAME.match(e.name))
    }
    versions = sorted(written)
    manifests = {v: store.manifest(tp, v) for v in versions}  # unreadable -> StoreError, nothing deleted
    pins = list_pins(store.storage, tp)
    pinned = {pin.version for pin in pins}
    result.pinned_versions = sorted(pinned & set(versions))
    part = _Collection(store, tp, written, manifests, pins, wall_ms, erasure_grace, dry_run, result)
    superseded_since = part.superseded_since

    prunable = []
    for version in versions[: max(0, len(versions) - keep_versions)]:
        # Retained versions stay continuous (readers and verify rely on it): a pin keeps the versions after it too.
        if not superseded_since(version, grace_ms) or version in pinned:
            break
        prunable.append(version)

    requests = erasure.open_requests(manifests[versions[-1]]) if versions else ()
    holdings = erasure.Holdings.of(store.storage, tp, requests) if requests else None
    suspects = holdings.suspects if holdings else set()
    if holdings:
        prunable = _erasure_prunable(part, suspects, prunable)
    retained = [manifests[v] for v in versions if v not in set(prunable)]
    referenced = {seg.path for m in retained for seg in m.segments}
    referenced |= {seg.deletes.path for m in retained for seg in m.segments if seg.deletes is not None}

    # Prune manifests before deleting objects: a crash in between leaves only unreferenced objects behind.
    for version in prunable:
        if not dry_run:
            store.storage.delete(f"{tp.prefix}/{MANIFEST_DIR}/{manifest_name(version)}")
        result.pruned_versions.append(version)

    present: set[str] = set()
    for folder, is_ours in ((SEGMENT_DIR, is_store_object), (MANIFEST_DIR, lambda name: False)):
        for entry in store.storage.list_dir(f"{tp.prefix}/{folder}"):
            rel = f"{folder}/{entry.name}"
            present.add(rel)
            if entry.is_dir or rel in referenced or (folder == MANIFEST_DIR and not entry.name.startswith(TEMP_PREFIX)):
                continue
            if not (is_ours(entry.name) or entry.name.startswith(TEMP_PREFIX)):
                result.unknown_objects.append(rel)
                continue
            grace = erasure_grace if rel in suspects else grace_ms
            if entry.mtime_ms is None or entry.mtime_ms + grace > wall_ms:
                result.waiting_objects += 1
                continue
            if not dry_run:
                store.storage.delete(f"{tp.prefix}/{rel}")
            result.deleted_objects.append(rel)
            result.deleted_bytes += entry.size
            if rel in suspects:
                result.erased_objects.append(rel)
    if holdings:
        _erasure_progress(part, holdings, present)
    return result


def _erasure_prunable(part: _Collection, suspects: set[str], prunable: list[int]) -> list[int]:
    """The versions to prune so that no retained version references an object holding an erased key: every
    version up to the last that does, once each was superseded ``erasure_grace`` ago and none is pinned (the newest
    is never pruned: an object it references is reported)."""
    store, tp, versions, manifests, pins, result = (
        part.store,
        part.tp,
        part.versions,
        part.manifests,
        part.pins,
        part.result,
    )
    erasure_grace, superseded_since = part.erasure_grace, part.superseded_since
    holding = [
        v
        for v in versions
        if any(s.path in suspects or (s.deletes and s.deletes.path in suspects) for s in manifests[v].segments)
    ]
    if holding and holding[-1] == versions[-1]:
        result.erasure_waits.append(
            f"the newest version {versions[-1]} references an object that holds (or may hold) an erased key"
        )
        holding = holding[:-1]
    if not holding:
        return prunable
    upto = versions[: versions.index(holding[-1]) + 1]
    held = sorted({pin.version for pin in pins} & set(upto))
    if held:
        names = ", ".join(describe_pin(store.storage, tp, p) for p in pins if p.version == held[0])
        result.erasure_waits.append(
            f"version {held[0]} holds an erased key and is pinned by {names}: gc keeps it "
            "until the pin goes (a publish expires the snapshot once replaced for "
            "erasure.grace.ms)"
        )
        return prunable
    if not all(superseded_since(v, erasure_grace) for v in upto):
        result.erasure_waits.append(
            f"versions up to {upto[-1]} hold an erased key: kept until superseded for "
            "erasure.grace.ms, for their readers"
        )
        return prunable
    return upto if len(upto) > len(prunable) else prunable


def _erasure_progress(part: _Collection, holdings: erasure.Holdings, present: set[str]) -> None:
    """Record what became of each open request; a request is complete when nothing left holds its key and its
    rewrite was committed ``erasure_grace`` ago (a pass or reader that started before it has finished)."""
    store, tp, written, wall_ms, result = part.store, part.tp, part.written, part.wall_ms, part.result
    erasure_grace, dry_run = part.erasure_grace, part.dry_run
    deleted = set(result.deleted_objects)
    # gc lists and deletes in segments/ and _manifests/ only: what lies elsewhere under the partition stays.
    present = present | {
        path for path in holdings.findings if path.rpartition("/")[0] not in (SEGMENT_DIR, MANIFEST_DIR)
    }

    def settled(request: ErasureRequest) -> bool:
        version = request.rewritten_version
        rewritten_at = written.get(version) if version is not None else None
        # A version gc already pruned was superseded more than the grace period ago.
        return version not in written or (rewritten_at is not None and rewritten_at + erasure_grace <= wall_ms)

    for request in holdings.requests:
        left = holdings.left_for(request, present - deleted)
        if left:
            reasons = [holdings.doubtful.get(path, f"{path} holds it") for path in left[:3]]
            result.erasure_waits.append(
                f"key {request.key_sha256[:12]}: {len(left)} object(s) left: " + "; ".join(reasons)
            )
        elif not settled(request):
            result.erasure_waits.append(f"key {request.key_sha256[:12]}: rewritten less than erasure.grace.ms ago")
    updated = erasure.progress(holdings, present, deleted, wall_ms=wall_ms, settled=settled)
    result.erasures_completed = sorted(r.key_sha256 for r in updated.values() if r.completed_ms is not None)
    if not dry_run:
        erasure.record_progress(store, tp, updated, wall_ms=wall_ms, writer=Writer(id="compaction-gc"))


def collect_store(
    store: Store, partitions: list[TopicPartition], **kwargs: int | bool
) -> tuple[list[GcResult], dict[str, StoreError]]:
    """Collect each partition; a partition that fails is reported and left untouched, the others go on."""
    results, failures = [], {}
    for tp in partitions:
        try:
            results.append(collect_garbage(store, tp, **kwargs))  # type: ignore[arg-type]
        except StoreError as err:
            failures[str(tp)] = err
    return results, failures
