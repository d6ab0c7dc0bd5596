"""Erasure requests in the store: a key's digest, what the objects under a partition's folders hold of erased keys,
and the bookkeeping gc commits as it removes them.

A request (:class:`~compaction.store.manifest.ErasureRequest`) names a key by its SHA-256 digest and the offset
of the tombstone appended for it: it erases every record of the key below that offset (values and older
tombstones alike). Records above it were written after the request and are not its business. Whether an object
holds such a record is read from the object itself: segments by their key and offset columns (every row, those a
deletion vector or the log start hides included), ``.log`` segments decoded whole. Deletion vectors, manifests and
pins hold no key. An object that cannot be read as what its name says (a torn temporary file, a stranger's file)
may hold anything: it is reported, never taken for clean.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction.errors import CommitConflictError, StoreError
from compaction.store.claims import CLAIM_NAME
from compaction.store.commit import Writer, unchanged
from compaction.store.deletes import DELETES_SCHEMA
from compaction.store.formats import decode_log
from compaction.store.handover import PIECES_NAME, VERDICTS_NAME, VERDICTS_SCHEMA, read_all_pieces
from compaction.store.log import Store
from compaction.store.manifest import (
    DELETES_NAME,
    MANIFEST_DIR,
    MANIFEST_NAME,
    SEGMENT_DIR,
    SEGMENT_NAME,
    ErasureRequest,
    HeldObject,
    Manifest,
    parse_manifest,
)
from compaction.store.names import TopicPartition
from compaction.store.pins import PIN_DIR, PIN_NAME
from compaction.store.segment import check_schema, parquet_file
from compaction.store.storage import TEMP_PREFIX, ObjectInfo, Storage

#: A request that is physically done stays in the manifest this long (30 days), as the record of what was done
#: and when; then gc drops it. ``compaction attest``'s proof is the lasting record.
COMPLETED_KEPT_MS = 30 * 86_400_000
#: Folders below a partition's are walked this deep at most (the store writes one level).
MAX_DEPTH = 8
_PARQUET_MAGIC = b"PAR1"


def key_digest(key: bytes) -> str:
    """How a request records a key: SHA-256, as 64 lowercase hex digits."""
    return hashlib.sha256(key).hexdigest()


@dataclass(frozen=True)
class KeyMatch:
    """The keys looked for: by their bytes (a command given the keys) or by their digests (the cleaner and gc,
    which know the requests only)."""

    keys: frozenset[bytes] = frozenset()
    digests: frozenset[str] = frozenset()

    @classmethod
    def of_keys(cls, keys: Iterable[bytes]) -> KeyMatch:
        return cls(keys=frozenset(keys))

    @classmethod
    def of_digests(cls, digests: Iterable[str]) -> KeyMatch:
        return cls(digests=frozenset(digests))

    def values(self, keys: pa.Array | pa.ChunkedArray) -> pa.Array:
        """The distinct key values among ``keys`` that match; each distinct key is hashed once."""
        if self.keys:
            return pa.array(sorted(self.keys), pa.binary())
        if not self.digests or len(keys) == 0:
            return pa.array([], pa.binary())
        distinct = pc.unique(pc.drop_null(keys)).cast(pa.binary())
        return pa.array([k for k in distinct.to_pylist() if key_digest(k) in self.digests], pa.binary())

    def rows(self, keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """Which rows' keys match (a bool per row; keyless rows never do)."""
        wanted = self.values(keys)
        if not len(wanted) or len(keys) == 0:
            return np.zeros(len(keys), dtype=bool)
        found = pc.is_in(keys.cast(pa.binary()), value_set=wanted)
        return cast(np.ndarray, pc.fill_null(found, False).to_numpy(zero_copy_only=False).astype(bool))


def erased_rows(offsets: np.ndarray, keys: pa.Array | pa.ChunkedArray, tombstones: Mapping[str, int]) -> np.ndarray:
    """Which rows a request erases: their key's digest is one of ``tombstones`` (digest: the request's tombstone
    offset, the highest when a key has several) and their offset lies below it."""
    result = np.zeros(len(offsets), dtype=bool)
    if not tombstones or not len(offsets):
        return result
    wanted = KeyMatch.of_digests(tombstones).values(keys)
    if not len(wanted):
        return result
    binary = keys.cast(pa.binary())
    for key in wanted.to_pylist():
        same = pc.fill_null(pc.equal(binary, pa.scalar(key, pa.binary())), False).to_numpy(zero_copy_only=False)
        result |= same.astype(bool) & (offsets < tombstones[key_digest(key)])
    return result


