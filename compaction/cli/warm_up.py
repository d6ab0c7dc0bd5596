"""The warm-up's own process (``python -m compaction.cli.warm_up WORK``, started by ``compaction warm-up``):
a small store generated and cleaned on local Spark, so that the driver's JVM dumps its class archive as it exits.
Apart from :mod:`compaction.cli.environment`, which starts it: this module runs the whole command line."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from compaction.cli.console import main

#: The warm-up's store: a topic whose partitions are cleaned whole and one split into key ranges fed by a shuffle,
#: so that the archive holds the classes of both kinds of stage.
WARM_UP_CONF = """"log.cleanup.policy" = "compact"
"log.roll.ms" = 60000
"log.cleaner.min.cleanable.ratio" = 0.01
[cleaner]
"task.max.records" = 2500
"""


def warm_up_pass(work: Path) -> int:
    """The warm-up's own process: generate a small store in ``work``, clean it on local Spark, and wait for the
    driver's JVM to exit (it dumps the archive as it does)."""
    from pyspark import SparkContext

    store, conf = str(work / "store"), work / "warm-up.toml"
    conf.write_text(WARM_UP_CONF)
    hour_ago = str(int(time.time() * 1000) - 3_600_000)  # clock-ok: the store's records are an hour old
    for topic, partitions, records, seed in (("whole", "2", "4000", "1"), ("split", "1", "12000", "2")):
        code = main(
            [
                "generate",
                store,
                "--topics",
                topic,
                "--partitions",
                partitions,
                "--records",
                records,
                "--keys",
                str(int(records) // 4),
                "--segment-records",
                "1000",
                "--end-time",
                hour_ago,
                "--seed",
                seed,
            ]
        )
        if code:
            return code
    code = main(["run", store, "--conf", str(conf), "--master", "local[2]"])
    gateway = SparkContext._gateway
    if gateway is not None and getattr(gateway, "proc", None) is not None:
        gateway.proc.stdin.close()  # the JVM exits when its stdin closes, and dumps the archive as it exits
        gateway.proc.wait(900)
    return code


if __name__ == "__main__":
    sys.exit(warm_up_pass(Path(sys.argv[1])))
