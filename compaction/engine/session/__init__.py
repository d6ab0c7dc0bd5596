"""The SparkSession the job runs on (classic Spark, Spark Connect or Sail), and what its start needs.

A classic session runs on a master (``--master``: local mode, a standalone cluster, YARN, Kubernetes; or
spark-submit's); a Spark Connect session talks to a server (``--remote sc://HOST:PORT`` or Spark's own
``SPARK_REMOTE``; ``local[N]`` starts Spark's in this process, ``sail`` Sail's). The job runs the same
stages on all of them (:mod:`compaction.engine.stages`). A module per concern:

- :mod:`.build`: the session itself, with the settings the cleaner relies on;
- :mod:`.checks`: what is checked before it starts (the master, the remote, java);
- :mod:`.jvm`: the driver's JVM when this process starts it (its options, its log, its stderr);
- :mod:`.archive`: the JVM's class-data archive, built by ``compaction warm-up`` and mapped by runs;
- :mod:`.artifacts`: this package sent to a Spark Connect server, or found installed in its Python;
- :mod:`.sail`: Sail, a Spark Connect server without a JVM (``--remote sail`` starts one in this process);
- :mod:`.workers`: the Python workers' warm-up while the driver plans.
"""

from compaction.engine.session.archive import BuiltArchive, build_class_archive, class_archive, class_archive_option
from compaction.engine.session.build import (
    DEFAULTS,
    running_sessions,
    spark_session,
    started_anew,
    stop_session,
)
from compaction.engine.session.checks import check_java, check_master, remote_url, with_task_retries, without_secrets
from compaction.engine.session.workers import WarmWorkers

__all__ = [
    "DEFAULTS",
    "BuiltArchive",
    "WarmWorkers",
    "build_class_archive",
    "check_java",
    "check_master",
    "class_archive",
    "class_archive_option",
    "remote_url",
    "running_sessions",
    "spark_session",
    "started_anew",
    "stop_session",
    "with_task_retries",
    "without_secrets",
]
