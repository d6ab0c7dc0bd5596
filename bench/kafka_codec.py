"""Measure the record batch v2 codec against kafka-python's reader and builder on the same bytes, one core.

    python bench/kafka_codec.py [--batches 64] [--records 1000] [--value-bytes 100] [--repeat 7]
                                [--codecs none,gzip,snappy,lz4,zstd] [--out bench/results]

The log is built once by kafka-python's ``DefaultRecordBatchBuilder`` (base offsets patched in, as a broker
does), then, for each codec, both sides decode those bytes and encode the same records; MB/s is the log's
size over the median time. kafka-python decodes through ``MemoryRecords`` with the ``crc32c`` package, as
its users run it, checking every CRC and reading every record's fields. Our encode of the records it decoded
must give kafka-python's bytes (uncompressed), so both sides do the same work. Arrow runs on one thread.

The target (issue 16) is at least 3x kafka-python's MB/s to decode and to encode uncompressed batches of
1,000 records with 100-byte values. The table goes to stdout and, with the figures, to
``<out>/kafka_codec.{txt,json}``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from kafka.record.util import calc_crc32c

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compaction.kafka import CODECS, decode, encode  # noqa: E402

BASE_TIMESTAMP = 1_767_225_600_000
TARGET_RATIO = 3.0


def kafka_python_encode(rows: list[list[tuple[int, int, bytes, bytes]]], codec: int) -> bytes:
    parts = []
    base = 0
    for batch in rows:
        builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 30)
        for delta, timestamp, key, value in batch:
            builder.append(delta, timestamp, key, value, [])
        built = builder.build()
        struct.pack_into(">q", built, 0, base)  # outside the CRC, as the broker assigns it
        parts.append(bytes(built))
        base += len(batch)
    return b"".join(parts)


def kafka_python_decode(data: bytes) -> int:
    records = MemoryRecords(data)
    count = 0
    while records.has_next():
        batch = records.next_batch()
        if not batch.validate_crc():
            raise AssertionError("kafka-python: CRC mismatch")
        for record in batch:
            record.offset, record.timestamp, record.key, record.value, record.headers  # noqa: B018
            count += 1
    return count


def median_seconds(run: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=64)
    parser.add_argument("--records", type=int, default=1000, help="records per batch")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--codecs", default="none", help="comma-separated, from " + ",".join(CODECS))
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    crc = calc_crc32c.__defaults__[0] if calc_crc32c.__defaults__ else calc_crc32c
    lines = [
        f"kafka-python CRC-32C: {getattr(crc, '__module__', crc)}.{getattr(crc, '__name__', '')}",
        f"{args.batches} batches x {args.records} records, {args.value_bytes}-byte values, "
        f"median of {args.repeat}, one core ({platform.processor() or platform.machine()})",
        f"{'codec':<8}{'MB':>7}  {'decode MB/s':>12} {'kafka-py':>9} {'ratio':>6}  "
        f"{'encode MB/s':>12} {'kafka-py':>9} {'ratio':>6}",
    ]
    print(*lines, sep="\n", flush=True)

    rng = np.random.default_rng(7)
    rows = [
        [
            (i, BASE_TIMESTAMP + b * args.records + i, b"key-%08d" % rng.integers(10**8), rng.bytes(args.value_bytes))
            for i in range(args.records)
        ]
        for b in range(args.batches)
    ]
    figures: dict[str, dict[str, float]] = {}
    for name in args.codecs.split(","):
        codec = CODECS.index(name)
        data = kafka_python_encode(rows, codec)
        decoded = decode(data, where="bench")
        assert decoded.records.num_rows == args.batches * args.records
        assert kafka_python_decode(data) == decoded.records.num_rows
        ours = encode(decoded.records, decoded.batches)
        if codec == 0:
            assert ours == data, "our encoding differs from kafka-python's"
        else:
            assert decode(ours, where="bench").records.equals(decoded.records)
        mb = len(data) / 1e6
        decode_ours = median_seconds(lambda: decode(data, where="bench"), args.repeat)  # noqa: B023
        decode_theirs = median_seconds(lambda: kafka_python_decode(data), args.repeat)  # noqa: B023
        encode_ours = median_seconds(lambda: encode(decoded.records, decoded.batches), args.repeat)  # noqa: B023
        encode_theirs = median_seconds(lambda: kafka_python_encode(rows, codec), args.repeat)  # noqa: B023
        figures[name] = {
            "mb": mb,
            "decode_mb_s": mb / decode_ours,
            "kafka_python_decode_mb_s": mb / decode_theirs,
            "decode_ratio": decode_theirs / decode_ours,
            "encode_mb_s": mb / encode_ours,
            "kafka_python_encode_mb_s": mb / encode_theirs,
            "encode_ratio": encode_theirs / encode_ours,
        }
        f = figures[name]
        lines.append(
            f"{name:<8}{mb:>7.1f}  {f['decode_mb_s']:>12.0f} {f['kafka_python_decode_mb_s']:>9.1f} "
            f"{f['decode_ratio']:>5.1f}x  {f['encode_mb_s']:>12.0f} {f['kafka_python_encode_mb_s']:>9.1f} "
            f"{f['encode_ratio']:>5.1f}x"
        )
        print(lines[-1], flush=True)
    if "none" in figures:
        met = min(figures["none"]["decode_ratio"], figures["none"]["encode_ratio"]) >= TARGET_RATIO
        lines.append(
            f"target (uncompressed, decode and encode >= {TARGET_RATIO:.0f}x kafka-python): "
            f"{'met' if met else 'MISSED'}"
        )
        print(lines[-1])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "kafka_codec.txt").write_text("\n".join(lines) + "\n")
    (args.out / "kafka_codec.json").write_text(
        json.dumps(
            {
                "batches": args.batches,
                "records": args.records,
                "value_bytes": args.value_bytes,
                "repeat": args.repeat,
                "target_ratio": TARGET_RATIO,
                "codecs": figures,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
