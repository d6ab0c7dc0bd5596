"""Local stores flush before they publish: a new object and its folder before the manifest that names it,
the manifest and its folder before the commit returns (a power cut cannot be simulated, the order can).
A local create that fails wrote nothing, so its failure is final."""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path

import pytest

from compaction.clean.cleaner import Cleaner
from compaction.errors import StoreError
from compaction.store import Store, TopicPartition
from compaction.store import commit as protocol
from tests.helpers.builders import keyed
from tests.helpers.inline import InlineSession
from tests.helpers.settings import settings_with
from tests.helpers.stores import PauseClock

TP = TopicPartition("orders", 0)

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names fsync'd descriptors via /proc")


@pytest.fixture
def disk_events(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """("fsync", path) for a flush (fsync, or a file's fdatasync) and ("link", new name) in the order they happen;
    temporary names shown as .tmp-*."""
    events: list[tuple[str, str]] = []
    real_fsync, real_fdatasync, real_link = os.fsync, os.fdatasync, os.link

    def flushed(fd: int) -> None:
        events.append(("fsync", re.sub(r"\.tmp-\w+$", ".tmp-*", os.readlink(f"/proc/self/fd/{fd}"))))

    def fsync(fd: int) -> None:
        flushed(fd)
        real_fsync(fd)

    def fdatasync(fd: int) -> None:
        flushed(fd)
        real_fdatasync(fd)

    def link(src: str, dst: str) -> None:
        real_link(src, dst)
        events.append(("link", str(dst)))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(os, "link", link)
    return events


def test_an_append_flushes_its_segment_before_the_manifest_and_the_manifest_before_returning(
    tmp_path: Path, disk_events: list[tuple[str, str]]
) -> None:
    store = Store.open(str(tmp_path / "store"))
    store.append(TP, keyed("a=1"), now_ms=1)
    disk_events.clear()

    manifest = store.append(TP, keyed("b=2"), now_ms=2)

    partition = tmp_path / "store" / "orders" / "0"
    assert disk_events == [
        ("fsync", str(partition / manifest.segments[-1].path)),
        ("fsync", str(partition / "segments")),
        ("fsync", str(partition / "_manifests" / ".tmp-*")),
        ("link", str(partition / "_manifests" / "00000000000000000002.json")),
        ("fsync", str(partition / "_manifests")),
    ]


def test_a_pass_flushes_the_objects_its_tasks_wrote_in_the_commit_that_names_them(
    tmp_path: Path, disk_events: list[tuple[str, str]]
) -> None:
    """A task writes its objects without waiting for the device (a flush waits for every other task's writes too);
    the commit flushes them, and their folder, before the manifest that names them is published."""
    store = Store.open(str(tmp_path / "store"))
    for n in range(3):
        store.append(TP, keyed("a=1 b=2 a=3"), now_ms=n)
    before = {s.path for s in store.manifest(TP).segments}
    disk_events.clear()

    report = Cleaner(InlineSession(), store, settings_with({"log.cleanup.policy": "compact"})).run(10_000)

    assert [p.status for p in report.partitions] == ["cleaned"]
    partition = tmp_path / "store" / "orders" / "0"
    new = [str(partition / s.path) for s in store.manifest(TP).segments if s.path not in before]
    assert new, "the pass wrote an object"
    published = disk_events.index(("link", str(partition / "_manifests" / "00000000000000000004.json")))
    flushed = [path for kind, path in disk_events if kind == "fsync"]
    assert set(new) | {str(partition / "segments")} <= set(flushed[:published])
    written = min(flushed.index(path) for path in new)
    assert flushed[written:published] and all(
        path in new or path in (str(partition / "segments"), str(partition / "_manifests")) or ".tmp-" in path
        for path in flushed[written:published]
    )


def test_an_object_written_unflushed_waits_for_nothing_until_flushed(
    tmp_path: Path, disk_events: list[tuple[str, str]]
) -> None:
    store = Store.open(str(tmp_path / "store"))
    store.append(TP, keyed("a=1"), now_ms=1)  # the folders exist
    disk_events.clear()
    store.storage.write_bytes("orders/0/segments/x.bin", b"bytes", flush=False)
    assert disk_events == []
    store.storage.flush(["orders/0/segments/x.bin"])
    segments = tmp_path / "store" / "orders" / "0" / "segments"
    assert disk_events == [("fsync", str(segments / "x.bin")), ("fsync", str(segments))]


def test_folders_a_first_append_creates_are_flushed_into_their_parents_before_the_manifest(
    tmp_path: Path, disk_events: list[tuple[str, str]]
) -> None:
    root = tmp_path / "store"
    Store.open(str(root)).append(TP, keyed("a=1"), now_ms=1)

    published = disk_events.index(("link", str(root / "orders" / "0" / "_manifests" / "00000000000000000001.json")))
    flushed = {path for kind, path in disk_events[:published] if kind == "fsync"}
    assert {str(tmp_path), str(root), str(root / "orders"), str(root / "orders" / "0")} <= flushed
    assert disk_events[-1] == ("fsync", str(root / "orders" / "0" / "_manifests"))


def test_a_local_commit_that_fails_is_reported_at_once_since_it_wrote_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store.open(str(tmp_path / "store"))
    store.append(TP, keyed("a=1"), now_ms=1)

    def refuse(src: str, dst: str) -> None:
        raise PermissionError(13, "Permission denied", dst)

    monkeypatch.setattr(os, "link", refuse)
    clock = PauseClock()
    monkeypatch.setattr(protocol, "time", clock)
    with pytest.raises(StoreError, match="was denied"):
        store.append(TP, keyed("b=2"), now_ms=2)
    assert clock.pauses == [], "no retrying within the retry budget: the outcome is certain"
    assert store.versions(TP) == [1]


def test_a_store_opened_by_a_relative_path_names_the_same_folder_in_a_task_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cluster's worker or a Spark Connect server runs tasks in a working folder of its own.
    (tmp_path / "driver" / "st").mkdir(parents=True)
    (tmp_path / "worker").mkdir()
    monkeypatch.chdir(tmp_path / "driver")
    store = Store.open("st")
    payload = pickle.dumps(store.storage)
    monkeypatch.chdir(tmp_path / "worker")
    assert pickle.loads(payload).root == str(tmp_path / "driver" / "st")
