"""The commit protocol: a partition's manifest versions, and the only code that publishes the next one.

A commit publishes version N+1 with an exclusive create. A create whose outcome is unknown is resolved by
reading the version back. A writer that loses the race re-reads the newest version and rebuilds its change
on top of it (a rebase), retrying with jittered backoff, or fails with :class:`CommitConflictError`.
Every call touches only the partition's own manifests.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from compaction.errors import (
    CommitConflictError,
    CorruptManifestError,
    MissingObjectError,
    StoreError,
    StoreNotFoundError,
)
from compaction.store.manifest import (
    MANIFEST_DIR,
    MANIFEST_NAME,
    MAX_VERSION,
    ErasureRequest,
    HeldObject,
    Manifest,
    SegmentMeta,
    manifest_name,
    new_manifest,
    parse_manifest,
)
from compaction.store.names import TopicPartition
from compaction.store.storage import Storage

MAX_COMMIT_ATTEMPTS = 64

#: ``build(latest)`` returns the new log state (Manifest fields) for the version after ``latest``.
Build = Callable[[Manifest | None], Mapping[str, Any]]


@dataclass(frozen=True)
class Writer:
    """Identifies who commits: the tool and the run (one run id per command invocation or job run)."""

    id: str = "compaction"
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)


@dataclass(frozen=True)
class Erased:
    """A pass's report on one erasure request it carried out: no live segment holds a record of the key below
    the tombstone any more; ``held`` names the objects it replaced because they did."""

    key_sha256: str
    tombstone_offset: int
    held: tuple[str, ...] = ()


@dataclass(frozen=True)
class Replacement:
    """A cleaner's change to one partition: replace live segments by new ones, move checkpoint and log start.

    It applies on top of any newer version in which every replaced segment is still live and unchanged
    and nobody else moved the checkpoint or the log start: that is the rebase rule.
    """

    removed: tuple[SegmentMeta, ...]
    added: tuple[SegmentMeta, ...]
    expected_first_dirty_offset: int
    first_dirty_offset: int
    expected_log_start_offset: int
    log_start_offset: int
    clean_keys_unique: bool | None = None  # None: as in the version it applies to
    last_clean_ms: int | None = None  # with next_horizon_ms; None: as in the version it applies to
    next_horizon_ms: int | None = None
    erased: tuple[Erased, ...] = ()  # erasure requests this change carries out (their tombstones were in its range)
    time_ms: int | None = None  # when (the pass's now), for the requests it carries out
    # Producers the pass found expired, as (producer id, its last batch's last offset): dropped from the producer
    # state unless they wrote again since (as Kafka removes expired producers).
    expired_producers: tuple[tuple[int, int], ...] = ()

    def apply(self, latest: Manifest | None, name: str) -> dict[str, Any]:
        if latest is None:
            raise CommitConflictError(f"partition {name} has no manifest to replace segments in")
        live = {segment.path: segment for segment in latest.segments}
        for segment in self.removed:
            if live.get(segment.path) != segment:
                raise CommitConflictError(
                    f"segment {name}/{segment.path} is no longer live and unchanged in manifest version "
                    f"{latest.version}: another writer replaced it"
                )
        if latest.first_dirty_offset != self.expected_first_dirty_offset:
            raise CommitConflictError(
                f"partition {name}: manifest version {latest.version} moved the checkpoint from "
                f"{self.expected_first_dirty_offset} to {latest.first_dirty_offset}: another cleaner ran"
            )
        if latest.log_start_offset != self.expected_log_start_offset:
            raise CommitConflictError(
                f"partition {name}: manifest version {latest.version} moved the log start from "
                f"{self.expected_log_start_offset} to {latest.log_start_offset}"
            )
        gone = {segment.path for segment in self.removed}
        expired = set(self.expired_producers)
        segments = sorted(
            [s for s in latest.segments if s.path not in gone] + list(self.added), key=lambda s: s.base_offset
        )
        return {
            "log_start_offset": self.log_start_offset,
            "log_end_offset": latest.log_end_offset,
            "last_stable_offset": latest.last_stable_offset,
            "first_dirty_offset": self.first_dirty_offset,
            "clean_keys_unique": latest.clean_keys_unique if self.clean_keys_unique is None else self.clean_keys_unique,
            **(
                {"last_clean_ms": latest.last_clean_ms, "next_horizon_ms": latest.next_horizon_ms}
                if self.last_clean_ms is None
                else {"last_clean_ms": self.last_clean_ms, "next_horizon_ms": self.next_horizon_ms}
            ),
            "open_transactions": latest.open_transactions,
            # What the removed segments held of their producers stays (a version without producer state gets it
            # from its segments before they go).
            "producers": tuple(
                last for pid, last in latest.producer_state.items() if (pid, last.last_offset) not in expired
            ),
            "segments": tuple(segments),
            "erasures": self._erasures(latest),
        }

    def _erasures(self, latest: Manifest) -> tuple[ErasureRequest, ...]:
        """``latest``'s erasure requests, those this change carries out marked rewritten in the version it builds
        (a request recorded after the pass planned is not among them, and stays pending)."""
        done = {(e.key_sha256, e.tombstone_offset): e for e in self.erased}
        if not done:
            return latest.erasures
        if self.time_ms is None:
            raise ValueError("a replacement that carries out erasure requests needs their time")
        requests = []
        for request in latest.erasures:
            erased = done.get(request.ident)
            if erased is not None and request.rewritten_ms is None:
                held = tuple(HeldObject(path=path, found_ms=self.time_ms) for path in erased.held)
                request = request.model_copy(
                    update={
                        "rewritten_ms": self.time_ms,
                        "rewritten_version": latest.version + 1,
                        "held": (*request.held, *held),
                    }
                )
            requests.append(request)
        return tuple(requests)


def unchanged(latest: Manifest) -> dict[str, Any]:
    """``latest``'s log state as it is, for a commit that changes something else (an erasure request's progress)."""
    return latest.model_dump(exclude={"format_version", "topic", "partition", "version", "writer"})


# Reading versions -------------------------------------------------------------------------------------


def manifest_versions(storage: Storage, tp: TopicPartition) -> list[int]:
    """Committed manifest versions of a partition, ascending."""
    found = (MANIFEST_NAME.match(e.name) for e in storage.list_dir(f"{tp.prefix}/{MANIFEST_DIR}"))
    return sorted(int(m.group(1)) for m in found if m)


def read_manifest(storage: Storage, tp: TopicPartition, version: int | None = None) -> Manifest:
    """The partition's manifest at ``version`` (default: the newest); StoreNotFoundError if it has none."""
    if version is None:
        found = manifest_versions(storage, tp)
        if not found:
            raise StoreNotFoundError(f"partition {storage.describe(tp.prefix)} has no committed manifest")
        version = found[-1]
    rel = f"{tp.prefix}/{MANIFEST_DIR}/{manifest_name(version)}"
    where = storage.describe(rel)
    manifest = parse_manifest(storage.read_bytes(rel), where)
    if (manifest.topic, manifest.partition, manifest.version) != (tp.topic, tp.partition, version):
        raise CorruptManifestError(
            f"manifest {where} describes {manifest.topic}-{manifest.partition} version {manifest.version}, "
            f"expected {tp} version {version}"
        )
    return manifest


