"""One topic published: its versions resolved and checked, the catalog's own errors named once, the snapshot
committed (:mod:`.snapshot`). Imports pyiceberg: :mod:`.target` loads it on first use."""

from __future__ import annotations

from collections.abc import Mapping

from compaction.errors import CatalogError, CompactionError, PublishError
from compaction.publish.files import location
from compaction.publish.snapshot import MAX_ATTEMPTS, PublishResult, commit_snapshot
from compaction.publish.table import identifier, open_catalog, open_table
from compaction.read.files import PartitionFiles, Versions, resolve
from compaction.store import SegmentFormat, Store
from compaction.store.erasure import erased_since


def publish(
    store: Store,
    topic: str,
    catalog_name: str,
    catalog_properties: Mapping[str, str],
    *,
    table: str | None = None,
    namespace: str = "default",
    version: Versions = None,
    wall_ms: int,
    grace_ms: int,
    erasure_grace_ms: int | None = None,
    max_attempts: int = MAX_ATTEMPTS,
) -> PublishResult:
    """Publish ``topic`` at ``version`` (default: each partition's newest) as the table ``table`` (``NAMESPACE.TABLE``;
    default the topic's name in ``namespace``) of the catalog; snapshots replaced more than ``grace_ms`` before
    ``wall_ms`` are expired, and those that read versions from before an erasure as soon as they were replaced
    ``erasure_grace_ms`` before (default ``grace_ms``). PublishError (nothing changed) when a live segment is a Kafka
    ``.log`` file, or when a version asked for predates an erasure not yet finished (its snapshot would keep the
    erased records)."""
    parts = resolve(store, topic, None, version)
    check_publishable(store, parts)
    erased = erasures_since(store, parts)
    ident = identifier(table, namespace, topic)
    try:
        catalog = open_catalog(catalog_name, catalog_properties)
        open_table(catalog, ident, location(store, ""), topic)  # the store's full name, wherever it is run from
        return commit_snapshot(
            store,
            lambda: catalog.load_table(ident),
            parts,
            wall_ms=wall_ms,
            grace_ms=grace_ms,
            max_attempts=max_attempts,
            erased=erased,
            erasure_grace_ms=grace_ms if erasure_grace_ms is None else erasure_grace_ms,
        )
    except (CompactionError, OSError):
        raise
    except Exception as err:
        # The catalog's client (REST, SQL, Glue...) and its storage raise their own types: named once, here.
        if type(err).__module__.split(".")[0] in _CATALOG_LIBRARIES:
            first = (str(err).strip().splitlines() or [""])[0]  # SQLAlchemy adds lines of links
            raise CatalogError(
                f"Iceberg catalog {catalog_name!r}, table {'.'.join(ident)}: {type(err).__name__}: {first}"
            ) from err
        raise


_CATALOG_LIBRARIES = {"pyiceberg", "sqlalchemy", "requests", "urllib3", "botocore", "boto3", "pydantic"}


def erasures_since(store: Store, parts: list[PartitionFiles]) -> dict[int, int]:
    """Per partition with an erasure a pass carried out and gc has not finished, the version its log is clean
    from: a snapshot of an older version may read the erased records (and its pin keeps gc from removing them).
    PublishError when a version asked for is such an older one."""
    since = {}
    for part in parts:
        version = erased_since(store.latest(part.tp))
        if version is None:
            continue
        if part.version < version:
            raise PublishError(
                f"version {part.version} of partition {part.tp} predates an erasure (its log is clean "
                f"from version {version}): a snapshot of it would keep the erased records readable; "
                "publish a version from then on"
            )
        since[part.tp.partition] = version
    return since


def check_publishable(store: Store, parts: list[PartitionFiles]) -> None:
    """Refuse what no engine could read as it is: a store in this process's memory, or a Kafka ``.log`` segment."""
    if store.storage.fs.protocol in ("memory", ("memory",)):
        raise PublishError(f"store {store.url} lives in this process's memory: no other engine can read its segments")
    for part in parts:
        logs = [f.segment.path for f in part.files if f.segment.format == SegmentFormat.KAFKA]
        if logs:
            more = f" and {len(logs) - 1} more" if len(logs) > 1 else ""
            raise PublishError(
                f"partition {part.tp} holds Kafka .log segments ({logs[0]}{more}), which Iceberg cannot read as data "
                "files: export a Parquet copy with 'compaction snapshot', or set segment.format = \"parquet\" for "
                "the topic and clean until no .log segment is live"
            )
