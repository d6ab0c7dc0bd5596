"""The one place a SparkSession is built, with the settings the cleaner relies on."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

from compaction.errors import CompactionError

#: Settings every session gets unless the caller (or spark-submit --conf) says otherwise.
DEFAULTS = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.adaptive.enabled": "true",
    # Let adaptive execution coalesce shuffle partitions inside the persisted decision too.
    "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.python.worker.reuse": "true",
    "spark.ui.showConsoleProgress": "true",
}


def check_master(master: str) -> None:
    """Fail at once on a malformed master URL or a standalone master that is not listening (instead of after
    Spark's registration retries, a minute later)."""
    if master.startswith("spark://"):
        for address in master.removeprefix("spark://").split(","):
            host, _, port = address.rpartition(":")
            if not host or not port.isdigit():
                raise CompactionError(f"Spark master {master} must look like spark://HOST:PORT")
            try:
                socket.create_connection((host, int(port)), timeout=5).close()
            except OSError as err:
                raise CompactionError(f"no Spark master is listening at {master} ({err})") from err
    elif not (master == "yarn" or master.startswith(("local", "k8s://", "mesos://", "sc://"))):
        raise CompactionError(f"Spark master {master!r} is not local[*], local[N], spark://HOST:PORT, yarn or "
                              "k8s://...")


def spark_session(master: str | None = None, app_name: str = "compaction",
                  conf: Mapping[str, str] | None = None) -> SparkSession:
    """Get or create the session; ``master`` None leaves it to spark-submit (``local[*]`` outside it).

    Python workers must run this interpreter (they import pyarrow and this package), so PYSPARK_PYTHON
    defaults to it when unset.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = "local[*]"  # not under spark-submit, which sets the master (and the gateway) itself
    if master is not None:
        check_master(master)
        builder = builder.master(master)
    settings = dict(DEFAULTS)
    if master is not None and master.startswith("local"):
        # Local mode talks only to itself: bind to loopback, not to whatever the host name resolves to.
        settings.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(os.environ.get("COMPACTION_SPARK_LOG_LEVEL", "WARN"))
    return session
