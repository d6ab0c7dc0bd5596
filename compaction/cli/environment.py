"""The command that prepares the job's environment: ``warm-up`` (the class archive of Spark's driver JVM)."""

from __future__ import annotations

import argparse
import sys

from compaction.cli import common
from compaction.cli.common import Parser
from compaction.cli.output import Output
from compaction.display import human_bytes
from compaction.engine.session import build_class_archive, check_java
from compaction.errors import EXIT_OK


def cmd_warm_up(args: argparse.Namespace) -> int:
    """Prepare this environment for quick starts: build the class-data archive of Spark's driver JVM, which every
    later run on a local master maps (about 2.5 s off each start). It runs a small clean pass of its own and takes
    some 25 s, once: run it where the environment is made (after `pip install`, in an image's build; `make setup`
    runs it). A run without the archive starts the way Spark always does.
    """
    check_java()
    built = build_class_archive([sys.executable, "-m", "compaction.cli.warm_up"], force=args.force)
    size = human_bytes(built.size_bytes)
    Output().line(
        f"class archive {built.archive} ({size}): built in {built.seconds:.1f} s"
        if built.built
        else f"class archive {built.archive} ({size}): already built (--force builds it again)"
    )
    return EXIT_OK


def add_commands(sub: argparse._SubParsersAction[Parser]) -> None:
    p = common.add_command(sub, cmd_warm_up, "prepare this environment for quick starts (Spark's class archive)")
    p.add_argument("--force", action="store_true", help="build the archive again even if there is one")