def tombstone_offsets(requests: Iterable[ErasureRequest]) -> dict[str, int]:
    """Per key digest, the highest tombstone offset among ``requests``: what the key's records are erased below."""
    found: dict[str, int] = {}
    for request in requests:
        found[request.key_sha256] = max(found.get(request.key_sha256, -1), request.tombstone_offset)
    return found


# What an object holds ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Found:
    """A record of a looked-for key in an object: the key's digest, its offset, and whether it is a tombstone
    (None when the values were not read)."""

    key_sha256: str
    offset: int
    tombstone: bool | None = None


@dataclass(frozen=True)
class Finding:
    """What one object under a partition's folders holds of the keys looked for.

    ``kind``: ``segment``, ``deletion-vector``, ``verdicts``, ``pieces``, ``claim``, ``manifest``, ``pin``,
    ``temporary`` (a write in progress or abandoned) or ``unknown`` (a name the store does not write). ``problem``
    says why it could not be read as such: then it may hold anything. ``sha256`` is the digest of its bytes when they
    were read whole.
    """

    path: str  # relative to the partition's folder
    kind: str
    size: int
    mtime_ms: int | None
    records: tuple[Found, ...] = ()
    problem: str | None = None
    sha256: str | None = None

    def below(self, tombstones: Mapping[str, int]) -> list[Found]:
        """Its records that requests erase (below their key's tombstone offset)."""
        return [r for r in self.records if r.offset < tombstones.get(r.key_sha256, -1)]


def kind_of(path: str) -> str:
    """What an object under a partition's folder is, by its name."""
    folder, _, name = path.rpartition("/")
    if name.startswith(TEMP_PREFIX):
        return "temporary"
    if folder == SEGMENT_DIR and SEGMENT_NAME.match(path):
        return "segment"
    if folder == SEGMENT_DIR and DELETES_NAME.match(path):
        return "deletion-vector"
    if folder == SEGMENT_DIR and VERDICTS_NAME.match(path):
        return "verdicts"
    if folder == SEGMENT_DIR and PIECES_NAME.match(path):
        return "pieces"
    if folder == SEGMENT_DIR and CLAIM_NAME.match(path):
        return "claim"
    if folder == MANIFEST_DIR and MANIFEST_NAME.match(name):
        return "manifest"
    if folder == PIN_DIR and PIN_NAME.match(name):
        return "pin"
    return "unknown"


def partition_objects(storage: Storage, tp: TopicPartition) -> list[tuple[str, ObjectInfo]]:
    """Every object under the partition's folder, in any subfolder (``(path relative to it, listing entry)``)."""
    found: list[tuple[str, ObjectInfo]] = []
    folders: list[tuple[str, int]] = [("", 0)]
    while folders:
        rel, depth = folders.pop()
        for entry in storage.list_dir(f"{tp.prefix}/{rel}" if rel else tp.prefix):
            path = f"{rel}/{entry.name}" if rel else entry.name
            if entry.is_dir:
                if depth >= MAX_DEPTH:
                    raise StoreError(
                        f"{storage.describe(f'{tp.prefix}/{path}')} is nested more than {MAX_DEPTH} "
                        "folders deep in a partition's folder"
                    )
                folders.append((path, depth + 1))
            else:
                found.append((path, entry))
    return sorted(found, key=lambda item: item[0])


def _records(table: pa.Table, match: KeyMatch, values: pa.ChunkedArray | None) -> tuple[Found, ...]:
    rows = np.flatnonzero(match.rows(table.column("key")))
    if not len(rows):
        return ()
    taken = pa.array(rows)
    keys = table.column("key").take(taken).to_pylist()
    offsets = table.column("offset").take(taken).to_pylist()
    tombstones = [None] * len(rows) if values is None else pc.is_null(values.take(taken)).to_pylist()
    return tuple(Found(key_digest(k), o, t) for k, o, t in zip(keys, offsets, tombstones, strict=True))


def _parquet(source: Any, where: str, match: KeyMatch, with_values: bool) -> tuple[Found, ...]:
    """A Parquet object's records of the keys: a segment's, or none for a deletion vector (offsets only) or a pass's
    verdicts (row positions only)."""
    file = parquet_file(source, checked=False)
    if file.schema_arrow.equals(DELETES_SCHEMA) or file.schema_arrow.equals(VERDICTS_SCHEMA):
        return ()
    check_schema(file.schema_arrow, where)  # a Parquet file that is neither: a SegmentSchemaError
    found = _records(file.read(columns=["offset", "key"], use_threads=False), match, None)
    if found and with_values:
        table = file.read(columns=["offset", "key", "value"], use_threads=False)
        found = _records(table, match, table.column("value"))
    return found


