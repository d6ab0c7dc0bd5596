"""The clean pass's stages run in this process: the engine's own :class:`~compaction.engine.stages.LocalStages`,
which runs the same row bodies and codecs as a Spark stage (units pickled on the way in, outcomes on the way out).

It lets the job's own code (planning, the Arrow plan's tasks, both stages of a split partition, the commits) run
hundreds of times per test without starting a JVM. The Spark SQL plans need Spark.
"""

from __future__ import annotations

from compaction.engine.stages import LocalStages

#: Passed to :class:`compaction.clean.cleaner.Cleaner` in place of a SparkSession (the Arrow plan only).
InlineStages = LocalStages
#: The name the tests use for it: a session in all but name, for the Arrow plan.
InlineSession = LocalStages
