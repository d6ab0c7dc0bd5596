"""The one place a SparkSession is built, classic or Spark Connect, with the settings the cleaner relies on.

A classic session runs on a master (``--master``: local mode, a standalone cluster, YARN, Kubernetes; or
spark-submit's); a Spark Connect session talks to a server (``--remote sc://HOST:PORT`` or Spark's own
``SPARK_REMOTE``; ``local[N]`` starts one in this process). The cleaner runs the same stages on both
(:mod:`compaction.engine.stages`).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import logging
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import cast

import pyarrow as pa
import pyspark
from py4j.protocol import Py4JError, Py4JJavaError
from pyspark import SparkConf, SparkContext
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from compaction.errors import CompactionError, ConfigError, SparkStartError

#: Settings every session gets unless the caller (or spark-submit --conf) says otherwise.
DEFAULTS = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.adaptive.enabled": "true",
    # Let adaptive execution coalesce shuffle partitions inside the persisted decision too.
    "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.python.worker.reuse": "true",
    # Off unless asked (--spark-conf spark.ui.showConsoleProgress=true): the bar is drawn over the job's own
    # lines on stderr, and pyspark turns it on by default (it launches its JVM as a "shell").
    "spark.ui.showConsoleProgress": "false",
    # Spark's own log (warnings and errors only) through this setting rather than a SparkContext, which a Spark
    # Connect session does not have.
    "spark.log.level": os.environ.get("COMPACTION_SPARK_LOG_LEVEL", "WARN"),
}
#: The defaults a session of a Spark Connect server can take (SQL settings of the session): the server was
#: started with its own static settings.
SESSION_DEFAULTS = ("spark.sql.execution.arrow.pyspark.enabled", "spark.sql.adaptive.enabled",
                    "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning", "spark.sql.session.timeZone")
#: Spark's start-up lines ("Using Spark's default log4j profile", the native-hadoop warning) are noise to a
#: user of the job: a driver this process starts logs warnings only, through this file (spark-submit's JVM is
#: configured by spark-submit).
LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")

#: Attempts per task: Spark's default on a cluster (``spark.task.maxFailures``), given to local mode too.
TASK_ATTEMPTS = 4
#: Seconds to wait for a standalone master to accept a connection: a live one answers at once.
MASTER_CONNECT_TIMEOUT_S = 5
#: A Spark Connect URL: ``sc://`` [user info ``@``] host and port, then ``;``-separated parameters (a token).
SPARK_CONNECT_URL = re.compile(r"(sc://)(?:[^\s@/;\]]*@)?([^\s/;\]]*)(?:/?;[^\s\]]*)?")
#: Seconds for ``java -version`` with the driver's options (it takes some 50 ms).
JAVA_CHECK_TIMEOUT_S = 30
LOCAL_MASTER = re.compile(r"local(?:\[(\*|\d+)\])?")
#: Every local master Spark takes: local, local[N], local[*], local[N,F], local[*,F], and local-cluster[N,C,M]
#: (N workers of C cores and M MiB in separate JVMs on this machine, as a standalone cluster schedules them).
ANY_LOCAL_MASTER = re.compile(r"local(?:\[(?:\*|[1-9][0-9]*)(?:,[1-9][0-9]*)?\])?"
                              r"|local-cluster\[[1-9][0-9]*,[1-9][0-9]*,[1-9][0-9]*\]", re.ASCII)


def class_archive() -> Path:
    """Where this environment's JVM class-data-sharing archive for Spark lives (made by ``make setup``).

    Named by the pyspark version and the java binary, so a different JVM or Spark never maps a stale one
    (and a mismatch only makes the JVM load classes the usual way).
    """
    java = os.path.realpath(shutil.which("java") or "java")
    tag = hashlib.sha256(f"{java}:{os.path.getmtime(java) if os.path.exists(java) else 0}".encode()).hexdigest()[:12]
    return Path(sys.prefix) / "share" / "compaction" / f"spark-{pyspark.__version__}-{tag}.jsa"


#: A class archive a JVM dumped at its exit becomes the archive once unchanged this long (the dump, seconds, is done).
ARCHIVE_SETTLE_S = 10


def class_archive_option() -> str | None:
    """The driver JVM's option for Spark's class-data-sharing archive: map it when there is one (classes mapped,
    not loaded: about 2.5 s of start-up); else have this JVM dump the classes it loads at its exit, so that the
    next run has one (``make setup`` makes it in a checkout; an installed wheel gets it from its first run).

    A dump is written under a name of its own and becomes the archive in a later run once it has settled, so
    that two first runs at once never write one file and no JVM maps a dump still being written (a JVM that
    cannot map an archive loads its classes the usual way). Nothing is dumped where the folder is not writable.
    """
    archive = class_archive()
    if not archive.exists():
        dumps = sorted(archive.parent.glob(f"{archive.name}.*.dump")) if archive.parent.is_dir() else []
        settled = [d for d in dumps if time.time() - d.stat().st_mtime > ARCHIVE_SETTLE_S]  # clock-ok: file age
        if settled:
            with contextlib.suppress(OSError):  # another run took it first
                os.replace(settled[0], archive)
    if archive.exists():
        return f"-XX:SharedArchiveFile={archive}"
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    if not os.access(archive.parent, os.W_OK):
        return None
    return f"-XX:ArchiveClassesAtExit={archive}.{uuid.uuid4().hex}.dump"


def make_class_archive() -> Path:
    """Run a small local job whose JVM dumps the classes it loaded into :func:`class_archive` at exit."""
    archive = class_archive()
    archive.parent.mkdir(parents=True, exist_ok=True)
    code = ("from compaction.clean.session import spark_session\n"
            f"s = spark_session('local[2]', conf={{'spark.ui.enabled': 'false', 'spark.driver.extraJavaOptions': "
            f"'-XX:ArchiveClassesAtExit={archive}'}})\n"
            "s.range(0, 4, 1, 4).mapInArrow(lambda batches: batches, 'id long').collect()\n"
            "s.createDataFrame([(1, 'a')], 'k int, v string').groupBy('v').count().collect()\n"
            "s.stop()\n")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                   env={**os.environ, "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")})
    return archive


def check_master(master: str) -> None:
    """Fail at once on a malformed master URL or a standalone master that is not listening (instead of after
    Spark's registration retries, a minute later)."""
    if master.startswith("spark://"):
        for address in master.removeprefix("spark://").split(","):
            host, _, port = address.rpartition(":")
            if not host or not port.isdigit():
                raise CompactionError(f"Spark master {master} must look like spark://HOST:PORT")
            try:
                socket.create_connection((host, int(port)), timeout=MASTER_CONNECT_TIMEOUT_S).close()
            except OSError as err:
                raise SparkStartError(f"Spark cannot start: no Spark master is listening at {master} ({err}); start "
                                      "the master, or give the URL of a running one with --master") from err
    elif master.startswith("local"):
        if not ANY_LOCAL_MASTER.fullmatch(master):
            raise CompactionError(f"Spark master {master!r} is not local, local[N], local[*], local[N,F] or "
                                  "local-cluster[WORKERS,CORES,MEMORY_MB]")
    elif not (master == "yarn" or master.startswith(("k8s://", "mesos://", "sc://"))):
        raise CompactionError(f"Spark master {master!r} is not local[*], local[N], spark://HOST:PORT, yarn, "
                              "k8s://... or local-cluster[N,C,M]")


def without_secrets(text: str) -> str:
    """``text`` with every Spark Connect URL's user info and parameters (``;token=...``) left out."""
    return SPARK_CONNECT_URL.sub(r"\1\2", text)


def check_java(java_options: str = "") -> None:
    """Fail with the cause when the driver's JVM could not start: no java where Spark's launcher looks for it
    (``$JAVA_HOME/bin/java``, else ``java`` on PATH), or a JVM that exits at once with the driver's options.
    pyspark itself says only that the gateway exited (``JAVA_GATEWAY_EXITED``), after the JVM's own lines."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if java is None:
        raise SparkStartError("Spark cannot start: there is no java on PATH and JAVA_HOME is not set; install "
                              "Java 17 or later, or set JAVA_HOME to one")
    if not os.access(java, os.X_OK):
        raise SparkStartError(f"Spark cannot start: JAVA_HOME is {home}, which has no bin/java; set JAVA_HOME to "
                              "a Java 17 or later installation, or unset it to use the java on PATH")
    # Spark's launcher adds IgnoreUnrecognizedVMOptions, so an unknown -XX option is not a failure here either.
    command = [java, "-XX:+IgnoreUnrecognizedVMOptions", *shlex.split(java_options), "-version"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, errors="replace", timeout=JAVA_CHECK_TIMEOUT_S,
                                stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SparkStartError(f"Spark cannot start: {java} does not run ({err}); check JAVA_HOME and PATH") from err
    if result.returncode != 0:
        lines = [line.strip() for line in (result.stderr + result.stdout).splitlines()]
        cause = next((line for line in lines if line and not line.startswith(("Error: Could not create",
                                                                              "Error: A fatal exception"))),
                     f"exit code {result.returncode}")
        raise SparkStartError(f"Spark cannot start: the driver's JVM ({java}) exits at once with the options "
                              f"{java_options!r}: {cause}; fix spark.driver.extraJavaOptions (or JAVA_HOME)")


def with_task_retries(master: str, attempts: int | str = TASK_ATTEMPTS) -> str:
    """``local``, ``local[N]`` or ``local[*]`` as ``local[N,attempts]``; any other master as it is.

    Local mode ignores ``spark.task.maxFailures`` and gives each task a single attempt, so one killed Python
    worker would abort the whole job; a cluster retries the task. A master that names its attempts
    (``local[N,F]``) is kept.
    """
    found = LOCAL_MASTER.fullmatch(master)
    return f"local[{found.group(1) or 1},{attempts}]" if found else master


def remote_url(remote: str | None = None, master: str | None = None) -> str | None:
    """The Spark Connect server to use: ``remote`` (``--remote``), else Spark's ``SPARK_REMOTE``; None for classic
    Spark. A master besides a server is a contradiction Spark itself refuses, so it is refused here first."""
    url = remote or os.environ.get("SPARK_REMOTE") or None
    if url is not None and master:
        source = "--remote " if remote else "SPARK_REMOTE="
        raise ConfigError(f"both a Spark master ({master}) and a Spark Connect remote ({source}{without_secrets(url)}) "
                          "are set: a session is either classic or Spark Connect; drop --master or "
                          + ("--remote" if remote else "unset SPARK_REMOTE"))
    if url is not None and not (url.startswith("sc://") or ANY_LOCAL_MASTER.fullmatch(url)):
        raise ConfigError(f"Spark Connect remote {without_secrets(url)!r} must look like sc://HOST:PORT (or local[N], "
                          "a server started in this process)")
    return url


def package_archive(folder: Path) -> Path:
    """This package's modules and data as a zip in ``folder`` (what the wheel of ``make dist`` holds), for a
    Spark Connect server's Python workers."""
    try:
        version = importlib.metadata.version("compaction")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        version = "dev"
    root = Path(__file__).resolve().parents[1]
    archive = folder / f"compaction-{version}.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                zipped.write(path, Path("compaction") / path.relative_to(root))
    return archive


def ship_package(session: SparkSession, url: str) -> None:
    """Send this package to the session's Python workers as a Spark Connect artifact, so that they run the
    driver's own version of it (its payloads refuse any other); its dependencies must be installed there."""
    with tempfile.TemporaryDirectory(prefix="compaction-artifact-") as folder:
        try:
            session.addArtifacts(str(package_archive(Path(folder))), pyfile=True)
        except Exception as err:  # a server that refuses artifacts: say what works instead
            raise CompactionError(f"could not send the compaction package to the Spark Connect server {url} ({err}); "
                                  "install it on the server's Python and run with --no-ship-package") from err


def spark_session(master: str | None = None, app_name: str = "compaction",
                  conf: Mapping[str, str] | None = None, light_driver: bool = False,
                  remote: str | None = None, ship: bool = True) -> SparkSession:
    """Get or create the session: a Spark Connect session when ``remote`` or ``SPARK_REMOTE`` names a server,
    else a classic one on ``master`` (None leaves it to spark-submit, or ``local[*]`` outside it).

    ``light_driver`` suits plans whose records never enter the JVM (the Arrow plan): in local mode the
    executors share the driver's JVM, so the Spark SQL plans leave it off.

    Python workers must run this interpreter (they import pyarrow and this package), so PYSPARK_PYTHON
    defaults to it when unset. A local master gets task retries (:func:`with_task_retries`), also one that
    spark-submit was given, or a Spark Connect server started in this process (``local[N]``). A server of its
    own gets this package as an artifact (:func:`ship_package`) unless ``ship`` is false.
    """
    url = remote_url(remote, master or (conf or {}).get("spark.master"))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    attempts = (conf or {}).get("spark.task.maxFailures")
    if url is not None and url.startswith("sc://"):
        return _server_session(url, app_name, conf or {}, ship)
    if url is not None:
        master = url  # a Spark Connect server in this process, on a local master of its own
    elif master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = "local[*]"  # not under spark-submit, which sets the master (and the gateway) itself
    elif master is None:
        SparkContext._ensure_initialized()  # joins the JVM spark-submit started, so the conf reads its settings
        submitted = SparkConf()  # spark-submit's --master and --conf
        given = submitted.get("spark.master") or ""
        if LOCAL_MASTER.fullmatch(given):
            master, attempts = given, attempts or submitted.get("spark.task.maxFailures")
    settings = dict(DEFAULTS)
    if master is not None:
        check_master(master)
        master = with_task_retries(master, attempts or TASK_ATTEMPTS)
        if url is None:
            settings["spark.master"] = master
    if master is not None and master.startswith("local"):
        # Local mode talks only to itself: bind to loopback, not to whatever the host name resolves to.
        settings.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
        if url is not None:  # and so does the Spark Connect server it starts
            settings["spark.connect.grpc.binding.address"] = "127.0.0.1"
    java_options = []
    if light_driver:
        # The driver JVM only schedules tasks and collects metadata: the quick C1 compiler warms up in less
        # time than the full tiered one (about a second off a fresh session's start and first job).
        java_options.append("-XX:TieredStopAtLevel=1")
    if (master is None or master.startswith("local")) and "PYSPARK_GATEWAY_PORT" not in os.environ:
        archive_option = class_archive_option()
        if archive_option is not None:
            java_options.append(archive_option)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # this process starts the driver's JVM
        java_options.append(f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}")
    if java_options:
        settings["spark.driver.extraJavaOptions"] = " ".join(java_options)
    settings.update(conf or {})
    if "PYSPARK_GATEWAY_PORT" not in os.environ and SparkContext._gateway is None:  # this process starts the JVM
        check_java(settings.get("spark.driver.extraJavaOptions", ""))
    try:  # pyspark checks some settings as they are given, the rest as the session starts
        builder = SparkSession.builder.appName(app_name)
        if url is not None and master is not None:  # a Spark Connect server in this process, on the local master
            builder = builder.remote(master)
        for key, value in settings.items():
            builder = builder.config(key, value)
        with warnings.catch_warnings():
            # A Spark Connect server started here takes every setting at start-up, then pyspark tries each again
            # on the session and warns that the static ones cannot change there: noise, not a problem.
            warnings.filterwarnings("ignore", "Failed to set", UserWarning)
            return builder.getOrCreate()
    except (PySparkException, Py4JError) as err:
        raise SparkStartError(f"Spark cannot start: {without_secrets(start_failure(err))}") from err


def start_failure(err: Exception) -> str:
    """One line saying why a session did not start, and what to do."""
    if isinstance(err, PySparkException) and err.getCondition() == "JAVA_GATEWAY_EXITED":
        return ("the driver's JVM exited before it started (its own message is above); check JAVA_HOME and the "
                "spark.driver.* settings")
    if isinstance(err, Py4JJavaError):
        return str(err.java_exception.toString()).splitlines()[0]
    return str(err).strip().splitlines()[0]


def _server_session(url: str, app_name: str, conf: Mapping[str, str], ship: bool) -> SparkSession:
    """A session of the Spark Connect server at ``url``: only the session's SQL settings can be set from here."""
    # Spark Connect's own builder: pyspark's refuses a remote session in a process that runs a classic one.
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    builder = ConnectSession.builder.remote(url).appName(app_name)
    for key, value in {**{key: DEFAULTS[key] for key in SESSION_DEFAULTS}, **conf}.items():
        builder = builder.config(key, value)
    try:
        session = cast(SparkSession, builder.getOrCreate())
    except (PySparkException, Py4JError) as err:
        raise SparkStartError(f"Spark cannot start: {without_secrets(start_failure(err))}") from err
    if ship:
        ship_package(session, url)
    return session


def _import_task_modules(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import pandas  # noqa: F401  (pyarrow takes it for some conversions of the first task)

    import compaction.clean.tasks.apply  # noqa: F401  (with pyarrow, numpy, the payloads and the other stages)

    for _ in batches:  # read to the end: a worker that leaves input unread is not reused for the next task
        pass
    yield from ()


#: Rows of the warm-up job: spread over the session's default parallelism (a task on every core).
WARM_ROWS = 1 << 16


def warm_workers(session: SparkSession) -> threading.Thread:
    """Start a Python worker on every core, with the task modules imported, while the driver plans.

    A fresh worker forks and imports for one to two seconds before its first task runs. This job, run from
    a background thread, pays that while the driver reads manifests and samples keys, so the first stage's
    tasks start at once. Its failure is not the run's: a real task would fail the same way, and is handled.
    """

    def run() -> None:
        try:
            session.range(0, WARM_ROWS).mapInArrow(_import_task_modules, "id long").collect()
        except Exception as err:  # only a warm-up
            logging.getLogger(__name__).debug("warming the Python workers failed: %s", err)

    thread = threading.Thread(target=run, name="warm-workers", daemon=True)
    thread.start()
    return thread


if __name__ == "__main__":
    print(f"class-data-sharing archive for the Spark driver: {make_class_archive()}")
