"""The store in Spark's own words: the data source ``compaction`` (read, write, readStream, writeStream, in the
column layout and option names of Spark's Kafka source) and SQL table functions for what the commands show.

With the package installed in Spark's Python, ``format("compaction")`` needs no registration: Spark discovers the
top-level module ``pyspark_compaction``, whose ``DefaultSource`` is :class:`~compaction.spark.source.
CompactionDataSource`. :func:`register` registers the source and the SQL functions on a session explicitly (the
functions always need it), and turns on filter pushdown (``spark.sql.python.filterPushdown.enabled``).

Rooms: :mod:`.options` (the options, checked once), :mod:`.rows` (the Kafka source's columns, to and from records),
:mod:`.reader` (the batch read and its pushdown), :mod:`.stream` (the streaming read), :mod:`.writer` (the write's
tasks and its per-partition commit, batch and streaming), :mod:`.source` (the data source, thin adapters), and
:mod:`.functions` (the table functions).
"""

from __future__ import annotations

from typing import Any

PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


def register(spark: Any) -> None:
    """Register the data source ``compaction`` and the SQL functions ``compaction_plan``, ``compaction_status``,
    ``compaction_files`` and ``compaction_history`` on ``spark`` (a classic or a Spark Connect session), and let
    Spark push filters down to the source."""
    from pyspark.sql.functions import udtf

    from compaction.spark.functions import FUNCTIONS
    from compaction.spark.source import CompactionDataSource

    spark.dataSource.register(CompactionDataSource)
    spark.conf.set(PUSHDOWN, "true")
    for name, (function, columns) in FUNCTIONS.items():
        if not _registered(spark, name):  # registered again, Spark warns that it replaced it
            spark.udtf.register(name, udtf(function, returnType=columns))


def _registered(spark: Any, name: str) -> bool:
    from pyspark.errors import PySparkException

    try:
        return bool(spark.catalog.functionExists(name))
    except PySparkException:  # an engine without the catalog's call (Sail): register it
        return False
