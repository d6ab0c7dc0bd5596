"""A change's before and after, the two checkouts taking turns on the same stores.

    python bench/turns.py BEFORE_DIR AFTER_DIR STORE [STORE ...] [--rounds 3] [--work DIR] [--link]

``BEFORE_DIR`` and ``AFTER_DIR`` are checkouts of the project (``git worktree add /tmp/before COMMIT``); each
``STORE`` a store the harness generated (``<work>/stores/s5-20000000``). Round by round, each checkout's job runs
on a fresh copy of each store (its code on ``PYTHONPATH``, this interpreter and its packages for both), so that a
busy spell of the machine hits both alike: blocks of one version's runs after the other's (``harness.py
--job-only`` from each checkout) drift with the machine. Prints each side's runs, the medians of wall time (start-up
included), CPU (user + system of the processes the run waited for, as the harness measures it: the driver's, steadier
than wall time on a shared machine) and peak RSS, the tasks' read, decide and write seconds, and the ratios after /
before; exits 1 when the two left different survivors (a digest of each partition's offsets).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness import PYTHON, digest, env, job

from compaction.store import Store


def turn(work: Path, checkout: Path, store: str, link: bool = False) -> dict[str, Any]:
    """One run of ``checkout``'s job on a copy of ``store`` (``link``: a copy of hard links, checked unchanged
    after the run): the harness's job run, with the checkout's code."""
    command = [PYTHON, "-P", "-m", "compaction.cli"]  # -P: the code on PYTHONPATH, not the working directory's
    variables = env()
    variables["PYTHONPATH"] = str(checkout)
    # In the checkout: Spark's Python workers put their working folder first on their path, so that from
    # anywhere else they would import that folder's package, not the checkout's.
    measure = job(work, store, command=command, environ=variables, cwd=checkout, link=link)
    phases = measure.extra["phases_ms"]
    return {
        "seconds": measure.seconds,
        "cpu": measure.cpu_seconds,
        "rss_mb": measure.peak_rss // 2**20,
        "tasks": [phases.get(f"task_{name}", 0) / 1000 for name in ("read", "decide", "write")],
        "survivors": digest(measure.extra["survivors"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("stores", nargs="+")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "compaction-turns")
    parser.add_argument(
        "--link", action="store_true", help="copy each store as hard links (a large store's copy in no time)"
    )
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    different = False
    header = f"{'store':24s} {'side':6s} {'median s':>9s} {'CPU s':>7s} {'RSS MB':>7s}"
    print(f"{header} {'task-s read/decide/write':>25s}  runs")
    for store in args.stores:
        Store.open(store)  # a clear error for a path that is no store, before any run
        runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
        for _ in range(args.rounds):
            for side, checkout in (("before", args.before), ("after", args.after)):
                runs[side].append(turn(args.work, checkout.resolve(), store, args.link))
        medians, cpu = {}, {}
        for side, found in runs.items():
            medians[side] = statistics.median(r["seconds"] for r in found)
            cpu[side] = statistics.median(r["cpu"] for r in found)
            tasks = "/".join(f"{statistics.median(r['tasks'][i] for r in found):.1f}" for i in range(3))
            print(
                f"{Path(store).name:24s} {side:6s} {medians[side]:9.1f} {cpu[side]:7.1f} "
                f"{statistics.median(r['rss_mb'] for r in found):7,.0f} {tasks:>25s}  "
                f"{[round(r['seconds'], 1) for r in found]}"
            )
        print(
            f"{'':24s} after / before {medians['after'] / medians['before']:.2f} "
            f"(CPU {cpu['after'] / cpu['before']:.2f})"
        )
        digests = {r["survivors"] for found in runs.values() for r in found}
        if len(digests) != 1:
            print(f"{Path(store).name}: the two sides left different survivors ({sorted(digests)})", file=sys.stderr)
            different = True
    return 1 if different else 0


if __name__ == "__main__":
    sys.exit(main())