def inspect(
    storage: Storage, tp: TopicPartition, path: str, entry: ObjectInfo, match: KeyMatch, *, whole: bool = False
) -> Finding:
    """What the object at ``path`` holds of the keys, read by what it holds, whatever its name says: Parquet (a
    segment or a deletion vector) or Kafka's record batches; manifests and pins are parsed as such. ``whole``
    reads every byte (for the object's digest) and the values of the records found (whether each is a
    tombstone); otherwise a Parquet segment is read by its key and offset columns only."""
    rel = f"{tp.prefix}/{path}"
    where = storage.describe(rel)
    kind = kind_of(path)
    folder = path.rpartition("/")[0]
    try:
        if kind == "claim" or (folder in (MANIFEST_DIR, PIN_DIR) and kind != "unknown"):
            data = storage.read_bytes(rel)
            if kind in ("pin", "claim"):  # a claim holds a write's offset range, never a key
                json.loads(data)
            else:
                parse_manifest(data, where)  # key digests at most, never a key
            return _finding(path, kind, entry, (), data if whole else None)
        if not whole and kind in ("segment", "deletion-vector", "verdicts") and not path.endswith(".log"):
            source, _ = storage.open_input(rel)
            try:
                return _finding(path, kind, entry, _parquet(source, where, match, False), None)
            finally:
                source.close()
        data = storage.read_buffer(rel)
        if kind == "pieces":  # a pass's rows handed to its key ranges: keys and offsets, no values
            found = _records(read_all_pieces(data), match, None)
        elif bytes(memoryview(data)[:4]) == _PARQUET_MAGIC:
            found = _parquet(pa.BufferReader(data), where, match, whole)
        else:
            records = decode_log(data, where).records  # Kafka's record batches, or a CorruptBatchError
            found = _records(records, match, records.column("value"))
        return _finding(path, kind, entry, found, data if whole else None)
    except (StoreError, pa.ArrowException, OSError, ValueError) as err:
        # A name the store writes is read as such, and its own error says what is wrong; anything else was tried
        # as both formats, and what it is stays unknown.
        problem = (
            str(err)
            if kind not in ("temporary", "unknown") and isinstance(err, StoreError)
            else f"{where} cannot be read as Parquet or Kafka record batches ({type(err).__name__}: {err})"
        )
        return Finding(path, kind, entry.size, entry.mtime_ms, problem=problem)


def _finding(path: str, kind: str, entry: ObjectInfo, found: tuple[Found, ...], data: Any) -> Finding:
    digest = hashlib.sha256(memoryview(data)).hexdigest() if data is not None else None
    return Finding(path, kind, entry.size, entry.mtime_ms, found, None, digest)


def scan(
    storage: Storage,
    tp: TopicPartition,
    match: KeyMatch,
    *,
    whole: bool = False,
    only: Callable[[str], bool] | None = None,
    threads: int = 8,
) -> list[Finding]:
    """What every object under the partition's folder (or those ``only`` picks) holds of the keys."""
    objects = [(path, entry) for path, entry in partition_objects(storage, tp) if only is None or only(path)]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(lambda item: inspect(storage, tp, item[0], item[1], match, whole=whole), objects))


def log_findings(
    store: Store, tp: TopicPartition, manifest: Manifest, match: KeyMatch, threads: int = 8
) -> list[Finding]:
    """What the segments ``manifest`` lists hold of the keys: every row of their objects, those a deletion vector or
    the log start hides included (their bytes are still there)."""
    entries = [(s.path, ObjectInfo(s.path.rpartition("/")[2], s.size_bytes, None, False)) for s in manifest.segments]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(lambda item: inspect(store.storage, tp, item[0], item[1], match), entries))


# gc's part: the objects that hold erased keys, and the requests' progress -----------------------------------


def open_requests(manifest: Manifest | None) -> tuple[ErasureRequest, ...]:
    """The requests a pass has carried out and whose older records may still lie in objects gc has to remove."""
    return tuple(r for r in manifest.erasures if r.state == "rewritten") if manifest is not None else ()


