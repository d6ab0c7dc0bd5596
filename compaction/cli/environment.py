"""The command that prepares the job's environment: ``warm-up`` (the class archive of Spark's driver JVM)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from compaction.cli import common
from compaction.cli.common import Parser
from compaction.cli.output import Output
from compaction.display import human_bytes
from compaction.engine.session import build_class_archive, check_java
from compaction.errors import EXIT_OK

#: The warm-up's store: a topic whose partitions are cleaned whole and one split into key ranges fed by a shuffle,
#: so that the archive holds the classes of both kinds of stage.
WARM_UP_CONF = """"log.cleanup.policy" = "compact"
"log.roll.ms" = 60000
"log.cleaner.min.cleanable.ratio" = 0.01
[cleaner]
"task.max.records" = 2500
"""


def cmd_warm_up(args: argparse.Namespace) -> int:
    """Prepare this environment for quick starts: build the class-data archive of Spark's driver JVM, which every
    later run on a local master maps (about 2.5 s off each start). It runs a small clean pass of its own and takes
    some 25 s, once: run it where the environment is made (after `pip install`, in an image's build; `make setup`
    runs it). A run without the archive starts the way Spark always does.
    """
    check_java()
    built = build_class_archive([sys.executable, "-m", "compaction.cli.environment"], force=args.force)
    size = human_bytes(built.size_bytes)
    Output().line(f"class archive {built.archive} ({size}): built in {built.seconds:.1f} s" if built.built
                  else f"class archive {built.archive} ({size}): already built (--force builds it again)")
    return EXIT_OK


def add_commands(sub: argparse._SubParsersAction[Parser]) -> None:
    p = common.add_command(sub, cmd_warm_up, "prepare this environment for quick starts (Spark's class archive)")
    p.add_argument("--force", action="store_true", help="build the archive again even if there is one")


def warm_up_pass(work: Path) -> int:
    """The warm-up's own process: generate a small store in ``work``, clean it on local Spark, and wait for the
    driver's JVM to exit (it dumps the archive as it does)."""
    from pyspark import SparkContext

    from compaction.cli.console import main

    store, conf = str(work / "store"), work / "warm-up.toml"
    conf.write_text(WARM_UP_CONF)
    hour_ago = str(int(time.time() * 1000) - 3_600_000)  # clock-ok: the store's records are an hour old
    for topic, partitions, records, seed in (("whole", "2", "4000", "1"), ("split", "1", "12000", "2")):
        code = main(["generate", store, "--topics", topic, "--partitions", partitions, "--records", records,
                     "--keys", str(int(records) // 4), "--segment-records", "1000", "--end-time", hour_ago,
                     "--seed", seed])
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