def newest_manifest(storage: Storage, tp: TopicPartition) -> Manifest | None:
    """The newest manifest, or None for a partition nobody has committed to yet."""
    try:
        return read_manifest(storage, tp)
    except StoreNotFoundError:
        return None


def _newest_from(storage: Storage, tp: TopicPartition, newest: Manifest) -> Manifest:
    """The newest manifest, from one known to exist: probe the versions after it."""
    while True:
        try:
            newest = read_manifest(storage, tp, newest.version + 1)
        except MissingObjectError:
            return newest


# Publishing -------------------------------------------------------------------------------------------


#: The jitter of commits' back-offs (one generator: seeding one per commit costs more than the commit's own work).
_JITTER = random.Random()


def commit(
    storage: Storage,
    tp: TopicPartition,
    build: Build,
    *,
    writer: Writer,
    operation: str,
    now_ms: int,
    max_attempts: int = MAX_COMMIT_ATTEMPTS,
    rng: random.Random | None = None,
    expected: Manifest | None = None,
) -> Manifest:
    """Publish the next manifest version, rebuilding the change on the newest version until it wins.

    ``expected`` is the version the writer read last (a pass's plan read every partition's): the first attempt
    builds on it without listing and reading the versions again, so that a commit costs one request when nobody
    wrote in between; a version written since makes the create fail, and the rebase reads what is there.

    ``build(latest)`` returns the new log state, or raises CommitConflictError where it finds that its
    change no longer applies to ``latest``: that is the only conflict. A state that breaks the manifest's
    rules is the writer's bug and raises InvalidManifestError; whatever else ``build`` raises passes
    through as it is. Who holds a version is decided by :func:`_publish`, which reads it back whenever the
    create's outcome is not a plain success.
    """
    rng = rng or _JITTER
    lost: Manifest | None = None  # the version that another writer won, as read back
    for attempt in range(max_attempts):
        if attempt == 0 and expected is not None:
            latest: Manifest | None = expected
        else:
            latest = newest_manifest(storage, tp) if lost is None else _newest_from(storage, tp, lost)
        if latest is not None and latest.version >= MAX_VERSION:
            # Checked before build, which may write objects: a version past it could never be listed.
            raise StoreError(
                f"partition {storage.describe(tp.prefix)} is at manifest version {latest.version}, "
                f"the last a 20-digit manifest name holds ({MAX_VERSION}): it takes no more commits"
            )
        # The partition-level state (the cleaner's, erasure requests, streaming writes) carries over unless the change
        # sets it.
        state = {
            "clean_keys_unique": latest.clean_keys_unique if latest else False,
            "last_clean_ms": latest.last_clean_ms if latest else None,
            "next_horizon_ms": latest.next_horizon_ms if latest else None,
            "erasures": latest.erasures if latest else (),
            "streams": latest.streams if latest else {},
            **build(latest),
        }
        version = latest.version + 1 if latest else 1
        commit_id = uuid.uuid4().hex
        manifest = new_manifest(
            f"{storage.describe(tp.prefix)} version {version} ({operation} by {writer.id})",
            topic=tp.topic,
            partition=tp.partition,
            version=version,
            writer={
                "id": writer.id,
                "run_id": writer.run_id,
                "operation": operation,
                "time_ms": now_ms,
                "commit_id": commit_id,
            },
            **state,
        )
        storage.flush(f"{tp.prefix}/{rel}" for rel in sorted(_objects(manifest) - _objects(latest)))
        holder = _publish(storage, tp, manifest, rng)
        if holder.writer.commit_id == commit_id:
            return holder
        lost = holder
        # Lost the race for this version: back off (exponential, jittered), then rebase on the newer one.
        time.sleep(rng.uniform(0, min(0.5, 0.005 * 2 ** min(attempt, 7))))
    raise CommitConflictError(
        f"partition {tp}: gave up after {max_attempts} commit attempts lost to concurrent writers"
    )


