"""The session helper: local mode retries failed tasks as a cluster does."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pyspark
import pytest

from compaction.engine.daemon import without_bundled_pyspark
from compaction.engine.session import WarmWorkers, check_master, stop_session, with_task_retries
from compaction.engine.session.build import LOCAL_DEFAULTS
from compaction.engine.stages import SparkStages
from compaction.errors import CompactionError


@pytest.mark.parametrize(
    ("master", "expected"),
    [
        ("local", "local[1,4]"),
        ("local[3]", "local[3,4]"),
        ("local[*]", "local[*,4]"),
        ("local[2,1]", "local[2,1]"),
        ("spark://host:7077", "spark://host:7077"),
        ("yarn", "yarn"),
    ],
)
def test_a_local_master_gets_the_task_attempts_a_cluster_gives(master: str, expected: str) -> None:
    assert with_task_retries(master) == expected


def test_the_attempts_can_be_set() -> None:
    assert with_task_retries("local[2]", "2") == "local[2,2]"


@pytest.mark.parametrize(
    "master", ["local", "local[2]", "local[*]", "local[2,3]", "local[*,4]", "local-cluster[2,1,1024]"]
)
def test_every_local_master_spark_takes_is_accepted(master: str) -> None:
    check_master(master)


@pytest.mark.parametrize(
    "master",
    ["local[0]", "local-cluster[2,1]", "local-cluster[2, 1, 1024]", "localhost:7077", "locall[2]", "mesos-cluster"],
)
def test_a_malformed_master_is_refused_with_the_forms_spark_takes(master: str) -> None:
    with pytest.raises(CompactionError, match="local-cluster"):
        check_master(master)


def test_a_local_cluster_master_keeps_its_own_task_attempts() -> None:
    assert with_task_retries("local-cluster[2,1,1024]") == "local-cluster[2,1,1024]", (
        "a local cluster schedules like a standalone one: spark.task.maxFailures applies"
    )


def test_a_run_maps_the_environments_class_archive_and_never_dumps_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dumping an archive costs a run 15-20 s at its JVM's exit: only `compaction warm-up` dumps one; a run maps it
    when there is one, else starts as Spark always does."""
    from compaction.engine.session import archive

    path = tmp_path / "share" / "spark.jsa"
    monkeypatch.setattr(archive, "class_archive", lambda: path)
    monkeypatch.delenv(archive.DUMP_VARIABLE, raising=False)
    assert archive.class_archive_option() is None
    path.parent.mkdir()
    path.write_bytes(b"classes")
    assert archive.class_archive_option() == f"-XX:SharedArchiveFile={path}"
    monkeypatch.setenv(archive.DUMP_VARIABLE, str(tmp_path / "dump"))
    assert archive.class_archive_option() == f"-XX:ArchiveClassesAtExit={tmp_path / 'dump'}", "the warm-up's own run"


def test_the_warm_up_keeps_an_archive_that_is_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from compaction.engine.session import archive

    path = tmp_path / "spark.jsa"
    path.write_bytes(b"classes")
    monkeypatch.setattr(archive, "class_archive", lambda: path)
    monkeypatch.setattr("subprocess.run", lambda *a, **k: pytest.fail("no pass runs for an archive there"))
    built = archive.build_class_archive(["true"])
    assert (built.archive, built.built, built.size_bytes) == (path, False, 7)


def test_the_warm_up_names_a_folder_it_cannot_write_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from compaction.engine.session import archive

    folder = tmp_path / "read-only"
    folder.mkdir()
    monkeypatch.setattr(archive, "class_archive", lambda: folder / "spark.jsa")

    def refuse(self: Path, *args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "touch", refuse)  # root writes anywhere: refuse as a user's folder would
    with pytest.raises(
        CompactionError,
        match=f"cannot write the class archive in {folder} .Permission denied.: run `compaction warm-up` as the owner",
    ):
        archive.build_class_archive(["true"])


class _Job:
    """A warm-up job's stand-in: its build waits for ``release``; ``collect`` records that it ran."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release
        self.collected = threading.Event()

    def range(self, *_: object) -> _Job:
        assert self.release.wait(10)
        return self

    def mapInArrow(self, *_: object) -> _Job:
        return self

    def collect(self) -> list[object]:
        self.collected.set()
        return []


def test_a_pass_that_submits_its_stage_first_leaves_the_warm_up_unsubmitted() -> None:
    session = _Job(threading.Event())
    warming = WarmWorkers(session, ["json"])  # type: ignore[arg-type]
    warming.stand_down()  # the pass's first stage, before the warm-up's job was built
    session.release.set()
    warming.finish(10)
    assert not warming.submitted and not session.collected.is_set()


def test_a_warm_up_submitted_before_the_pass_runs_and_is_waited_for() -> None:
    session = _Job(threading.Event())
    session.release.set()
    warming = WarmWorkers(session, ["json"])  # type: ignore[arg-type]
    assert session.collected.wait(10)
    warming.stand_down()
    warming.finish(10)
    assert warming.submitted


class _Session(_Job):
    """A session whose warm-up job's build waits for ``release`` (as a fresh JVM's planning holds it up), while the
    pass's stage frames build at once."""

    def range(self, *_: object) -> _Session:
        if threading.current_thread().name == "warm-workers":
            assert self.release.wait(10)
        return self

    def selectExpr(self, *_: object) -> _Session:
        return self


