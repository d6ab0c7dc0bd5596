"""spark-submit entry point: ``spark-submit jobs/compact.py STORE --conf conf/production.toml --now <time>``.

Takes exactly the flags of ``compaction run`` (see ``--help``); the SparkSession comes from spark-submit's
master and settings through the one session helper. Exit codes (the README's table says which to retry): 0 all
selected partitions cleaned, 1 the run failed as a whole, 3 some failed (the others committed), 4 invalid
configuration or input.

``python jobs/compact.py --check STORE [flags]`` checks the flags and the configuration only (exit 0, 2 or 4),
touching neither the store nor Spark: ``scripts/spark-submit.sh`` runs it before submitting.
"""

from __future__ import annotations

import sys

from compaction.cli import check_run, main


def entry(argv: list[str]) -> int:
    if argv[:1] == ["--check"]:
        return check_run(argv[1:])
    return main(["run", *argv])


if __name__ == "__main__":
    sys.exit(entry(sys.argv[1:]))
