"""Cleaning: choose the partitions worth cleaning, decide which records survive, and commit the result.

- :mod:`~compaction.rules`: the cleaning rules, stated once (which record wins per key under each
  strategy, the tombstone and marker lifecycle, the uncleanable boundary); every winner search derives from it.
- :mod:`~compaction.clean.settings`: a topic's settings (Kafka's names, defaults, validators) and the job's own.
- :mod:`~compaction.clean.planner`: the plan, pure decisions from manifests and ``now``: which partitions, which
  offset range, how many key ranges; :mod:`~compaction.clean.layout`: which objects a pass writes (its layout).
- :mod:`~compaction.winners` and :mod:`~compaction.clean.dedupe`: the winner search, with Arrow in a task or
  with Spark SQL; :mod:`~compaction.clean.tasks`: what executors do.
- :mod:`~compaction.engine.session` builds the SparkSession; :mod:`~compaction.clean.cleaner` runs a pass and
  commits each partition through the store; :mod:`~compaction.clean.results` is what it reports.

Cleaning reads and writes only through :mod:`compaction.store`.
"""
