"""Spark's Python daemon, importing pyspark from its installed package rather than from Spark's ``pyspark.zip``.

Spark runs the daemon that forks its Python workers as ``python -m`` with ``SPARK_HOME/python/lib/pyspark.zip``
first on the path, then py4j's zip and the jar of Spark's Python runner. Where pyspark is installed with pip,
``SPARK_HOME`` is the installed package itself, and the zip holds the same modules without their compiled
bytecode: the daemon and each worker compile every pyspark module they import from source, at every start (1.8-2.5
s for the daemon's imports on 2 cores, against 0.4 s from the installed package). Where the zip lies inside an
installed package that the path also reaches, this daemon takes the zip and the package's jars off the path, and
forgets their cached finders, so that the same modules load from their compiled bytecode and a worker's first
task, which refreshes the path's caches, does not read the zip's and the jar's directories again (0.05-0.1 s of
each worker); then it runs Spark's own daemon. The ``__init__`` modules of its package import nothing of pyspark,
so nothing comes from the zip before the path changes. The job names it (``spark.python.daemon.module``) for a
local master, whose workers run the job's own interpreter.

Its workers allocate Arrow's memory from jemalloc rather than Arrow's default pool (mimalloc) unless
``ARROW_DEFAULT_MEMORY_POOL`` names one: a task holds the same data in fewer pages (a K1 run's peak RSS 2,689 ->
2,402 MB taking turns, docs/performance.md). Arrow reads the variable as its pool first serves, in each worker.
jemalloc asks the kernel for transparent huge pages (``thp:always`` in ``JE_ARROW_MALLOC_CONF``, unless that names
its own settings): a tenth of the page faults, S5 0.89x and K1 0.98x taking turns, S2's night unchanged, their peak
RSS up 2-7%. Where the kernel gives no huge pages (``never``), nothing changes. It keeps freed pages 5 s rather than
Arrow's 1 s (``dirty_decay_ms``, ``muzzy_decay_ms``) before handing them back, which splits a huge page: K1 0.94x,
S2 0.97x, S5 0.97x, S9 1.01x taking turns, the same peak RSS.

Its workers run the job's tasks only, whose Arrow never converts to or from pandas; yet pyarrow imports pandas
(0.2-0.3 s of a worker's first task, a third of its imports) when it first converts anything from Python (a list,
a numpy array), to see whether it is a pandas object, and tries again at each conversion until it has it. In each
worker this daemon forks, ``import pandas`` fails (:class:`NoPandas`); a pandas UDF in the job's session would
fail with that message.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence


def without_bundled_pyspark(path: Sequence[str]) -> list[str]:
    """``path`` without what an installed pyspark package that the path also reaches (``<site>/pyspark`` with
    ``<site>`` on ``path``) put there for a Spark that has no such package: its ``python/lib/pyspark.zip`` (the
    package's own modules, uncompiled) and its ``jars/*.jar`` (Spark adds the jar of its Python runner, which holds
    no Python). The same files of a Spark distribution elsewhere stay."""
    bundled = set()
    for entry in path:
        head, name = os.path.split(entry)
        if name == "pyspark.zip":
            package = os.path.dirname(os.path.dirname(head))  # <site>/pyspark/python/lib/pyspark.zip
        elif name.endswith(".jar") and os.path.basename(head) == "jars":
            package = os.path.dirname(head)  # <site>/pyspark/jars/spark-core_2.13-4.3.0.jar
        else:
            continue
        if (
            os.path.basename(package) == "pyspark"
            and os.path.dirname(package) in path
            and os.path.isfile(os.path.join(package, "__init__.py"))
        ):
            bundled.add(entry)
    return [entry for entry in path if entry not in bundled]


def forget(entries: set[str]) -> None:
    """The import system's finders for ``entries`` (and folders inside them) dropped: a worker's first task refreshes
    every cached finder, which reads a zip's or a jar's whole directory again (the spark-core jar's 6,000 names,
    0.04 s each time)."""
    for key in list(sys.path_importer_cache):
        if key in entries or any(key.startswith(entry + os.sep) for entry in entries):
            del sys.path_importer_cache[key]


#: The workers' Arrow memory, unless their environment sets it (above): jemalloc, on huge pages, with a 5 s decay.
ARROW_MEMORY = {
    "ARROW_DEFAULT_MEMORY_POOL": "jemalloc",
    "JE_ARROW_MALLOC_CONF": "thp:always,dirty_decay_ms:5000,muzzy_decay_ms:5000",
}


class NoPandas:
    """A finder that makes ``import pandas`` fail, first on ``sys.meta_path`` in each worker of this daemon."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> None:
        if name == "pandas":
            raise ModuleNotFoundError("pandas is left out of the job's Python workers", name=name)

    @classmethod
    def install(cls) -> None:
        sys.meta_path.insert(0, cls)


_kept = without_bundled_pyspark(sys.path)
forget(set(sys.path) - set(_kept))
sys.path[:] = _kept

if __name__ == "__main__":
    for name, value in ARROW_MEMORY.items():
        os.environ.setdefault(name, value)
    os.register_at_fork(after_in_child=NoPandas.install)
    from pyspark.daemon import manager

    manager()