def _objects(manifest: Manifest | None) -> set[str]:
    """The objects a manifest names: its segments and their deletion vectors."""
    if manifest is None:
        return set()
    return {s.path for s in manifest.segments} | {s.deletes.path for s in manifest.segments if s.deletes}


def _publish(storage: Storage, tp: TopicPartition, manifest: Manifest, rng: random.Random) -> Manifest:
    """Create ``manifest``'s version exclusively; return the manifest that holds it, ours or another's.

    A refused create is not proof of a lost race, nor a failed one proof of nothing written: a PUT
    can land and lose its answer, and then botocore's retry of it is refused (412). So, as Delta
    resolves an unknown outcome, the version is read back and its ``commit_id`` decides. Absent or
    unreadable after a failure: the same bytes are sent again (one commit id, so whichever copy lands
    is ours), until the storage's retry budget runs out; then the outcome is reported unknown. (On local
    disk and in memory a failed create wrote nothing, so its error is raised at once.)
    """
    rel = f"{tp.prefix}/{MANIFEST_DIR}/{manifest_name(manifest.version)}"
    data = manifest.to_json()
    deadline: float | None = None
    failure: Exception | None = None
    pauses = 0
    while True:
        try:
            if storage.create_exclusive(rel, data):
                return manifest
        except (OSError, StoreError) as err:
            failure = err
        try:
            return read_manifest(storage, tp, manifest.version)
        except MissingObjectError:
            if failure is not None and storage.calls_fail_whole:
                raise failure from None  # nothing was written: a plain failure
            # Never landed, or not yet: send it again.
        except CorruptManifestError:
            raise
        except (OSError, StoreError) as err:
            failure = err
        now = time.monotonic()
        deadline = deadline or now + storage.retry_budget_ms / 1000
        if now >= deadline:
            raise StoreError(
                f"the outcome of the commit of {storage.describe(rel)} is unknown: the store did not "
                f"confirm it within the retry budget of {storage.retry_budget_ms / 1000:g} s "
                f"({failure or 'refused, yet absent when read back'}); readers see version "
                f"{manifest.version - 1} or {manifest.version}"
            ) from failure
        time.sleep(min(deadline - now, rng.uniform(0, min(2.0, 0.05 * 2**pauses))))
        pauses += 1
