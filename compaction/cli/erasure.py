"""Erasure requests' commands: ``forget`` a key, follow each request with ``erasure``, prove one with ``attest``."""

from __future__ import annotations

import argparse
import base64
import binascii
import json
from pathlib import Path

from compaction import __version__, lineage
from compaction.cli import common
from compaction.cli.common import Parser
from compaction.cli.output import Output
from compaction.cli.types import iso_time, parse_duration, positive_int
from compaction.erasure import attest, erasure_status, forget
from compaction.errors import EXIT_FAILED, EXIT_OK, InvalidArgumentError, StoreNotFoundError
from compaction.report import output_location
from compaction.store.jsonl import decode_utf8


def given_keys(args: argparse.Namespace) -> list[bytes]:
    """The keys of --key and --keys-file, as bytes (UTF-8 text, or base64 with --base64)."""
    texts = [(f"--key #{i}", text) for i, text in enumerate(args.key, start=1)]
    if getattr(args, "keys_file", None):
        path = Path(args.keys_file)
        if not path.is_file():
            raise InvalidArgumentError(f"keys file {path} does not exist")
        lines = decode_utf8(path.read_bytes(), str(path)).splitlines()
        texts += [(f"{path} line {n}", line.rstrip("\r")) for n, line in enumerate(lines, start=1) if line.strip()]
    if not texts:
        raise InvalidArgumentError("no key given: use --key or --keys-file")
    if not args.base64:
        return [text.encode() for _, text in texts]
    keys = []
    for where, text in texts:
        try:
            keys.append(base64.b64decode(text.strip(), validate=True))
        except binascii.Error as err:
            raise InvalidArgumentError(f"{where} is not base64 ({err})") from err
    return keys


def cmd_forget(args: argparse.Namespace) -> int:
    """Find the partitions of TOPIC whose log holds each key (every partition, or with --partitions N only the one
    Kafka's default partitioner, murmur2, sends it to), append a tombstone for it there (an ordinary delete for
    readers and consumers) and record an erasure request in the partition's manifest: the key's SHA-256 digest, never
    the key, when it was requested and its deadline. The next run rewrites every segment holding an older record of
    the key; gc then removes what older versions and orphans hold; 'compaction erasure' follows each request and
    'compaction attest' proves it done. Only digests are printed.
    """
    settings = common.load_settings(args)
    now = common.command_now(args)
    store = common.open_store(args, settings)
    store.require_exists()
    if common.conf_file(args) is not None or getattr(args, "set", None):
        config = settings.topic_config(args.topic)
        if not config.compact:  # nothing would carry the request out; without a configuration it is not known
            raise InvalidArgumentError(
                f"topic {args.topic} has cleanup.policy={','.join(config.cleanup_policy)} in this configuration: a "
                "tombstone deletes nothing there, so no run would carry an erasure request out"
            )
    max_delay = args.max_delay if args.max_delay is not None else settings.cleaner.erasure_max_delay_ms
    forgotten = forget(
        store, args.topic, given_keys(args), now_ms=now, max_delay_ms=max_delay, partitions=args.partitions
    )
    lineage.forgot(args, store, args.topic, forgotten)
    out = Output.of(args)
    if out.as_json:
        out.result(
            {
                "topic": args.topic,
                "requested_ms": now,
                "deadline_ms": now + max_delay,
                "keys": [o.to_dict() for o in forgotten],
            }
        )
    for entry in forgotten:
        name = f"key sha256:{entry.key_sha256[:16]}"
        for partition, error in sorted(entry.errors.items()):
            out.line(f"{name}: partition {args.topic}-{partition} could not be searched: {error}", aside=out.as_json)
        if out.as_json:
            continue
        if entry.found:
            where = ", ".join(f"{args.topic}-{p} at offset {o}" for p, o in sorted(entry.tombstones.items()))
            out.line(f"{name}: tombstone appended and erasure requested in {where}; due by {iso_time(now + max_delay)}")
        elif not entry.errors:
            absent = (
                "; " + ", ".join(f"{args.topic}-{p}" for p in entry.absent) + " has no log in the store"
                if entry.absent
                else ""
            )
            out.line(
                f"{name}: found nowhere in {args.topic} ({len(entry.searched)} partition(s) searched{absent}): "
                "nothing to erase, no tombstone appended"
            )
    return EXIT_FAILED if any(o.errors for o in forgotten) else EXIT_OK


