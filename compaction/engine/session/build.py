"""Building the session, classic or Spark Connect, with the settings the cleaner relies on; stopping it."""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
import warnings
from collections.abc import Mapping
from typing import cast

from py4j.protocol import Py4JError, Py4JJavaError
from pyspark import SparkConf, SparkContext
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from compaction.engine.session.archive import class_archive_option
from compaction.engine.session.artifacts import check_installed_package, ship_package
from compaction.engine.session.checks import (
    LOCAL_MASTER,
    TASK_ATTEMPTS,
    check_java,
    check_master,
    remote_url,
    with_task_retries,
    without_secrets,
)
from compaction.engine.session.jvm import LOG4J_CONFIG, launch_driver, spark_log_level, starts_driver
from compaction.engine.session.sail import SAIL, SPARK_ONLY, check_sail_settings, is_sail, start_sail
from compaction.errors import SparkStartError

log = logging.getLogger(__name__)

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
}
#: The defaults a session of a Spark Connect server can take (SQL settings of the session): the server was
#: started with its own static settings.
SESSION_DEFAULTS = (
    "spark.sql.execution.arrow.pyspark.enabled",
    "spark.sql.adaptive.enabled",
    "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning",
    "spark.sql.session.timeZone",
)
#: What a local master gets besides: it talks only to itself, so it binds to loopback rather than to whatever the
#: host name resolves to; and a run of a batch job on this machine has no use for Spark's web UI, whose port 4040
#: another Spark on the machine may hold (``--spark-conf spark.ui.enabled=true`` brings it back).
LOCAL_DEFAULTS = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    # The workers run this interpreter, which has this package: they import pyspark from its compiled install,
    # not from Spark's pyspark.zip (compaction.engine.daemon).
    "spark.python.daemon.module": "compaction.engine.daemon",
}


def spark_session(
    master: str | None = None,
    app_name: str = "compaction",
    conf: Mapping[str, str] | None = None,
    light_driver: bool = False,
    remote: str | None = None,
    ship: bool = True,
) -> SparkSession:
    """Get or create the session: a Spark Connect session when ``remote`` or ``SPARK_REMOTE`` names a server,
    else a classic one on ``master`` (None leaves it to spark-submit, or ``local[*]`` outside it).

    ``light_driver`` suits plans whose records never enter the JVM (the Arrow plan): in local mode the
    executors share the driver's JVM, so the Spark SQL plans leave it off.

    Python workers must run this interpreter (they import pyarrow and this package), so PYSPARK_PYTHON
    defaults to it when unset; a local master's JVM binds to loopback (SPARK_LOCAL_IP defaults to 127.0.0.1, so
    Spark does not look for another address when the host name resolves to loopback). A local master gets task
    retries (:func:`with_task_retries`), also one that spark-submit was given, or a Spark Connect server started
    in this process (``local[N]``). A server of its own gets this package as an artifact
    (:func:`~compaction.engine.session.artifacts.ship_package`) unless ``ship`` is false.
    """
    url = remote_url(remote, master or (conf or {}).get("spark.master"))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    attempts = (conf or {}).get("spark.task.maxFailures")
    if url == SAIL:  # the server runs in this process: its tasks import this very package
        check_sail_settings(conf or {})
        return _server_session(start_sail(), app_name, conf or {}, ship=False, local=True)
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
    settings = {**DEFAULTS, "spark.log.level": spark_log_level()}
    if master is not None:
        check_master(master)
        master = with_task_retries(master, attempts or TASK_ATTEMPTS)
        if url is None:
            settings["spark.master"] = master
    launching = starts_driver()
    if master is not None and master.startswith("local"):
        settings.update(LOCAL_DEFAULTS)
        if launching:
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        if url is not None:  # and so does the Spark Connect server it starts
            settings["spark.connect.grpc.binding.address"] = "127.0.0.1"
    java_options = []
    if light_driver:
        # The driver JVM only schedules tasks and collects metadata: the quick C1 compiler warms up in less
        # time than the full tiered one (about a second off a fresh session's start and first job).
        java_options.append("-XX:TieredStopAtLevel=1")
    if launching and (master is None or master.startswith("local")):
        archive_option = class_archive_option()
        if archive_option is not None:
            java_options.append(archive_option)
    if launching:
        java_options.append(f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}")
    if java_options:
        settings["spark.driver.extraJavaOptions"] = " ".join(java_options)
    settings.update(conf or {})
    try:  # pyspark checks some settings as they are given, the rest as the session starts
        if launching:
            threading.Thread(target=_preload, name="preload-pyspark", daemon=True).start()
            check_java(settings.get("spark.driver.extraJavaOptions", ""))
            launch_driver(
                {
                    **settings,
                    "spark.app.name": app_name,
                    **({"spark.master": master} if url is not None and master else {}),
                }
            )
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


