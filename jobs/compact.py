"""spark-submit entry point: ``spark-submit jobs/compact.py STORE --conf conf/production.toml --now <time>``.

Takes exactly the flags of ``compaction run`` (see ``--help``); the SparkSession comes from spark-submit's
master and settings through the one session helper. Exit codes: 0 all selected partitions cleaned,
3 some failed (the others committed), 4 invalid configuration or input.
"""

from __future__ import annotations

import sys

from compaction.cli import main


def entry(argv: list[str]) -> int:
    return main(["run", *argv])


if __name__ == "__main__":
    sys.exit(entry(sys.argv[1:]))
