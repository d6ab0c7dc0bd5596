"""The job's figures of two harness runs side by side: a change's before and after.

    python bench/before_after.py BEFORE.json AFTER.json

Each file is a harness result (``latest.json``, e.g. from ``bench/harness.py --job-only --out DIR`` on each
side of a change, in one session). Prints, per scenario, the job's median wall time and peak RSS on both
sides and the ratio after / before; S2 adds the dirty-only run, S7 both stores, S8 the run at 50 ms a request,
scaling each size. Exits 1 when a scenario's
job is more than ``--tolerance`` (10% unless told) slower after than before.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def job_rows(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every job row of a result, named by scenario (and size, for scaling)."""
    rows: dict[str, dict[str, Any]] = {}
    for name, scenario in results["scenarios"].items():
        if name == "scaling":
            rows.update({f"scaling {int(size):,}": row for size, row in scenario.items()})
        elif name == "S7" and "many" in scenario:
            rows.update(
                {
                    f"S7 {scenario[which]['partitions']:,} partitions": scenario[which]["job"]
                    for which in ("many", "few")
                }
            )
        elif isinstance(scenario.get("job"), dict):
            rows[name] = scenario["job"]
            if "dirty_alone" in scenario:
                rows[f"{name} dirty alone"] = scenario["dirty_alone"]
            if "job, 50 ms a request" in scenario:
                rows[f"{name} 50 ms a request"] = scenario["job, 50 ms a request"]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--tolerance", type=float, default=0.10)
    args = parser.parse_args()
    before = job_rows(json.loads(args.before.read_text()))
    after = job_rows(json.loads(args.after.read_text()))
    header = (
        f"{'scenario':<22} {'before s':>9} {'after s':>9} {'after/before':>12} {'before RSS MB':>13} "
        f"{'after RSS MB':>12}"
    )
    print(header)
    print("-" * len(header))
    slower = []
    for name in (name for name in before if name in after):
        old, new = before[name], after[name]
        ratio = new["seconds"] / old["seconds"]
        if ratio > 1 + args.tolerance:
            slower.append(name)
        print(
            f"{name:<22} {old['seconds']:>9.1f} {new['seconds']:>9.1f} {ratio:>12.2f} {old['peak_rss_mb']:>13,} "
            f"{new['peak_rss_mb']:>12,}"
        )
    if slower:
        print(f"slower by more than {args.tolerance:.0%}: {', '.join(slower)}")
    return 1 if slower else 0


if __name__ == "__main__":
    sys.exit(main())
