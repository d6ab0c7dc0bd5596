"""``compaction forget``: find the partitions that hold each key, and there append a tombstone for it and record an
erasure request, in one commit per partition."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from compaction.errors import InvalidArgumentError, StoreNotFoundError
from compaction.kafka.partitioner import default_partition
from compaction.schema import LONG_MAX
from compaction.store import Manifest, SegmentFormat, Store, TopicPartition, Writer
from compaction.store.erasure import KeyMatch, key_digest, log_findings
from compaction.store.manifest import ErasureRequest
from compaction.store.segment import records

#: ``erasure.max.delay.ms``'s default, one day: the time a request has to be physically done.
DEFAULT_ERASURE_MAX_DELAY_MS = 86_400_000


@dataclass
class Forgotten:
    """What forgetting one key did: the partitions searched (``absent``: those of them without a log in the
    store), and where it was found (a tombstone appended at that offset and a request recorded, by partition), or
    why a partition could not be searched."""

    key: bytes = field(repr=False)
    searched: tuple[int, ...]
    tombstones: dict[int, int] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    absent: list[int] = field(default_factory=list)

    @property
    def key_sha256(self) -> str:
        return key_digest(self.key)

    @property
    def found(self) -> bool:
        return bool(self.tombstones)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key_sha256": self.key_sha256,
            "searched": list(self.searched),
            "tombstones": {str(p): o for p, o in sorted(self.tombstones.items())},
            "errors": {str(p): e for p, e in sorted(self.errors.items())},
            "absent": sorted(self.absent),
            "found": self.found,
        }


def forget(
    store: Store,
    topic: str,
    keys: Sequence[bytes],
    *,
    now_ms: int,
    max_delay_ms: int = DEFAULT_ERASURE_MAX_DELAY_MS,
    partitions: int | None = None,
    writer: Writer | None = None,
) -> list[Forgotten]:
    """Forget ``keys`` in ``topic``: every partition is searched (with ``partitions``, only the one Kafka's default
    partitioner sends each key to among that many), and in each partition whose newest version holds a record of a
    key (seen or hidden by a deletion vector), a tombstone is appended for it and an erasure request recorded, due
    by ``now_ms + max_delay_ms``. A key found nowhere gets no tombstone and is reported (``found`` False)."""
    if not keys:
        raise InvalidArgumentError("forget needs at least one key")
    if max_delay_ms < 0:
        raise InvalidArgumentError(f"erasure.max.delay.ms {max_delay_ms} is negative")
    existing = store.partitions(topic)
    if not existing:
        raise StoreNotFoundError(f"topic {topic!r} has no partition in {store.url}")
    unique = list(dict.fromkeys(keys))
    forgotten = [
        Forgotten(key, (default_partition(key, partitions),) if partitions else tuple(existing)) for key in unique
    ]
    wanted: dict[int, list[Forgotten]] = {}
    for entry in forgotten:
        for partition in entry.searched:
            wanted.setdefault(partition, []).append(entry)
    writer = writer or Writer(id="compaction-forget")
    deadline = min(LONG_MAX, now_ms + max_delay_ms)

    def one(partition: int) -> None:
        asked = wanted[partition]
        tp = TopicPartition(topic, partition)
        if partition not in existing:  # the partitioner's choice, but nothing was ever stored there
            for entry in asked:
                entry.absent.append(partition)
            return
        manifest = store.latest(tp)
        if manifest is None:
            return
        findings = log_findings(store, tp, manifest, KeyMatch.of_keys(o.key for o in asked))
        unread = [f for f in findings if f.problem is not None]
        if unread:  # a segment that cannot be read may hold the key: nothing is appended blind
            for entry in asked:
                entry.errors[partition] = unread[0].problem or ""
            return
        held = {r.key_sha256 for f in findings for r in f.records}
        found = [o for o in asked if o.key_sha256 in held]
        if found:
            placed = request_erasure(
                store,
                tp,
                [o.key for o in found],
                now_ms=now_ms,
                deadline_ms=deadline,
                writer=writer,
                segment_format=manifest.segments[-1].format if manifest.segments else SegmentFormat.PARQUET,
            )
            for entry, offset in zip(found, placed, strict=True):
                entry.tombstones[partition] = offset

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(one, sorted(wanted)))
    return forgotten


def request_erasure(
    store: Store,
    tp: TopicPartition,
    keys: Sequence[bytes],
    *,
    now_ms: int,
    deadline_ms: int,
    writer: Writer | None = None,
    segment_format: SegmentFormat = SegmentFormat.PARQUET,
) -> list[int]:
    """Append one tombstone per key to the partition (as a ``segment_format`` segment: forget keeps a ``.log``
    partition one) and record an erasure request for each, naming its offset, in one commit; returns the tombstones'
    offsets, in the order of ``keys``. Nothing is searched: :func:`forget` decides where."""
    table = records([{"key": key, "value": None, "timestamp": now_ms} for key in keys], where=f"tombstones for {tp}")
    placed_offsets: list[int] = []

    def requests(latest: Manifest | None, placed: pa.Table) -> dict[str, Any]:
        offsets = placed.column("offset").to_pylist()
        placed_offsets[:] = offsets
        new = tuple(
            ErasureRequest(
                key_sha256=key_digest(key), tombstone_offset=offset, requested_ms=now_ms, deadline_ms=deadline_ms
            )
            for key, offset in zip(keys, offsets, strict=True)
        )
        return {"erasures": (*(latest.erasures if latest else ()), *new)}

    store.append(
        tp,
        table,
        now_ms=now_ms,
        writer=writer or Writer(id="compaction-forget"),
        where=f"tombstones for {tp}",
        operation="forget",
        segment_format=segment_format,
        annotate=requests,
    )
    return placed_offsets
