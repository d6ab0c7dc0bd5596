"""``compaction attest``: a proof, read from every object under a topic's partition folders, that no record of a key
is left that an erasure request erases (or, without a request, no value of it at all)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from compaction.errors import StoreNotFoundError
from compaction.kafka.partitioner import default_partition
from compaction.store import Store, TopicPartition
from compaction.store.erasure import Finding, KeyMatch, key_digest, scan, tombstone_offsets

PROOF_FORMAT = "compaction-erasure-proof/1"


@dataclass
class PartitionProof:
    """One partition: its newest manifest version, the requests for the key there, and every object read."""

    partition: int
    version: int | None
    tombstone_offset: int | None  # the newest request's: the key's records below it must be gone
    requests: list[dict[str, Any]]
    objects: list[Finding]
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        def record(found: Any) -> dict[str, Any]:
            where = (
                "erased range"
                if self.tombstone_offset is not None and found.offset < self.tombstone_offset
                else "the request's tombstone"
                if found.offset == self.tombstone_offset
                else "after the request"
                if self.tombstone_offset is not None
                else "no request"
            )
            return {"offset": found.offset, "tombstone": found.tombstone, "where": where}

        return {
            "partition": self.partition,
            "manifest_version": self.version,
            "requests": self.requests,
            "tombstone_offset": self.tombstone_offset,
            "problems": self.problems,
            "objects": [
                {
                    "name": f.path,
                    "kind": f.kind,
                    "size": f.size,
                    "sha256": f.sha256,
                    "records": [record(r) for r in f.records],
                    "unreadable": f.problem,
                }
                for f in self.objects
            ],
        }


@dataclass
class Proof:
    """What ``attest`` read and concluded (``passed``: no record the key's requests erase, and no value of a key
    without a request, in any object; ``problems`` name the objects that fail it)."""

    store: str
    topic: str
    key_sha256: str
    attested_ms: int
    scope: str
    partitions: list[PartitionProof]
    program_version: str

    @property
    def problems(self) -> list[str]:
        return [p for part in self.partitions for p in part.problems]

    @property
    def passed(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": PROOF_FORMAT,
            "program": {"name": "compaction", "version": self.program_version},
            "store": self.store,
            "topic": self.topic,
            "key_sha256": self.key_sha256,
            "attested_ms": self.attested_ms,
            "scope": self.scope,
            "passed": self.passed,
            "problems": self.problems,
            "partitions": [p.to_dict() for p in self.partitions],
        }


def attest(
    store: Store, topic: str, key: bytes, *, wall_ms: int, program_version: str, partitions: int | None = None
) -> Proof:
    """Read every object under the folders of each partition of ``topic`` (with ``partitions``, only the one Kafka's
    default partitioner sends the key to among that many) and say what each holds of ``key``; the proof names
    ``program_version``, the version of the program that read them.

    With an erasure request for the key in a partition, every record of the key below the newest request's
    tombstone must be gone (values and older tombstones: its key is what is erased); records after the tombstone
    were written after the request and are shown, not held against it. Without a request, no value of the key may
    be left. An object that cannot be read (a torn or foreign file) fails the proof: what it holds is unknown.
    """
    existing = store.partitions(topic)
    if not existing:
        raise StoreNotFoundError(f"topic {topic!r} has no partition in {store.url}")
    digest = key_digest(key)
    if partitions:
        chosen = [default_partition(key, partitions)]
        scope = f"partition {chosen[0]} (Kafka's default partitioner, {partitions} partitions)"
    else:
        chosen, scope = existing, f"every partition ({len(existing)})"
    proofs = []
    for partition in chosen:
        tp = TopicPartition(topic, partition)
        manifest = store.latest(tp) if partition in existing else None
        requests = [r for r in manifest.erasures if r.key_sha256 == digest] if manifest else []
        tombstone = tombstone_offsets(requests).get(digest)
        objects = scan(store.storage, tp, KeyMatch.of_keys([key]), whole=True) if partition in existing else []
        proof = PartitionProof(
            partition, manifest.version if manifest else None, tombstone, [r.model_dump() for r in requests], objects
        )
        for finding in objects:
            name = store.describe(tp, finding.path)
            if finding.problem is not None:
                proof.problems.append(f"{name}: unreadable, so it may hold the key: {finding.problem}")
            elif tombstone is not None and (left := [r.offset for r in finding.records if r.offset < tombstone]):
                proof.problems.append(
                    f"{name}: holds {len(left)} record(s) of the key below its erasure request's "
                    f"tombstone at offset {tombstone} (offsets {_few(left)})"
                )
            elif tombstone is None and (values := [r.offset for r in finding.records if not r.tombstone]):
                proof.problems.append(f"{name}: holds {len(values)} value(s) of the key (offsets {_few(values)})")
        proofs.append(proof)
    return Proof(store.url, topic, digest, wall_ms, scope, proofs, program_version)


def _few(offsets: Sequence[int], shown: int = 5) -> str:
    text = ", ".join(map(str, offsets[:shown]))
    return text + (f" and {len(offsets) - shown} more" if len(offsets) > shown else "")
