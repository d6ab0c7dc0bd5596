"""Spark's discovery of the data source ``compaction``: Spark registers the ``DefaultSource`` of every installed
top-level module named ``pyspark_*``, so ``spark.read.format("compaction")`` works with the package installed."""

from compaction.spark.source import CompactionDataSource as DefaultSource

__all__ = ["DefaultSource"]