@dataclass
class Holdings:
    """What gc found of a partition's open requests: the objects that hold (or may hold) a record they erase."""

    requests: tuple[ErasureRequest, ...]
    findings: dict[str, Finding]
    holders: dict[str, set[tuple[str, int]]] = field(default_factory=dict)  # path: the requests it holds keys of
    doubtful: dict[str, str] = field(default_factory=dict)  # path: why it may hold anything

    @classmethod
    def of(cls, storage: Storage, tp: TopicPartition, requests: tuple[ErasureRequest, ...]) -> Holdings:
        tombstones = tombstone_offsets(requests)
        # Manifests and pins hold no key: read them only as part of a proof (attest), not on every gc.
        findings = {
            f.path: f
            for f in scan(
                storage, tp, KeyMatch.of_digests(tombstones), only=lambda path: kind_of(path) not in ("manifest", "pin")
            )
        }
        holdings = cls(requests, findings)
        for path, finding in findings.items():
            if finding.problem is not None:
                holdings.doubtful[path] = finding.problem
                continue
            erased = {(r.key_sha256, r.offset) for r in finding.below(tombstones)}
            idents = {
                request.ident
                for request in requests
                if any(d == request.key_sha256 and o < request.tombstone_offset for d, o in erased)
            }
            if idents:
                holdings.holders[path] = idents
        return holdings

    @property
    def suspects(self) -> set[str]:
        """The objects that hold a record a request erases, or may."""
        return set(self.holders) | set(self.doubtful)

    def left_for(self, request: ErasureRequest, present: set[str]) -> list[str]:
        """The objects still there that hold (or may hold) a record ``request`` erases."""
        return sorted(path for path in present if path in self.doubtful or request.ident in self.holders.get(path, ()))


def progress(
    holdings: Holdings, present: set[str], deleted: set[str], *, wall_ms: int, settled: Callable[[ErasureRequest], bool]
) -> dict[tuple[str, int], ErasureRequest]:
    """Each open request as gc leaves it: the objects found holding its key (and those seen gone, with the time),
    and complete when none is left and ``settled(request)`` (its rewrite is older than the erasure grace period, so
    that no pass or reader that started before it is still writing or reading)."""
    updated = {}
    for request in holdings.requests:
        held = {h.path: h for h in request.held}
        for path, idents in holdings.holders.items():
            if request.ident in idents and path not in held:
                held[path] = HeldObject(path=path, found_ms=wall_ms)
        for path, entry in held.items():
            if entry.removed_ms is None and (path in deleted or path not in present):
                held[path] = entry.model_copy(update={"removed_ms": wall_ms})
        done = not holdings.left_for(request, present - deleted) and settled(request)
        change: dict[str, Any] = {"held": tuple(sorted(held.values(), key=lambda h: (h.found_ms, h.path)))}
        if done:
            change["completed_ms"] = wall_ms
        new = request.model_copy(update=change)
        if new != request:
            updated[request.ident] = new
    return updated


def record_progress(
    store: Store, tp: TopicPartition, updated: Mapping[tuple[str, int], ErasureRequest], *, wall_ms: int, writer: Writer
) -> Manifest | None:
    """Commit the requests as gc leaves them (and drop those done more than :data:`COMPLETED_KEPT_MS` ago); None
    when nothing changes. Every other part of the log stays as the newest version has it."""

    def current(latest: Manifest) -> tuple[ErasureRequest, ...]:
        kept = []
        for request in latest.erasures:
            if request.completed_ms is not None and request.completed_ms + COMPLETED_KEPT_MS <= wall_ms:
                continue
            new = updated.get(request.ident)
            kept.append(new if new is not None and request.completed_ms is None else request)
        return tuple(kept)

    latest = store.latest(tp)
    if latest is None or current(latest) == latest.erasures:
        return None

    def build(latest: Manifest | None) -> dict[str, Any]:
        if latest is None:
            raise CommitConflictError(f"partition {tp} has no manifest to record erasure progress in")
        return {**unchanged(latest), "erasures": current(latest)}

    return store.commit(tp, build, writer=writer, operation="erasure", now_ms=wall_ms)


def erased_since(manifest: Manifest | None) -> int | None:
    """The version from which the partition's log holds no record an unfinished request erases: older versions may
    (the highest ``rewritten_version`` of the requests a pass carried out and gc has not finished); None when no
    request is at that stage."""
    return max((r.rewritten_version for r in open_requests(manifest) if r.rewritten_version is not None), default=None)
