"""Soak: appender processes and the cleaner run side by side; after each cycle, nothing is lost or doubled.

Each appender owns its keys and appends batches (values and tombstones) to random partitions, writing a
ledger line for every append the store acknowledged. The main process cleans the store with local Spark
in a loop, runs gc, and after every cycle checks that ``verify`` finds no problem and that, at the
manifest version it reads, every key's visible state is the latest the ledgers hold below that version's
log end: its last value, or nothing / a tombstone after a delete; and that no record appears twice.

    python scripts/soak.py --minutes 30            # or: make soak SOAK_MINUTES=30
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from compaction.clean.cleaner import Cleaner
from compaction.config import Settings
from compaction.engine.session import spark_session
from compaction.store import Store, TopicPartition, Writer
from compaction.store.gc import collect_store
from compaction.store.segment import records
from compaction.store.verify import verify

TOPIC = "soak"
SETTINGS = {
    "log.cleanup.policy": "compact",
    "log.cleaner.min.cleanable.ratio": 0.1,
    "log.cleaner.delete.retention.ms": 20_000,
    "log.roll.ms": 5_000,
    "log.segment.bytes": 1_048_576,
}


def wall_ms() -> int:
    return int(time.time() * 1000)


def append_forever(
    store_url: str, appender: int, partitions: int, keys: int, ledger: str, stop_at: float, go: Any, idle: Any
) -> None:
    """One appender: batches of its own keys to random partitions until ``stop_at``; a ledger line each.
    It appends while ``go`` is set and says ``idle`` (its ledger complete) while it waits."""
    store = Store.open(store_url)
    rng = random.Random(appender)
    seq = 0
    with open(ledger, "a", encoding="utf-8") as out:
        while time.time() < stop_at:
            if not go.is_set():
                idle.set()
                go.wait(timeout=1)
                continue
            idle.clear()
            tp = TopicPartition(TOPIC, rng.randrange(partitions))
            rows = []
            for _ in range(rng.randint(1, 200)):
                seq += 1
                key = f"w{appender}-k{rng.randrange(keys)}"
                rows.append(
                    {"key": key, "value": None if rng.random() < 0.05 else f"{appender}:{seq}", "timestamp": wall_ms()}
                )
            manifest = store.append(tp, records(rows), now_ms=wall_ms(), writer=Writer(id=f"soak-{appender}"))
            base = manifest.segments[-1].base_offset
            for i, row in enumerate(rows):
                out.write(json.dumps({"partition": tp.partition, "offset": base + i, **row}) + "\n")
            out.flush()
            time.sleep(rng.random() * 0.2)
    idle.set()


def read_ledgers(paths: list[Path]) -> dict[int, list[dict[str, Any]]]:
    by_partition: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                by_partition[row["partition"]].append(row)
    return by_partition


def check(store: Store, ledgers: dict[int, list[dict[str, Any]]], partitions: int) -> list[str]:
    """What the store shows that the ledgers say it must not (empty when nothing is lost or doubled)."""
    problems = [str(p) for r in verify(store) for p in r.problems]
    for partition in range(partitions):
        tp = TopicPartition(TOPIC, partition)
        manifest = store.latest(tp)
        if manifest is None:
            continue
        shown = store.read(tp, manifest=manifest, columns=["offset", "key", "value"]).to_pylist()
        offsets = [r["offset"] for r in shown]
        if len(set(offsets)) != len(offsets):
            problems.append(f"{tp}: an offset is shown twice")
        latest: dict[str, dict[str, Any]] = {}
        for row in sorted(ledgers.get(partition, []), key=lambda r: r["offset"]):
            if row["offset"] < manifest.log_end_offset:
                latest[row["key"]] = row
        visible: dict[str, dict[str, Any]] = {}
        cleaned: set[str] = set()
        for row in shown:
            key = row["key"].decode()
            visible[key] = row
            if row["offset"] < manifest.first_dirty_offset:  # cleaned: one record per key at most
                if key in cleaned:
                    problems.append(f"{tp}: key {key} is shown twice below the checkpoint")
                cleaned.add(key)
        for key, expected in latest.items():
            got = visible.get(key)
            if expected["value"] is None:
                if got is not None and got["value"] is not None:
                    problems.append(f"{tp}: deleted key {key} shows {got['value']!r} at offset {got['offset']}")
            elif got is None or got["offset"] != expected["offset"]:
                problems.append(f"{tp}: key {key} should show offset {expected['offset']}, shows {got}")
        for key in visible.keys() - latest.keys():
            problems.append(f"{tp}: key {key} is in the store but in no ledger")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long to run (default: 30)")
    parser.add_argument("--store", default=None, help="store URL (default: a new local folder)")
    parser.add_argument("--appenders", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--keys", type=int, default=2000, help="keys per appender")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="soak-"))
    store_url = args.store or str(work / "store")
    store = Store.open(store_url)
    settings = Settings.load(overrides=SETTINGS, environ={})
    spark = spark_session("local[2]", conf={"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"})
    stop_at = time.time() + args.minutes * 60
    ledgers = [work / f"ledger-{i}.jsonl" for i in range(args.appenders)]
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    idle = [context.Event() for _ in range(args.appenders)]
    go.set()
    writers = [
        context.Process(
            target=append_forever,
            args=(store_url, i, args.partitions, args.keys, str(ledgers[i]), stop_at, go, idle[i]),
        )
        for i in range(args.appenders)
    ]
    for writer in writers:
        writer.start()
    cycles = failures = 0
    problems: list[str] = []
    try:
        while time.time() < stop_at and not problems:
            time.sleep(2)
            now = wall_ms()
            report = Cleaner(spark, store, settings, wall_ms=now).run(now)  # appends go on
            failures += len(report.failed)
            collect_store(store, store.topic_partitions(TOPIC), wall_ms=wall_ms(), grace_ms=60_000, keep_versions=3)
            go.clear()  # the check needs every acknowledged append in a ledger
            for event in idle:
                event.wait(timeout=300)
            problems = check(store, read_ledgers(ledgers), args.partitions)
            go.set()
            cycles += 1
            print(
                f"cycle {cycles}: {report.totals['cleaned']} cleaned, {len(report.failed)} failed, "
                f"{report.totals['records_before']:,} -> {report.totals['records_after']:,} records; "
                f"{len(problems)} problem(s)",
                flush=True,
            )
    finally:
        go.set()
        for writer in writers:
            writer.join(timeout=300)
    if not problems:  # once the appenders stopped: a last pass and a last check over everything
        now = wall_ms()
        Cleaner(spark, store, settings, wall_ms=now).run(now)
        problems = check(store, read_ledgers(ledgers), args.partitions)
    spark.stop()
    appended = sum(len(rows) for rows in read_ledgers(ledgers).values())
    live = sum(s.live_records for tp in store.topic_partitions(TOPIC) for s in store.manifest(tp).segments)
    print(
        f"\nsoak: {cycles} cycle(s) in {args.minutes:g} min, {appended:,} records appended by "
        f"{args.appenders} appender(s), {live:,} live, {failures} partition failure(s), "
        f"{len(problems)} problem(s); store {store_url}"
    )
    for problem in problems[:20]:
        print(f"PROBLEM {problem}")
    return 1 if problems or failures else 0


if __name__ == "__main__":
    sys.exit(main())
