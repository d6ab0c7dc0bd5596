"""The engine: how the job's work runs on Spark (a classic session, Spark Connect, Sail) or in this process.

Below both wings that read records through Spark (:mod:`compaction.read` and :mod:`compaction.clean`), which do not
import each other: :mod:`~compaction.engine.codec` is the one row codec (versioned payloads, and the rows tasks and
results travel in), :mod:`~compaction.engine.isolation` runs each unit of work so that its failure stays its own,
:mod:`~compaction.engine.stages` runs units as Spark stages on the DataFrame API (or in this process, through the
same row bodies), and :mod:`~compaction.engine.phases` counts where a task's time goes.
"""
