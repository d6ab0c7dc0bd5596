"""What a fresh Python worker imports before its first task, timed in a fresh Python (run it on a quiet machine).

    python bench/worker_ready.py [--with-pandas] [--runs 3]

Each run, in a new interpreter: Spark's worker modules (what any Python task on Spark imports), pyarrow's compute
functions (what any Arrow task imports), then the job's task modules and a first conversion from Python, where
pyarrow looks for pandas. The job's workers cannot import pandas (``compaction.engine.daemon``); ``--with-pandas``
times them as they were before.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

RUN = """
import sys, time
from compaction.engine.daemon import NoPandas
if not {with_pandas}:
    NoPandas.install()
t0 = time.perf_counter()
import pyspark.worker, pyspark.sql.pandas.serializers
t1 = time.perf_counter()
import pyarrow.compute
t2 = time.perf_counter()
import compaction.clean.tasks.apply, compaction.clean.dedupe
import pyarrow as pa
pa.array([1, 2])
t3 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2, t3 - t0)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--with-pandas", action="store_true", help="let pyarrow import pandas, as before")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print("spark's worker s  pyarrow.compute s  the job's modules s  total s")
    for _ in range(args.runs):
        code = RUN.format(with_pandas=args.with_pandas)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        spark, arrow, job, total = (float(part) for part in out.split())
        print(f"{spark:16.3f}  {arrow:17.3f}  {job:18.3f}  {total:7.3f}")


if __name__ == "__main__":
    main()
