"""Offset claims: how the tasks of one write take consecutive offset ranges of a partition before the write commits.

A write whose records reach a partition from several tasks (Spark's, each holding some of the rows) commits them at
once, as segments in offset order. A segment's offsets are in its object, so each task needs its range before it
encodes one, and none knows how many records the others hold. Each takes the next range of the write's own sequence
instead, beginning at the log end the write read: an exclusive create of a small claim object in the partition's
``segments/`` folder, ``_claim-<write id>-<20-digit base offset>.json``, holding the range's end. A claim that loses
the create to another task of the write reads the newest claim and takes the range after it. So the ranges of one
write follow one another without overlap or gap; its commit finds its segments in that order, and places them again
where the log end moved since (another writer committed first) or a claim's task attempt failed (a gap).

No manifest names a claim: the write's commit deletes them, and gc removes any left behind after its grace period.
"""

from __future__ import annotations

import json
import re

from compaction.errors import CommitConflictError, InvalidRecordsError
from compaction.schema import LONG_MAX
from compaction.store.manifest import SEGMENT_DIR
from compaction.store.names import TopicPartition
from compaction.store.storage import Storage

CLAIM_PREFIX = "_claim-"
CLAIM_NAME = re.compile(r"^segments/_claim-([0-9A-Za-z_]{1,64})-([0-9]{20})\.json\Z")
WRITE_ID = re.compile(r"^[0-9A-Za-z_]{1,64}\Z")
#: Claims lost in a row before a task gives up (each loss means another task of the write claimed meanwhile).
MAX_CLAIM_ATTEMPTS = 1000


def claim_name(write_id: str, base_offset: int) -> str:
    return f"{SEGMENT_DIR}/{CLAIM_PREFIX}{write_id}-{base_offset:020d}.json"


def _claims(storage: Storage, tp: TopicPartition, write_id: str) -> list[str]:
    """The write's claims in the partition, as names under ``segments/``, lowest base offset first."""
    names = storage.find(f"{tp.prefix}/{SEGMENT_DIR}", prefix=f"{CLAIM_PREFIX}{write_id}-")
    return sorted(name for name in names if CLAIM_NAME.match(f"{SEGMENT_DIR}/{name}"))


def claim_offsets(storage: Storage, tp: TopicPartition, write_id: str, first: int, count: int) -> int:
    """Take ``count`` consecutive offsets of ``tp`` for the write ``write_id``: right after its newest claim, or from
    ``first`` (the log end the write read) for its first one. Returns the range's base offset."""
    if not WRITE_ID.match(write_id):
        raise ValueError(f"a write id is 1 to 64 letters, digits or underscores, not {write_id!r}")
    if count < 1:
        raise ValueError(f"a claim takes at least one offset, not {count}")
    folder = f"{tp.prefix}/{SEGMENT_DIR}"
    for _ in range(MAX_CLAIM_ATTEMPTS):
        found = _claims(storage, tp, write_id)
        base = first if not found else int(json.loads(storage.read_bytes(f"{folder}/{found[-1]}"))["next_offset"])
        if base + count > LONG_MAX:
            raise InvalidRecordsError(
                f"{count} record(s) for {tp} from offset {base} would leave no log end offset "
                f"below Kafka's Long.MAX ({LONG_MAX})"
            )
        body = json.dumps({"next_offset": base + count}).encode()
        if storage.create_exclusive(f"{tp.prefix}/{claim_name(write_id, base)}", body):
            return base
    raise CommitConflictError(
        f"partition {tp}: gave up claiming offsets for write {write_id} after "
        f"{MAX_CLAIM_ATTEMPTS} claims lost to its other tasks"
    )


def delete_claims(storage: Storage, tp: TopicPartition, write_id: str) -> None:
    """Delete the write's claims in the partition (once it has committed or given up)."""
    for name in _claims(storage, tp, write_id):
        storage.delete(f"{tp.prefix}/{SEGMENT_DIR}/{name}")


class Claims:
    """A store's claims (its ``objects.claims``)."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def take(self, tp: TopicPartition, write_id: str, first: int, count: int) -> int:
        """The base offset of the next ``count`` offsets of the write's own sequence in ``tp``
        (:func:`claim_offsets`)."""
        return claim_offsets(self.storage, tp, write_id, first, count)

    def delete(self, tp: TopicPartition, write_id: str) -> None:
        """Delete the write's claims in ``tp`` once it has committed or given up (others wait for gc)."""
        delete_claims(self.storage, tp, write_id)
