"""The Python workers of a local master: what they import, and from where."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyspark


def _where_pyspark_is(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import sys

    import pyspark as worker_pyspark

    for _ in batches:
        pass
    on_path = [entry for entry in sys.path if entry.endswith("pyspark.zip")]
    yield pa.record_batch({"file": [worker_pyspark.__file__], "zips": pa.array([len(on_path)], pa.int32())})


def test_the_workers_import_the_installed_pyspark_not_its_zip(spark: Any) -> None:
    """Spark puts the installed package's own pyspark.zip first on its workers' path, without compiled bytecode:
    the job's daemon takes it off, so that they load the same modules compiled."""
    rows = spark.range(0, 2, 1, 2).mapInArrow(_where_pyspark_is, "file string, zips int").collect()
    assert {(row.file, row.zips) for row in rows} == {(pyspark.__file__, 0)}


def _memory_pool(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for _ in batches:
        pass
    yield pa.record_batch({"pool": [pa.default_memory_pool().backend_name]})


def test_the_workers_allocate_arrow_memory_with_jemalloc(spark: Any) -> None:
    """The job's daemon gives its workers Arrow's jemalloc pool (unless ARROW_DEFAULT_MEMORY_POOL says otherwise):
    a task's peak is held in fewer pages than with the default pool (docs/performance.md)."""
    rows = spark.range(0, 2, 1, 2).mapInArrow(_memory_pool, "pool string").collect()
    assert {row.pool for row in rows} == {"jemalloc"}
