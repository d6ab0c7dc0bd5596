"""Bad input gets a typed error naming the object, and nothing in the store changes."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from compaction.errors import (
    CorruptManifestError,
    CorruptSegmentError,
    MissingObjectError,
    OffsetOverlapError,
    SegmentSchemaError,
    StoreError,
)
from compaction.store import Store, TopicPartition
from compaction.store.gc import collect_garbage
from compaction.store.segment import SEGMENT_SCHEMA, checksum
from compaction.store.storage import Storage
from compaction.store.verify import verify
from tests.helpers.builders import keyed, rec, table
from tests.helpers.stores import snapshot, tamper

TP = TopicPartition("orders", 0)


@pytest.fixture
def seeded(store: Store) -> Store:
    store.append(TP, keyed("a=1 b=2"), now_ms=1)
    store.append(TP, keyed("a=3"), now_ms=2)
    return store


def _segment_path(store: Store, index: int = 0) -> str:
    return f"{TP.prefix}/{store.manifest(TP).segments[index].path}"


def _manifest_path(store: Store) -> str:
    return f"{TP.prefix}/_manifests/{store.manifest(TP).version:020d}.json"


def _edit_manifest(store: Store, edit: Callable[[dict[str, Any]], object]) -> str:
    """Change the newest manifest's JSON behind the store's back (``edit`` changes the document); returns its path."""
    rel = _manifest_path(store)
    doc = json.loads(store.storage.read_bytes(rel))
    edit(doc)
    store.storage.fs.pipe_file(store.storage.path(rel), json.dumps(doc).encode())
    return rel


def _everything_fails_cleanly(store: Store, error: type[StoreError], name: str) -> None:
    before = snapshot(store)
    with pytest.raises(error, match=name):
        store.read(TP)
    problems = [str(p) for r in verify(store, [TP]) for p in r.problems]
    assert any(name in p for p in problems), problems
    assert snapshot(store) == before


def test_truncated_segment(seeded: Store) -> None:
    rel = _segment_path(seeded)
    data = seeded.storage.read_bytes(rel)
    seeded.storage.fs.pipe_file(seeded.storage.path(rel), data[: len(data) // 2])
    _everything_fails_cleanly(seeded, CorruptSegmentError, rel.split("/")[-1])
    collect_garbage(seeded, TP, wall_ms=10**13, grace_ms=0)
    assert seeded.storage.exists(rel), "gc never deletes a referenced object, corrupt or not"


def test_truncated_segment_of_the_recorded_size_is_still_named(seeded: Store) -> None:
    rel = _segment_path(seeded)
    data = seeded.storage.read_bytes(rel)
    garbage = data[:100] + b"\0" * (len(data) - 100)
    seeded.storage.fs.pipe_file(seeded.storage.path(rel), garbage)
    _everything_fails_cleanly(seeded, CorruptSegmentError, rel.split("/")[-1])


def test_segment_with_a_wrong_column_type(seeded: Store) -> None:
    rel = _segment_path(seeded)
    bad = seeded.read(TP, end=2).set_column(1, "timestamp", pa.array(["t1", "t2"]))
    sink = pa.BufferOutputStream()
    pq.write_table(bad, sink)
    data = sink.getvalue().to_pybytes()
    seeded.storage.fs.pipe_file(seeded.storage.path(rel), data)
    # Size and checksum as recorded: only the schema is wrong.
    _edit_manifest(seeded, lambda doc: doc["segments"][0].update(size_bytes=len(data), checksum=checksum(data)))
    with pytest.raises(SegmentSchemaError, match=r"column 'timestamp' has type string.*requires int64"):
        seeded.read(TP)
    _everything_fails_cleanly(seeded, SegmentSchemaError, rel.split("/")[-1])


def test_manifest_that_is_not_json(seeded: Store) -> None:
    rel = _manifest_path(seeded)
    seeded.storage.fs.pipe_file(seeded.storage.path(rel), b"{not json")
    _everything_fails_cleanly(seeded, CorruptManifestError, rel.split("/")[-1])
    before = snapshot(seeded)
    with pytest.raises(CorruptManifestError, match="not valid JSON"):
        seeded.append(TP, keyed("c=1"), now_ms=3)
    with pytest.raises(CorruptManifestError):
        collect_garbage(seeded, TP, wall_ms=10**13, grace_ms=0)
    assert snapshot(seeded) == before


def test_manifest_referencing_a_missing_object(seeded: Store) -> None:
    rel = _segment_path(seeded, 1)
    seeded.storage.fs.rm_file(seeded.storage.path(rel))
    _everything_fails_cleanly(seeded, MissingObjectError, rel.split("/")[-1])


def test_manifest_referencing_a_path_outside_its_partition(seeded: Store) -> None:
    rel = _edit_manifest(
        seeded, lambda doc: doc["segments"][0].update(path="../../other/0/segments/00000000000000000000-x.parquet")
    )
    with pytest.raises(CorruptManifestError, match=r"\.\./\.\./other.*inside the partition"):
        seeded.manifest(TP)
    _everything_fails_cleanly(seeded, CorruptManifestError, rel.split("/")[-1])


def test_manifest_with_overlapping_segments(seeded: Store) -> None:
    _edit_manifest(
        seeded,
        lambda doc: doc["segments"][1].update(
            base_offset=1, path=doc["segments"][1]["path"].replace("00000000000000000002-", "00000000000000000001-")
        ),
    )
    with pytest.raises(CorruptManifestError, match="must not overlap"):
        seeded.manifest(TP)


def test_append_overlapping_an_existing_segment(seeded: Store) -> None:
    before = snapshot(seeded)
    with pytest.raises(OffsetOverlapError, match=r"offsets start at 1.*orders/0"):
        seeded.append(TP, table(rec("z", offset=1)), now_ms=3)
    assert snapshot(seeded) == before


def test_schema_check_names_a_missing_column() -> None:
    from compaction.store.segment import check_schema

    with pytest.raises(SegmentSchemaError, match="segment s1 has no column 'producer_epoch'"):
        check_schema(pa.schema([f for f in SEGMENT_SCHEMA if f.name != "producer_epoch"]), "s1")
    with pytest.raises(SegmentSchemaError, match="unexpected column"):
        check_schema(SEGMENT_SCHEMA.append(pa.field("extra", pa.int8())), "s1")


def test_a_segment_whose_bytes_changed_but_still_decode_is_never_read_whole(seeded: Store) -> None:
    rel = _segment_path(seeded)
    tamper(seeded, rel)
    with pytest.raises(CorruptSegmentError, match="does not match the checksum the manifest records"):
        seeded.read(TP)
    _everything_fails_cleanly(seeded, CorruptSegmentError, rel.split("/")[-1])


def test_a_segment_that_cannot_be_read_is_reported_by_verify(seeded: Store) -> None:
    rel = _segment_path(seeded)

    class Unreadable(Storage):
        def _call(self, op: str, path: str, fn):
            if path == rel and op != "list":
                raise StoreError(f"cannot {op} {path}: access denied")
            return super()._call(op, path, fn)

    inner = seeded.storage
    broken = Store(Unreadable(inner.fs, inner.root, inner.url, inner.storage_options))
    problems = [str(p) for r in verify(broken, [TP]) for p in r.problems]
    assert any(rel.split("/")[-1] in p and "cannot be read" in p for p in problems), problems


def test_a_whole_read_checks_the_objects_checksum_and_a_read_of_some_columns_its_pages(
    seeded: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from compaction.store import segment as segment_module

    opened: list[bool] = []
    real = segment_module.parquet_file

    def spy(source: Any, checked: bool = True) -> pq.ParquetFile:
        opened.append(checked)
        return real(source, checked)

    monkeypatch.setattr(segment_module, "parquet_file", spy)
    first = seeded.manifest(TP).segments[0]
    seeded.objects.read_segment(TP, first)
    assert opened == [False], "the object's checksum covers every page: checking their CRCs again costs 40% of a decode"
    opened.clear()
    seeded.objects.read_segment(TP, first, ["key", "offset"])
    if seeded.storage.is_local:
        assert opened == [True], "a read of some columns never sees the object whole: its pages check themselves"
    else:  # a small object on an object store is fetched whole in one request, and held to its checksum
        assert opened == [False]
