"""Where topics are published, and the entry points the application calls to publish them there; pyiceberg, an
optional dependency, is imported only when a publish runs (ConfigError, naming the extra, when it is missing)."""

from __future__ import annotations

import contextlib
import fnmatch
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from compaction import logs
from compaction.errors import CompactionError, ConfigError
from compaction.read.files import Versions
from compaction.store import Store

if TYPE_CHECKING:
    from compaction.publish.snapshot import PublishResult


@dataclass(frozen=True)
class Target:
    """Where a publish goes (``[publish]``: the catalog's name and properties, the tables' namespace) and how long a
    snapshot it replaces stays (gc's grace period; for one that reads versions from before an erasure, the erasure
    grace period)."""

    catalog: str
    properties: Mapping[str, str]
    namespace: str
    grace_ms: int
    erasure_grace_ms: int


def check_catalog(target: Target) -> None:
    """Open the target's catalog, so that a bad one fails before any work."""
    with _iceberg_needed():
        from compaction.publish.table import open_catalog
    with redacted(target):
        open_catalog(target.catalog, target.properties)


def publish_topic(
    store: Store, topic: str, target: Target, *, wall_ms: int, table: str | None = None, version: Versions = None
) -> PublishResult:
    """Publish ``topic`` at ``version`` (default: each partition's newest) as its table of the target's catalog
    (``table`` names another); snapshots replaced more than the target's grace period ago are expired (those holding
    an erased key, more than the erasure grace period ago)."""
    with _iceberg_needed():
        from compaction.publish.topic import publish
    with redacted(target):
        return publish(
            store,
            topic,
            target.catalog,
            target.properties,
            table=table,
            namespace=target.namespace,
            version=version,
            wall_ms=wall_ms,
            grace_ms=target.grace_ms,
            erasure_grace_ms=target.erasure_grace_ms,
        )


def publish_topics(
    store: Store, patterns: str | Sequence[str] | None, target: Target, wall_ms: int, out: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Publish each topic matching ``patterns`` (glob; default every topic), as a run does with ``after.run``; a
    topic that fails is reported and the others go on. Returns the report's entries: per topic what its publish did
    (:meth:`~compaction.publish.snapshot.PublishResult.to_dict`), or its ``error``."""
    chosen = [patterns] if isinstance(patterns, str) else list(patterns or ["*"])
    entries: list[dict[str, Any]] = []
    for topic in store.topics():
        if not any(fnmatch.fnmatchcase(topic, p) for p in chosen):
            continue
        try:
            result = publish_topic(store, topic, target, wall_ms=wall_ms)
        except CompactionError as err:
            out(f"failed to publish {topic}: {err}")
            entries.append({"topic": topic, "error": str(err)})
            continue
        out(describe_publish(topic, result))
        entries.append({"topic": topic, **result.to_dict()})
    return entries


def describe_publish(topic: str, result: PublishResult) -> str:
    """One line saying what a publish did."""
    versions = " ".join(f"{p}={v}" for p, v in result.versions.items())
    expired = f"; expired {len(result.expired)} snapshot(s)" if result.expired else ""
    if not result.committed:
        return f"{result.table} already holds {topic} at versions {versions}: no new snapshot{expired}"
    return (
        f"published {topic} at versions {versions} as {result.table} snapshot {result.snapshot_id} "
        f"({result.data_files} data file(s), {result.delete_files} position delete file(s)){expired}"
    )


@contextlib.contextmanager
def redacted(target: Target) -> Iterator[None]:
    """Errors without the catalog's secret-looking properties (``s3.secret-access-key``, ``token``...), which the
    command line's own masking, set up before the configuration is read, does not know."""
    try:
        yield
    except CompactionError as err:
        text = logs.redact(str(err), logs.secrets_in({}, target.properties))
        if text != str(err):
            raise type(err)(text) from None
        raise


@contextlib.contextmanager
def _iceberg_needed() -> Iterator[None]:
    """Around the import of a module that imports pyiceberg: ConfigError when it cannot be imported."""
    try:
        yield
    except ImportError as err:
        raise ConfigError(f"publishing to Iceberg needs pyiceberg ({err}): pip install 'compaction[iceberg]'") from err
