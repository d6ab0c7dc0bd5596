"""Where a run's task time goes: py-spy in each of Spark's Python workers of one `compaction run`.

    python bench/profile_workers.py OUT_DIR [--top 25] -- STORE [compaction run's options...]

`py-spy record --subprocesses` on the driver does not reach the workers (they are children of the JVM's Python
daemon, not of the driver), so this starts the run, watches for the processes of Spark's Python daemon
(``pyspark.daemon``, or ``compaction.engine.daemon``, which the job names for a local master) and what it forks,
and records each by its pid (raw stacks, 100 samples a second, in OUT_DIR/<pid>.raw). It then
prints, over every worker's samples, the seconds of the lines of ``compaction/`` (inclusive) that took the most.
The run changes the store: give it a copy. Needs ``py-spy`` on the PATH (``pip install py-spy``).
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import time
from pathlib import Path

RATE = 100
POLL_S = 0.05
MAX_S = 3600


def workers(known: set[int]) -> list[int]:
    """The processes of Spark's Python daemon not seen yet: the daemon and the workers it forks (which keep its
    command line)."""
    pattern = r"(pyspark|compaction\.engine)\.daemon"
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
    return [pid for pid in map(int, found) if pid not in known]


def summary(out: Path, top: int) -> None:
    lines: collections.Counter[str] = collections.Counter()
    total = 0
    for raw in out.glob("*.raw"):
        for row in raw.read_text().splitlines():
            stack, count = row.rsplit(" ", 1)
            total += int(count)
            for frame in set(stack.split(";")):
                if "compaction/" in frame:
                    lines[frame] += int(count)
    print(f"{total / RATE:.1f} s of samples in {len(list(out.glob('*.raw')))} process(es)")
    for frame, count in lines.most_common(top):
        print(f"{count / RATE:8.2f} s  {frame}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--top", type=int, default=25)
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    run_args = argv[cut + 1 :]  # STORE and `compaction run`'s options
    args.out.mkdir(parents=True, exist_ok=True)
    job = subprocess.Popen([sys.executable, "-m", "compaction.cli", "run", *run_args])
    seen: set[int] = set()
    spies = []
    started = time.monotonic()
    while job.poll() is None and time.monotonic() - started < MAX_S:
        for pid in workers(seen):
            seen.add(pid)
            raw = args.out / f"{pid}.raw"
            record = ["py-spy", "record", "--pid", str(pid), "--rate", str(RATE), "--format", "raw", "-o", str(raw)]
            spies.append(subprocess.Popen(record, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(POLL_S)
    if job.poll() is None:
        job.kill()
    code = job.wait()
    for spy in spies:
        spy.wait(timeout=60)
    print(f"run exited {code} after {time.monotonic() - started:.1f} s; {len(seen)} process(es) recorded", flush=True)
    summary(args.out, args.top)
    return code


if __name__ == "__main__":
    sys.exit(main())
