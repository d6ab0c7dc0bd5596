"""Sail (``pysail``): a Spark Connect server written in Rust, without a JVM; ``--remote sail`` starts one here.

Sail runs the job's Python tasks (``mapInArrow``, ``applyInArrow``) inside its own process, on threads, with no
Python workers and no task context. In its default ``local`` mode a task runs once: a task that raises fails its
query (the job's tasks catch their own failures, so that partition alone fails), and a task that ends the
interpreter ends the server, and the run with it (nothing of the pass is committed). So Spark's retry and
speculation settings have no meaning there, and a run that asks for them is refused.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import pyspark
from pyspark.sql import SparkSession

from compaction.engine.session.jvm import verbose
from compaction.errors import ConfigError, SparkStartError

log = logging.getLogger(__name__)

#: ``--remote sail``: a Sail server started in this process, on a loopback port of its own.
SAIL = "sail"
#: The pyspark versions Sail 0.7 runs (it refuses 4.3 and later in the server's environment).
SAIL_PYSPARK = ((4, 0), (4, 3))
INSTALL = "pip install 'compaction[sail]' in a virtualenv of its own (pysail, with pyspark 4.0 to 4.2.x)"
#: Settings that promise what Sail cannot keep: task attempts beyond the first, speculative attempts.
SPARK_ONLY = ("spark.task.maxFailures", "spark.speculation")

_servers: list[Any] = []  # the servers started here live as long as the process


def start_sail() -> str:
    """Start a Sail server in this process on 127.0.0.1 and return its ``sc://`` URL; refused in one line when
    this environment has no Sail, or a pyspark Sail does not run."""
    version = tuple(int(part) for part in pyspark.__version__.split(".")[:2])
    if not SAIL_PYSPARK[0] <= version < SAIL_PYSPARK[1]:
        raise SparkStartError(
            f"--remote sail needs pyspark 4.0 to 4.2.x, which Sail 0.7 runs, and this environment "
            f"has pyspark {pyspark.__version__}: {INSTALL}"
        )
    # Sail logs through Rust's env_logger: its INFO lines (a session created, removed) and the warning it gives as
    # the process ends (the server's actors aborted) are Spark's start-up lines of this engine; -v shows them.
    os.environ.setdefault("RUST_LOG", "info" if verbose() else "error")
    try:
        from pysail.spark import SparkConnectServer
    except ImportError as err:
        raise SparkStartError(f"--remote sail needs Sail, which this environment lacks ({err}): {INSTALL}") from err
    server = SparkConnectServer("127.0.0.1", 0)
    server.start(background=True)
    address = server.listening_address
    if address is None:
        raise SparkStartError("Sail's server did not start listening on 127.0.0.1")
    _servers.append(server)
    log.debug("Sail's Spark Connect server listens on %s:%s in this process", *address)
    return f"sc://{address[0]}:{address[1]}"


def is_sail(session: SparkSession) -> bool:
    """Whether a Spark Connect session's server is Sail: Spark's ``version()`` is its own version and revision,
    Sail's its own version (0.x) beside the Spark version it speaks."""
    found = session.sql("SELECT version()").first()
    return found is not None and str(found[0]).split(" ")[0] != session.version


def check_sail_settings(conf: Mapping[str, str]) -> None:
    """Refuse settings whose promise Sail cannot keep (see the module's docstring)."""
    asked = [key for key in SPARK_ONLY if key in conf]
    if asked:
        raise ConfigError(
            f"{', '.join(f'{key}={conf[key]}' for key in asked)}: Sail runs each task once, in its own "
            "process, so no task is retried or speculated there; drop the setting, or run on Spark "
            "(--master, or a Spark Connect server)"
        )
