"""What a command read and wrote, in lineage's terms and without openlineage: each topic as an input or output
dataset, the figures of the command's own facet, the output statistics, the failures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from compaction import __version__
from compaction.lineage.datasets import topic_dataset

if TYPE_CHECKING:
    from compaction.clean.results import RunReport
    from compaction.erasure.requests import Forgotten
    from compaction.publish import Target
    from compaction.publish.snapshot import PublishResult
    from compaction.store import Store
    from compaction.store.gc import GcResult

#: Who wrote the events and facets: this program, at this version.
PRODUCER = f"urn:compaction:{__version__}"
#: The ``$id`` of ``compaction/lineage/facets.json``, which defines this program's facets.
FACETS_SCHEMA = "urn:compaction:lineage:facets:1-0-0"


@dataclass(frozen=True)
class Dataset:
    """A dataset a command read or wrote; a topic of the store (``topic``) carries the record schema."""

    namespace: str
    name: str
    topic: bool = True


@dataclass(frozen=True)
class Written:
    """An output: its dataset, the command's facet of it (``facet`` its key in the event, ``definition`` its schema
    in facets.json) and, where records were written, OpenLineage's output statistics."""

    dataset: Dataset
    facet: str
    definition: str
    figures: Mapping[str, Any]
    rows: int | None = None
    size: int | None = None


@dataclass(frozen=True)
class CommandLineage:
    """What a command read (``inputs``) and wrote (``outputs``), the partitions it failed on, and the traceback of an
    internal error that stopped one (masked, as the report has it)."""

    inputs: list[Dataset]
    outputs: list[Written]
    failures: list[dict[str, Any]] = field(default_factory=list)
    trace: str | None = None


def _topic(store: Store, topic: str) -> Dataset:
    name = topic_dataset(store.url, topic, store.storage.storage_options)
    return Dataset(name.namespace, name.name)


def _topic_of(partition: str) -> tuple[str, str]:
    topic, _, number = partition.rpartition("-")
    return topic, number


def of_run(store: Store, report: RunReport) -> CommandLineage:
    """A run: every topic it planned is an input; one with a partition cleaned is an output, with the records and
    bytes after as its statistics and the report's figures of it (``RunReport.topics``)."""
    topics = report.topics()
    outputs = [
        Written(
            _topic(store, topic),
            "compaction_run",
            "CompactionRunOutputDatasetFacet",
            {
                "partitionsCleaned": f["partitions_cleaned"],
                "partitionsFailed": f["partitions_failed"],
                "partitionsSkipped": f["partitions_skipped"],
                "recordsBefore": f["records_before"],
                "recordsAfter": f["records_after"],
                "bytesBefore": f["bytes_before"],
                "bytesAfter": f["bytes_after"],
                "versions": f["versions"],
            },
            rows=f["records_after"],
            size=f["bytes_after"],
        )
        for topic, f in topics.items()
        if f["partitions_cleaned"]
    ]
    failures = [
        {"partition": f["partition"], "error": f["error"] or "", "internal": f["internal"]}
        for f in report.to_dict()["failures"]
    ]
    trace = next((r.trace for r in report.failed if r.internal and r.trace), None)
    return CommandLineage([_topic(store, topic) for topic in topics], outputs, failures, trace)


def of_forget(store: Store, topic: str, forgotten: Sequence[Forgotten]) -> CommandLineage:
    """``forget``: the topic is read; written where a tombstone was appended. Neither a key nor its digest is told."""
    tombstones: dict[str, int] = {}
    for entry in forgotten:
        for partition in entry.tombstones:
            tombstones[str(partition)] = tombstones.get(str(partition), 0) + 1
    figures = {
        "keysRequested": len(forgotten),
        "keysFound": sum(1 for o in forgotten if o.tombstones),
        "tombstones": tombstones,
    }
    failures = [
        {"partition": f"{topic}-{partition}", "error": error, "internal": False}
        for entry in forgotten
        for partition, error in sorted(entry.errors.items())
    ]
    outputs = (
        [Written(_topic(store, topic), "compaction_forget", "CompactionForgetOutputDatasetFacet", figures)]
        if tombstones
        else []
    )
    return CommandLineage([_topic(store, topic)], outputs, failures)


def of_gc(store: Store, results: Sequence[GcResult], skipped: Mapping[str, Any]) -> CommandLineage:
    """``gc``: the topics it looked at are read; written where it deleted objects or pruned versions."""
    figures: dict[str, dict[str, int]] = {}

    def of(partition: str) -> dict[str, int]:
        return figures.setdefault(
            _topic_of(partition)[0],
            dict.fromkeys(
                ("partitionsCollected", "partitionsSkipped", "objectsDeleted", "bytesDeleted", "versionsPruned"), 0
            ),
        )

    for result in results:
        f = of(result.partition)
        f["partitionsCollected"] += 1
        f["objectsDeleted"] += len(result.deleted_objects)
        f["bytesDeleted"] += result.deleted_bytes
        f["versionsPruned"] += len(result.pruned_versions)
    for partition in skipped:
        of(partition)["partitionsSkipped"] += 1
    outputs = [
        Written(_topic(store, topic), "compaction_gc", "CompactionGcOutputDatasetFacet", f)
        for topic, f in figures.items()
        if f["objectsDeleted"] or f["versionsPruned"]
    ]
    failures = [{"partition": name, "error": str(error), "internal": False} for name, error in skipped.items()]
    return CommandLineage([_topic(store, topic) for topic in figures], outputs, failures)


def of_publish(store: Store, topic: str, target: Target, result: PublishResult) -> CommandLineage:
    """``publish``: the topic is read, its Iceberg table (namespace ``iceberg://<catalog>``, name the table's
    identifier) written, with the snapshot and the manifest versions it reads."""
    figures = {
        "table": result.table,
        "snapshotId": result.snapshot_id,
        "committed": result.committed,
        "versions": {str(p): v for p, v in result.versions.items()},
        "dataFiles": result.data_files,
        "deleteFiles": result.delete_files,
    }
    table = Dataset(f"iceberg://{target.catalog}", result.table, topic=False)
    return CommandLineage(
        [_topic(store, topic)], [Written(table, "compaction_publish", "CompactionPublishOutputDatasetFacet", figures)]
    )
