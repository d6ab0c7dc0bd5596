"""The one place a SparkSession is built, with the settings the cleaner relies on."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

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
