"""What is checked before a session starts: the master URL, the Spark Connect remote, the driver's java."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess

from compaction.errors import CompactionError, ConfigError, SparkStartError

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
ANY_LOCAL_MASTER = re.compile(
    r"local(?:\[(?:\*|[1-9][0-9]*)(?:,[1-9][0-9]*)?\])?"
    r"|local-cluster\[[1-9][0-9]*,[1-9][0-9]*,[1-9][0-9]*\]",
    re.ASCII,
)


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
                raise SparkStartError(
                    f"Spark cannot start: no Spark master is listening at {master} ({err}); start "
                    "the master, or give the URL of a running one with --master"
                ) from err
    elif master.startswith("local"):
        if not ANY_LOCAL_MASTER.fullmatch(master):
            raise CompactionError(
                f"Spark master {master!r} is not local, local[N], local[*], local[N,F] or "
                "local-cluster[WORKERS,CORES,MEMORY_MB]"
            )
    elif not (master == "yarn" or master.startswith(("k8s://", "mesos://", "sc://"))):
        raise CompactionError(
            f"Spark master {master!r} is not local[*], local[N], spark://HOST:PORT, yarn, "
            "k8s://... or local-cluster[N,C,M]"
        )


def without_secrets(text: str) -> str:
    """``text`` with every Spark Connect URL's user info and parameters (``;token=...``) left out."""
    return SPARK_CONNECT_URL.sub(r"\1\2", text)


def check_java(java_options: str = "") -> None:
    """Fail with the cause when the driver's JVM could not start: no java where Spark's launcher looks for it
    (``$JAVA_HOME/bin/java``, else ``java`` on PATH), or a JVM that exits at once with the driver's options.
    pyspark itself says only that the gateway exited (``JAVA_GATEWAY_EXITED``), after the JVM's own lines."""
    java = java_binary()
    # Spark's launcher adds IgnoreUnrecognizedVMOptions, so an unknown -XX option is not a failure here either.
    command = [java, "-XX:+IgnoreUnrecognizedVMOptions", *shlex.split(java_options), "-version"]
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=JAVA_CHECK_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SparkStartError(f"Spark cannot start: {java} does not run ({err}); check JAVA_HOME and PATH") from err
    if result.returncode != 0:
        lines = [line.strip() for line in (result.stderr + result.stdout).splitlines()]
        cause = next(
            (
                line
                for line in lines
                if line and not line.startswith(("Error: Could not create", "Error: A fatal exception"))
            ),
            f"exit code {result.returncode}",
        )
        raise SparkStartError(
            f"Spark cannot start: the driver's JVM ({java}) exits at once with the options "
            f"{java_options!r}: {cause}; fix spark.driver.extraJavaOptions (or JAVA_HOME)"
        )


def java_binary() -> str:
    """The java Spark's launcher runs: ``$JAVA_HOME/bin/java``, else ``java`` on PATH; refused when there is none."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if java is None:
        raise SparkStartError(
            "Spark cannot start: there is no java on PATH and JAVA_HOME is not set; install "
            "Java 17 or later, or set JAVA_HOME to one"
        )
    if not os.access(java, os.X_OK):
        raise SparkStartError(
            f"Spark cannot start: JAVA_HOME is {home}, which has no bin/java; set JAVA_HOME to "
            "a Java 17 or later installation, or unset it to use the java on PATH"
        )
    return java


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
        raise ConfigError(
            f"both a Spark master ({master}) and a Spark Connect remote ({source}{without_secrets(url)}) "
            "are set: a session is either classic or Spark Connect; drop --master or "
            + ("--remote" if remote else "unset SPARK_REMOTE")
        )
    if url is not None and not (url.startswith("sc://") or url == "sail" or ANY_LOCAL_MASTER.fullmatch(url)):
        raise ConfigError(
            f"Spark Connect remote {without_secrets(url)!r} must look like sc://HOST:PORT (or local[N], "
            "a Spark server started in this process, or sail, a Sail server started in this process)"
        )
    return url
