"""The store: topic partitions as segment objects plus versioned manifests, on any fsspec filesystem.

What lives here, bottom up:

- :mod:`~compaction.store.storage`: the narrow I/O boundary (read, exclusive create, list, delete) with
  retries on a time budget; nothing else touches a filesystem.
- :mod:`~compaction.store.segment`: the Parquet segment format (columns, schema check, statistics),
  :mod:`~compaction.store.jsonl`, the JSON Lines form of records, and :mod:`~compaction.store.inputs`, the
  record files ``append`` takes.
- :mod:`~compaction.store.names`: topic and partition names (Kafka's rules) and :class:`TopicPartition`.
- :mod:`~compaction.store.manifest`: one committed version of a partition's log, as a validated model.
- :mod:`~compaction.store.deletes`: the deletion-vector object format (a segment's removed offsets).
- :mod:`~compaction.store.pins`: manifest versions held by readers outside the store (Iceberg snapshots).
- :mod:`~compaction.store.commit`: a partition's manifest versions and the commit protocol (exclusive
  create of the next version, reading back an unknown outcome, rebase over a concurrent writer).
- :mod:`~compaction.store.objects`: :class:`~compaction.store.objects.Objects`, the objects under a partition's
  folders: segments read (one reader of a segment's rows, and of its live rows) and written, deletion vectors,
  verdicts, pins.
- :mod:`~compaction.store.log`: :class:`Store`, a partition's log: list partitions, read manifests and the live
  log, append and commit; the face the rest of the product uses, with its ``objects``.
- :mod:`~compaction.store.verify`, :mod:`~compaction.store.gc`, :mod:`~compaction.store.status`: the
  store's own maintenance and views.

The store knows nothing of cleaning: it keeps whatever a writer commits, if it is a valid log.
"""

from compaction.store.commit import Replacement, Writer
from compaction.store.formats import SegmentFormat
from compaction.store.log import Store, read_manifests
from compaction.store.manifest import DeletionVector, Manifest, SegmentMeta
from compaction.store.names import IllegalFolder, TopicPartition

__all__ = [
    "DeletionVector",
    "IllegalFolder",
    "Manifest",
    "Replacement",
    "SegmentFormat",
    "SegmentMeta",
    "Store",
    "TopicPartition",
    "Writer",
    "read_manifests",
]
