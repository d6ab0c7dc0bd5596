"""Measure the clean pass's dedupe plans (window vs aggregate) on one generated store, local Spark.

    python bench/clean_plans.py [--records 5000000] [--keys 1000000] [--partitions 4] [--work DIR]

Each plan cleans a fresh copy of the same store; Spark start-up and a warm-up run are excluded from the
timed runs, which report the wall time of `Cleaner.run` (plan, decide, rewrite, commit) and records/s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from compaction.clean.cleaner import Cleaner
from compaction.config import Settings
from compaction.engine.session import spark_session
from compaction.store import Store
from compaction.synthetic import GenerateSpec, generate

NOW = 1_800_000_000_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--segment-records", type=int, default=250_000)
    parser.add_argument("--plans", default="window,aggregate")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--work", default="/tmp/compaction-bench-plans")
    parser.add_argument("--driver-memory", default="6g")
    args = parser.parse_args()
    work = Path(args.work)
    source = work / f"source-{args.records}-{args.keys}-{args.partitions}"
    if not source.exists():
        started = time.perf_counter()
        spec = GenerateSpec(
            records=args.records,
            keys=args.keys,
            partitions=args.partitions,
            segment_records=args.segment_records,
            tombstone_ratio=0.01,
            end_time_ms=NOW - 3_600_000,
        )
        generate(Store.open(str(source)), spec, now_ms=NOW - 3_600_000)
        print(f"generated {args.records:,} records in {time.perf_counter() - started:.1f} s at {source}")
    # log.roll.ms of one minute makes each partition's hour-old last segment count as rolled: all records clean.
    settings = Settings.load(overrides={"log.cleanup.policy": "compact", "log.roll.ms": 60_000}, environ={})
    started = time.perf_counter()
    spark = spark_session(
        "local[*]",
        conf={
            "spark.driver.memory": args.driver_memory,
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
        },
    )
    print(f"spark start-up {time.perf_counter() - started:.1f} s (not included below)")

    def clean_copy(name: str, plan: str) -> tuple[float, dict]:
        target = work / name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target)
        started = time.perf_counter()
        report = Cleaner(spark, Store.open(str(target)), settings, dedupe_plan=plan).run(NOW)
        elapsed = time.perf_counter() - started
        shutil.rmtree(target)
        return elapsed, report.totals

    clean_copy("warm-up", "window")
    results = {}
    for plan in args.plans.split(","):
        times = []
        for _ in range(args.repeat):
            elapsed, totals = clean_copy(plan, plan)
            times.append(elapsed)
        best = min(times)
        results[plan] = {
            "seconds": round(best, 2),
            "records_per_second": int(totals["messages_read"] / best),
            "messages_read": totals["messages_read"],
            "messages_written": totals["messages_written"],
        }
        print(
            f"{plan:>9}: {best:.1f} s, {totals['messages_read'] / best:,.0f} records/s "
            f"({totals['messages_read']:,} read, {totals['messages_written']:,} written)"
        )
    print(json.dumps({"machine": f"{os.cpu_count()} cores", "results": results}))


if __name__ == "__main__":
    main()