def test_a_warm_up_still_being_built_as_the_first_stage_is_built_is_never_submitted() -> None:
    session = _Session(threading.Event())
    stages = SparkStages(session, warm=["json"])  # type: ignore[arg-type]
    stages.frame([["a unit"]])  # the first stage is being built: the warm-up's job would queue behind it
    session.release.set()
    assert stages.warming is not None
    stages.warming._thread.join(10)  # the warm-up's own course to its end, before the run's end stands it down
    stages.finish()
    assert not stages.warming.submitted and not session.collected.is_set()


class _Server:
    """pyspark's accumulator server, whose handler looks for the stop once a second: its shutdown lasts until the
    test lets it end (or 30 s, should a stop wait for it)."""

    def __init__(self) -> None:
        self.may_end = threading.Event()
        self.stopped = threading.Event()

    def shutdown(self) -> None:
        self.may_end.wait(30)
        self.stopped.set()


def test_stopping_a_session_leaves_the_accumulator_servers_second_to_a_thread() -> None:
    server = _Server()
    context = SimpleNamespace(_accumulatorServer=server)
    calls: list[object] = []
    session = SimpleNamespace(_sc=context, stop=lambda: calls.append(context._accumulatorServer))
    stop_session(session)  # type: ignore[arg-type]
    assert not server.stopped.is_set(), "the stop returned while the server's shutdown was still going on"
    assert calls == [None]  # Spark stopped without waiting for the server ...
    server.may_end.set()
    assert server.stopped.wait(10)  # ... which stops all the same


def test_stopping_a_spark_connect_session_is_its_own_stop() -> None:
    calls: list[str] = []
    stop_session(SimpleNamespace(stop=lambda: calls.append("stop")))  # type: ignore[arg-type]
    assert calls == ["stop"]


def test_looking_for_running_sessions_leaves_spark_connect_unimported_unless_it_was() -> None:
    # A fresh interpreter, as a run starts: Spark Connect's modules (grpc and all, 0.6 s of a core) are imported
    # only by a run that uses them; one that did not cannot have a Connect session to find.
    code = (
        "import sys; from compaction.engine.session import running_sessions; "
        "print(running_sessions(), 'pyspark.sql.connect.session' in sys.modules, 'grpc' in sys.modules)"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert found == ["[]", "False", "False"]


def test_the_driver_preloads_what_pysparks_first_call_into_the_jvm_imports() -> None:
    # A fresh interpreter, as a run starts: pyspark's numpy converter, which its first call into the JVM with
    # arguments asks, imports the module the driver imports on a thread while its JVM starts (half a second of a core).
    code = (
        "import sys; from pyspark.sql.types import NumpyArrayConverter; "
        "from compaction.engine.session.build import PRELOADED; "
        "before = PRELOADED in sys.modules; NumpyArrayConverter().can_convert(1); "
        "print(before, PRELOADED in sys.modules)"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert found == ["False", "True"]


def test_the_daemon_takes_off_the_path_only_what_an_installed_pyspark_is_the_source_of(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    bundled, py4j = str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")
    jar = str(site / "pyspark" / "jars" / "spark-core_2.13-4.3.0.jar")  # Spark's Python runner's, no Python in it
    distribution = str(tmp_path / "spark-4.3.0" / "python" / "lib" / "pyspark.zip")  # SPARK_HOME of its own
    distribution_jar = str(tmp_path / "spark-4.3.0" / "jars" / "spark-core_2.13-4.3.0.jar")
    assert without_bundled_pyspark([bundled, py4j, jar, "/work", str(site)]) == [py4j, "/work", str(site)]
    # The installed package out of the path's reach, or a distribution's files: the only pyspark there.
    assert without_bundled_pyspark([bundled, py4j, jar, "/work"]) == [bundled, py4j, jar, "/work"]
    assert without_bundled_pyspark([distribution, distribution_jar, str(site)]) == [
        distribution,
        distribution_jar,
        str(site),
    ]
    (site / "pyspark" / "__init__.py").unlink()  # a folder named pyspark that is no package
    assert without_bundled_pyspark([bundled, jar, str(site)]) == [bundled, jar, str(site)]


def test_a_local_master_runs_the_daemon_that_imports_the_installed_pyspark() -> None:
    assert LOCAL_DEFAULTS["spark.python.daemon.module"] == "compaction.engine.daemon"
    # Run as Spark runs it, with the zip first on the path: nothing of pyspark is loaded before the path changes.
    code = "import sys, compaction.engine.daemon, pyspark; print(pyspark.__file__, 'pyspark.zip' in str(sys.path))"
    zip_path = Path(pyspark.__file__).parent / "python" / "lib" / "pyspark.zip"
    found = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(zip_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert found == [pyspark.__file__, "False"]