def cmd_erasure(args: argparse.Namespace) -> int:
    """List every erasure request of the store (or TOPIC): pending (no run has rewritten the segments holding the key
    yet), rewritten (the live log holds no record of the key below its tombstone; older versions or orphans may) or
    gone (no object under the partition's folders does), with the objects found holding the key and when each went,
    and what a request still waits for. A request is late (OVERDUE, exit 1) when still pending past its deadline, or
    not gone [cleaner] erasure.grace.ms after it.
    """
    settings = common.load_settings(args)
    now = common.command_now(args)
    store = common.open_store(args, settings)
    store.require_exists()
    if args.topic is not None and not store.partitions(args.topic):
        raise StoreNotFoundError(f"topic {args.topic!r} has no partition in {store.url}")
    statuses, errors = erasure_status(
        store, [args.topic] if args.topic else None, now, settings.topic_config, settings.cleaner.erasure_grace
    )
    overdue = [s for s in statuses if s.overdue]
    rows = [
        [
            str(s.partition),
            s.request.key_sha256[:16],
            s.request.state + (" OVERDUE" if s.overdue else ""),
            s.request.tombstone_offset,
            iso_time(s.request.requested_ms),
            iso_time(s.request.deadline_ms),
            f"{iso_time(s.request.rewritten_ms)} (v{s.request.rewritten_version})"
            if s.request.rewritten_ms is not None
            else "-",
            iso_time(s.request.completed_ms) if s.request.completed_ms is not None else "-",
        ]
        for s in statuses
    ]
    notes = [
        f"{s.partition} {s.request.key_sha256[:16]}: {held.path} held it (found {iso_time(held.found_ms)}), "
        + (f"gone by {iso_time(held.removed_ms)}" if held.removed_ms is not None else "still there")
        for s in statuses
        for held in s.request.held
    ]
    notes += [f"{s.partition} {s.request.key_sha256[:16]}: waits for {wait}" for s in statuses for wait in s.waits]
    states = ", ".join(
        f"{sum(1 for s in statuses if s.request.state == state)} {state}" for state in ("pending", "rewritten", "gone")
    )
    notes += [
        f"\n{len(statuses)} request(s): {states}; {len(overdue)} late",
        *(f"unreadable: {name}: {error}" for name, error in errors.items()),
    ]
    Output.of(args).result(
        {"now_ms": now, "requests": [s.to_dict() for s in statuses], "overdue": len(overdue), "errors": errors},
        ["partition", "key sha256", "state", "tombstone", "requested", "deadline", "rewritten", "gone"],
        rows,
        notes,
    )
    return EXIT_FAILED if overdue or errors else EXIT_OK


def cmd_attest(args: argparse.Namespace) -> int:
    """Read every object under the folders of each partition of TOPIC (segments, deletion vectors, manifests,
    superseded and orphaned objects alike) and write a proof: the manifest version, each object's name, size and
    SHA-256, the records of the key found in each, the key's digest and this program's version. Exit 0 when no record
    of the key is left below its erasure request's tombstone (without a request: no value of the key at all), 1
    otherwise, naming the objects.
    """
    store = common.open_store(args)
    store.require_exists()
    if len(args.key) > 1:
        raise InvalidArgumentError("attest proves one key: give --key once")
    (key,) = given_keys(args)[:1]
    if args.output:
        output_location(args.output, store.url, common.storage_options(args))  # one that cannot be written fails first
    proof = attest(
        store, args.topic, key, wall_ms=common.wall_clock_ms(), program_version=__version__, partitions=args.partitions
    )
    objects = sum(len(p.objects) for p in proof.partitions)
    summary = (
        f"key sha256:{proof.key_sha256[:16]} in {args.topic}: {objects} object(s) read in "
        f"{len(proof.partitions)} partition(s): "
        + (
            "no record of it is left that an erasure request erases, and no value without one"
            if proof.passed
            else f"{len(proof.problems)} object(s) still hold it"
        )
    )
    out = Output()
    if args.output:
        storage, name = output_location(args.output, store.url, common.storage_options(args))
        storage.write_bytes(name, json.dumps(proof.to_dict(), indent=1).encode())
        out.line(summary)
        for problem in proof.problems:
            out.line(f"PROBLEM {problem}")
        out.line(f"proof written to {args.output}")
    else:
        out.line(json.dumps(proof.to_dict(), indent=1))
        out.line(summary, aside=True)
        for problem in proof.problems:
            out.line(f"PROBLEM {problem}", aside=True)
    return EXIT_OK if proof.passed else EXIT_FAILED


def add_keys(parser: Parser, many: bool, partitions: str) -> None:
    """TOPIC, its keys (--key, and with ``many`` --keys-file), --base64 and --partitions (``partitions``: its help)."""
    common.add_topic(parser)
    parser.add_argument("--partitions", type=positive_int, default=None, metavar="N", help=partitions)
    parser.add_argument(
        "--key",
        action="append",
        default=[],
        metavar="KEY",
        required=not many,
        help="the key as UTF-8 text (with --base64: base64 of its bytes)" + (", repeatable" if many else ""),
    )
    if many:
        parser.add_argument(
            "--keys-file",
            metavar="FILE",
            default=None,
            help="keys, one per line (UTF-8 text, or base64 with --base64); blank lines are skipped",
        )
    parser.add_argument("--base64", action="store_true", help="keys are given as base64 of their bytes")


def add_commands(sub: argparse._SubParsersAction[Parser]) -> None:
    p = common.add_command(
        sub, cmd_forget, "erasure request: tombstone a key wherever it is and have its values removed"
    )
    common.add_store(p)
    add_keys(
        p,
        many=True,
        partitions="the topic's partition count: search only the partition Kafka's default "
        "partitioner sends each key to (murmur2), instead of every partition",
    )
    p.add_argument(
        "--max-delay",
        type=parse_duration,
        default=None,
        help="the deadline, from now (default: [cleaner] erasure.max.delay.ms, 1d)",
    )
    common.add_json(p, "print JSON instead of lines")
    common.add_config(p)
    common.add_now(p, "the request's time")

    p = common.add_command(
        sub, cmd_erasure, "list erasure requests: pending, rewritten or gone, and what each waits for"
    )
    common.add_store(p)
    p.add_argument("topic", metavar="TOPIC", nargs="?", default=None, help="only this topic (default: every topic)")
    common.add_json(p)
    common.add_config(p)
    common.add_now(p, "judge deadlines as of this time")

    p = common.add_command(sub, cmd_attest, "prove from every object that a key's erased records are gone")
    common.add_store(p)
    add_keys(
        p,
        many=False,
        partitions="only the partition Kafka's default partitioner sends the key to among N (default: every partition)",
    )
    p.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="FILE",
        help="write the proof (JSON) here, a path or a store-like URL (default: stdout)",
    )