#: What pyspark imports on its first call into the JVM with arguments (its numpy converter asks
#: ``pyspark.testing.utils`` whether numpy is there, which imports pandas and protobuf): half a second of the driver's
#: start, imported on a thread while the JVM starts rather than after it.
PRELOADED = "pyspark.testing.utils"


def _preload() -> None:
    try:
        importlib.import_module(PRELOADED)
    except Exception as err:  # pyspark's own import then fails the same way, where it is handled
        log.debug("preloading %s failed: %s", PRELOADED, err)


def running_sessions() -> list[object]:
    """What this process runs now: the classic SparkContext, Spark Connect's default and active sessions (none
    unless Spark Connect's modules were imported: importing them, grpc and all, only to look costs a local run a
    few tenths of a second)."""
    connect = sys.modules.get("pyspark.sql.connect.session")
    sessions = (
        [] if connect is None else [connect.SparkSession._default_session, connect.SparkSession.getActiveSession()]
    )
    return [found for found in (SparkContext._active_spark_context, *sessions) if found is not None]


def started_anew(session: SparkSession, before: list[object]) -> bool:
    """Whether ``session`` (from :func:`spark_session`) is new, rather than one that ran already (``before``, from
    :func:`running_sessions`), or a session on a context that did: whoever started that one stops it."""
    context = getattr(session, "_sc", None)  # a classic session's SparkContext
    return not any(session is found or (context is not None and context is found) for found in before)


def stop_session(session: SparkSession) -> None:
    """Stop a session this process started, so that no Spark job outlives the driver.

    PySpark's stop of a classic session ends with its accumulator server, whose handler looks for the stop once a
    second: up to a second of waiting at the end of every run, after Spark itself has stopped (in some 50 ms).
    That wait is left to a thread of its own, a daemon, which the process's exit may cut short."""
    context = getattr(session, "_sc", None)  # a classic session's; a Spark Connect session has none
    server = getattr(context, "_accumulatorServer", None)
    if server is not None:
        context._accumulatorServer = None  # type: ignore[union-attr]  # not waited for by the stop below
    session.stop()
    if server is not None:
        threading.Thread(target=server.shutdown, name="accumulator-server-stop", daemon=True).start()


def start_failure(err: Exception) -> str:
    """One line saying why a session did not start, and what to do."""
    if isinstance(err, PySparkException) and err.getCondition() == "JAVA_GATEWAY_EXITED":
        return (
            "the driver's JVM exited before it started (its own message is above); check JAVA_HOME and the "
            "spark.driver.* settings"
        )
    if isinstance(err, Py4JJavaError):
        return str(err.java_exception.toString()).splitlines()[0]
    return str(err).strip().splitlines()[0]


def _server_session(url: str, app_name: str, conf: Mapping[str, str], ship: bool, local: bool = False) -> SparkSession:
    """A session of the Spark Connect server at ``url``: only the session's SQL settings can be set from here.

    Its Python workers get this package as an artifact (``ship``); a server that takes none (Sail), or one asked
    for none (``--no-ship-package``), must have this version installed, which a small job checks before any work.
    ``local``: a server in this process, whose tasks import this very package.
    """
    # Spark Connect's own builder: pyspark's refuses a remote session in a process that runs a classic one. Its
    # getOrCreate would return a session this process has already, whatever server that one talks to: create.
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    builder = ConnectSession.builder.remote(url).appName(app_name)
    for key, value in {**{key: DEFAULTS[key] for key in SESSION_DEFAULTS}, **conf}.items():
        builder = builder.config(key, value)
    try:
        session = cast(SparkSession, builder.create())
        if not local and any(key in conf for key in SPARK_ONLY) and is_sail(session):
            check_sail_settings(conf)
        if local:
            return session
        shown = without_secrets(url)
        if not ship:
            check_installed_package(
                session,
                shown,
                "was sent no package (--no-ship-package)",
                "let the job send it (without --no-ship-package)",
            )
        elif not ship_package(session, shown):
            check_installed_package(
                session,
                shown,
                "takes no artifacts (Sail does not)",
                "run on a server that takes them (Spark's own Spark Connect server)",
            )
            log.info(
                "the Spark Connect server %s takes no artifacts: its workers run the compaction package "
                "installed in its Python",
                shown,
            )
    except (PySparkException, Py4JError) as err:
        raise SparkStartError(f"Spark cannot start: {without_secrets(start_failure(err))}") from err
    return session
