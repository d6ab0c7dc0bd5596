"""The session helper: local mode retries failed tasks as a cluster does."""

from __future__ import annotations

import pytest

from compaction.clean.session import check_master, with_task_retries
from compaction.errors import CompactionError


@pytest.mark.parametrize(("master", "expected"), [
    ("local", "local[1,4]"), ("local[3]", "local[3,4]"), ("local[*]", "local[*,4]"),
    ("local[2,1]", "local[2,1]"), ("spark://host:7077", "spark://host:7077"), ("yarn", "yarn"),
])
def test_a_local_master_gets_the_task_attempts_a_cluster_gives(master: str, expected: str) -> None:
    assert with_task_retries(master) == expected


def test_the_attempts_can_be_set() -> None:
    assert with_task_retries("local[2]", "2") == "local[2,2]"


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "local[2,3]", "local[*,4]",
                                    "local-cluster[2,1,1024]"])
def test_every_local_master_spark_takes_is_accepted(master: str) -> None:
    check_master(master)


@pytest.mark.parametrize("master", ["local[0]", "local-cluster[2,1]", "local-cluster[2, 1, 1024]", "localhost:7077",
                                    "locall[2]", "mesos-cluster"])
def test_a_malformed_master_is_refused_with_the_forms_spark_takes(master: str) -> None:
    with pytest.raises(CompactionError, match="local-cluster"):
        check_master(master)


def test_a_local_cluster_master_keeps_its_own_task_attempts() -> None:
    assert with_task_retries("local-cluster[2,1,1024]") == "local-cluster[2,1,1024]", \
        "a local cluster schedules like a standalone one: spark.task.maxFailures applies"


def test_a_run_without_a_class_archive_dumps_one_that_a_later_run_maps(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """An installed wheel has no archive from `make setup`: its first run has the JVM dump one under a name of its
    own, and a run after that dump has settled maps it; a dump still fresh is left alone."""
    import os
    import time

    from compaction.clean import session

    archive = tmp_path / "share" / "spark.jsa"
    monkeypatch.setattr(session, "class_archive", lambda: archive)
    first = session.class_archive_option()
    assert first is not None and first.startswith(f"-XX:ArchiveClassesAtExit={archive}.") and first.endswith(".dump")
    dump = first.split("=", 1)[1]
    with open(dump, "wb") as written:
        written.write(b"classes")  # as the JVM leaves it at its exit
    again = session.class_archive_option()
    assert again is not None and again.startswith("-XX:ArchiveClassesAtExit=") and again != first, \
        "a dump that may still be being written is not mapped"
    settled = time.time() - session.ARCHIVE_SETTLE_S - 1
    os.utime(dump, (settled, settled))
    assert session.class_archive_option() == f"-XX:SharedArchiveFile={archive}"
    assert archive.read_bytes() == b"classes" and not os.path.exists(dump)
    assert session.class_archive_option() == f"-XX:SharedArchiveFile={archive}"


def test_no_archive_is_dumped_where_the_folder_cannot_be_written(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from compaction.clean import session

    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    monkeypatch.setattr(session, "class_archive", lambda: folder / "spark.jsa")
    monkeypatch.setattr(session.os, "access", lambda path, mode: False)  # root writes anywhere: ask as a user would
    assert session.class_archive_option() is None
