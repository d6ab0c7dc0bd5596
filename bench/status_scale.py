"""Measure `compaction status` on a store of many partitions x segments (default 1,000 x 50, local disk).

python bench/status_scale.py [--partitions 1000] [--segments 50] [--store DIR]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compaction.store import Store, read_manifests
from compaction.synthetic import GenerateSpec, generate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--segments", type=int, default=50)
    parser.add_argument("--store", default=None, help="reuse or create the store here (default: a temp dir)")
    args = parser.parse_args()
    root = Path(args.store or tempfile.mkdtemp(prefix="status-scale-"))
    store = Store.open(str(root))
    if not store.topics():
        started = time.perf_counter()
        spec = GenerateSpec(
            topics=("scale",),
            partitions=args.partitions,
            records=args.partitions * args.segments * 10,
            keys=args.partitions * 100,
            segment_records=10,
            value_bytes=20,
        )
        generate(store, spec, now_ms=spec.end_time_ms, threads=8)
        print(f"generated {args.partitions} x {args.segments} segments in {time.perf_counter() - started:.1f} s")
    started = time.perf_counter()
    manifests = read_manifests(store, store.topic_partitions())
    library = time.perf_counter() - started
    segments = sum(len(m.segments) for m in manifests.values() if not isinstance(m, Exception))
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "compaction.cli", "status", str(root)], check=True, stdout=subprocess.DEVNULL)
    command = time.perf_counter() - started
    print(
        f"status over {len(manifests)} partitions, {segments} segments: library {library:.2f} s, "
        f"command (with interpreter start-up) {command:.2f} s"
    )


if __name__ == "__main__":
    main()
