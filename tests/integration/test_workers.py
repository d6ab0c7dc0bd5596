"""The Python workers of a local master: what they import, and from where."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyspark
import pytest

#: Whether the kernel gives transparent huge pages, and to whom (``[madvise]``: those who ask).
THP = "/sys/kernel/mm/transparent_hugepage/enabled"


def _where_pyspark_is(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import os
    import sys

    import pyspark as worker_pyspark

    for _ in batches:
        pass
    package = os.path.dirname(worker_pyspark.__file__)
    # The installed package's zip and jars, on the path or among the finders the worker's first task refreshes.
    files = (os.path.join(package, "python", "lib", "pyspark.zip"), os.path.join(package, "jars") + os.sep)
    bundled = [entry for entry in [*sys.path, *sys.path_importer_cache] if entry.startswith(files)]
    yield pa.record_batch({"file": [worker_pyspark.__file__], "bundled": [repr(bundled)]})


def test_the_workers_import_the_installed_pyspark_not_its_zip(spark: Any) -> None:
    """Spark puts the installed package's own pyspark.zip first on its workers' path, without compiled bytecode,
    and its runner's jar, which holds no Python: the job's daemon takes them off and forgets their finders, so that
    the workers load the same modules compiled and do not read the zip's and the jar's directories again."""
    rows = spark.range(0, 2, 1, 2).mapInArrow(_where_pyspark_is, "file string, bundled string").collect()
    assert {(row.file, row.bundled) for row in rows} == {(pyspark.__file__, "[]")}


def _pandas_in_worker(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import sys

    import numpy as np

    for _ in batches:
        pass
    pa.array([1, 2])  # conversions from Python, where pyarrow looks for pandas
    pa.array(np.arange(3))
    pa.table({"n": [1]})
    imported = "pandas" in sys.modules
    try:
        import pandas  # noqa: F401

        error = ""
    except ImportError as err:
        error = str(err)
    yield pa.record_batch({"imported": [imported], "error": [error]})


def test_the_workers_leave_pandas_out(spark: Any) -> None:
    """pyarrow imports pandas at its first conversion from Python (0.2-0.3 s of a worker's first task): the job's
    workers, whose tasks never convert to or from pandas, cannot import it."""
    rows = spark.range(0, 2, 1, 2).mapInArrow(_pandas_in_worker, "imported boolean, error string").collect()
    assert {(row.imported, row.error) for row in rows} == {(False, "pandas is left out of the job's Python workers")}


def _memory_pool(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for _ in batches:
        pass
    yield pa.record_batch({"pool": [pa.default_memory_pool().backend_name]})


def test_the_workers_allocate_arrow_memory_with_jemalloc(spark: Any) -> None:
    """The job's daemon gives its workers Arrow's jemalloc pool (unless ARROW_DEFAULT_MEMORY_POOL says otherwise):
    a task's peak is held in fewer pages than with the default pool (docs/performance.md)."""
    rows = spark.range(0, 2, 1, 2).mapInArrow(_memory_pool, "pool string").collect()
    assert {row.pool for row in rows} == {"jemalloc"}


def _huge_pages_taken(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import numpy as np

    for _ in batches:
        pass
    buffer = pa.allocate_buffer(64 << 20)  # from the worker's default pool
    np.frombuffer(buffer, dtype=np.uint8)[:] = 1  # faulted in (or already, if the pool reuses pages it had)
    start, end = buffer.address, buffer.address + buffer.size
    huge_kb = 0
    inside = False
    with open("/proc/self/smaps") as smaps:  # the huge pages of the mappings the buffer lies in
        for line in smaps:
            first = line.split(maxsplit=1)[0]
            if not first.endswith(":"):  # a mapping's header: its address range
                low, high = (int(bound, 16) for bound in first.split("-"))
                inside = low < end and start < high
            elif inside and first == "AnonHugePages:":
                huge_kb += int(line.split()[1])
    yield pa.record_batch({"kb": [huge_kb]})


@pytest.mark.skipif(
    not Path(THP).exists() or "[never]" in Path(THP).read_text(), reason="the kernel gives no transparent huge pages"
)
def test_the_workers_arrow_memory_comes_in_huge_pages(spark: Any) -> None:
    """jemalloc asks for transparent huge pages in the workers (a tenth of the page faults: docs/performance.md):
    the mappings a 64 MB buffer from the worker's pool lies in hold most of it in them (none without the setting)."""
    rows = spark.range(0, 2, 1, 2).mapInArrow(_huge_pages_taken, "kb long").collect()
    assert all(row.kb >= 32 << 10 for row in rows), [row.kb for row in rows]
