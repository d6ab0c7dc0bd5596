"""The driver's JVM when this process starts it: its options, its log, and its stderr passed on to ours.

Spark's launcher gives every JVM ``--add-modules=jdk.incubator.vector``, and the JVM announces an incubator
module at each start (``WARNING: Using incubator modules: jdk.incubator.vector``) with no option to stop it:
the JVM this process starts writes to a pipe whose lines are passed on to our stderr, that notice left out
unless ``-v`` is given. Everything else the JVM says (its own failures, Spark's log at the level asked) passes.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway

log = logging.getLogger(__name__)

#: Spark's start-up lines ("Using Spark's default log4j profile", the native-hadoop warning) are noise to a
#: user of the job: a driver this process starts logs through this file (spark-submit's JVM is configured by
#: spark-submit, which scripts/spark-submit.sh points at the same file).
LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
#: What the JVM prints at every start whatever the run does (see the module's docstring).
JVM_NOTICES = (b"WARNING: Using incubator modules: ",)


def verbose() -> bool:
    """Whether the job logs its details (``-v``): Spark's own lines then show as well."""
    return log.isEnabledFor(logging.DEBUG)


def spark_log_level() -> str:
    """Spark's log level: warnings and errors, Spark's INFO lines too under ``-v``; COMPACTION_SPARK_LOG_LEVEL
    (INFO, DEBUG...) sets it outright."""
    return os.environ.get("COMPACTION_SPARK_LOG_LEVEL") or ("INFO" if verbose() else "WARN")


def starts_driver() -> bool:
    """Whether this process starts the driver's JVM (not spark-submit, not one started already)."""
    return "PYSPARK_GATEWAY_PORT" not in os.environ and SparkContext._gateway is None


def launch_driver(settings: Mapping[str, str]) -> None:
    """Start the driver's JVM with ``settings`` as pyspark would, its stderr through :func:`_pass_on` (from the
    start: a JVM that fails to start says why before pyspark says that it exited)."""
    conf = SparkConf(loadDefaults=False).setAll(list(settings.items()))
    read_end, write_end = os.pipe()
    passing = threading.Thread(
        target=_pass_on, args=(os.fdopen(read_end, "rb"), verbose()), name="jvm-stderr", daemon=True
    )
    passing.start()
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stderr": write_end})  # type: ignore[no-untyped-call]
    except BaseException:
        os.close(write_end)
        passing.join(5)  # what the JVM said before it exited, before the error that says it did
        raise
    os.close(write_end)  # the JVM holds its own copy
    SparkContext._ensure_initialized(gateway=gateway)


def _pass_on(stream: IO[bytes], everything: bool) -> None:
    """The JVM's stderr, line by line, onto this process's (file descriptor 2, where the JVM wrote before)."""
    for line in iter(stream.readline, b""):
        if everything or not line.startswith(JVM_NOTICES):
            view = memoryview(line)
            while view:
                view = view[os.write(2, view) :]
