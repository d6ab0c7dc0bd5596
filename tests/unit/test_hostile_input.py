"""Hostile input through the command line: refused with exit code 4 and a message naming what is wrong, and
nothing in the store changes (no object, no manifest, no stray file)."""

from __future__ import annotations

import json
import os
import re
import shutil
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from compaction.cli import EXIT_FAILED, EXIT_INVALID, EXIT_OK, common
from compaction.errors import CommitConflictError, InvalidArgumentError, InvalidRecordsError, StoreError
from compaction.store import IllegalFolder, Replacement, Store, TopicPartition, Writer
from compaction.store.segment import records
from compaction.store.verify import verify
from tests.helpers.builders import keyed, rec, table
from tests.helpers.cli import run
from tests.helpers.stores import snapshot

TP = TopicPartition("orders", 0)
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)
CLOCK = 1_767_225_600_000  # what the command line's clock says in these tests (2026-01-01)
MINUTE = 60_000


@pytest.fixture(autouse=True)
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "wall_clock_ms", lambda: CLOCK)


@pytest.fixture
def seeded(tmp_path: Path) -> Store:
    store = Store.open(str(tmp_path / "store"))
    store.append(TP, keyed("a=1 b=2"), now_ms=1)
    return store


def refused(capsys: pytest.CaptureFixture[str], store: Store, *argv: str, code: int = EXIT_INVALID) -> str:
    """Run a command that must be refused: its exit code, no traceback, and the store byte for byte as before."""
    before = snapshot(store)
    actual, out = run(capsys, *argv)
    assert actual == code, out
    assert out.startswith("error: ") and "Traceback" not in out, out
    assert snapshot(store) == before
    return out


def jsonl(tmp_path: Path, *rows: dict | str) -> str:
    path = tmp_path / "in.jsonl"
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return str(path)


# Topic and partition names ------------------------------------------------------------------------------


@pytest.mark.parametrize("topic", [".", "..", "a/b", "../orders", "a" * 250, "bad topic", "ä", ""])
def test_illegal_topic_names_are_refused(
    seeded: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str], topic: str
) -> None:
    source = jsonl(tmp_path, {"key": "k", "value": "v"})
    out = refused(capsys, seeded, "append", seeded.url, topic, "0", source, "--now", str(CLOCK))
    assert f"topic name {topic!r}" in out
    out = refused(capsys, seeded, "read", seeded.url, topic, "0")
    assert f"topic name {topic!r}" in out
    with pytest.raises(InvalidArgumentError, match="topic name"):
        TopicPartition(topic, 0)


def test_generate_checks_every_topic_name_before_writing_any(seeded: Store, capsys: pytest.CaptureFixture[str]) -> None:
    out = refused(
        capsys,
        seeded,
        "generate",
        seeded.url,
        "--topics",
        "payments,bad topic",
        "--records",
        "10",
        "--partitions",
        "1",
        "--now",
        str(CLOCK),
    )
    assert "topic name 'bad topic'" in out


def test_kafka_topic_name_rules_hold_at_their_bounds() -> None:
    assert TopicPartition("a" * 249, 0).topic == "a" * 249
    assert TopicPartition("...", 0).topic == "...", "Kafka refuses exactly '.' and '..'"
    with pytest.raises(InvalidArgumentError, match=re.escape('cannot be "." or ".."')):
        TopicPartition(".", 0)
    with pytest.raises(InvalidArgumentError, match="250 characters long, longer than the 249"):
        TopicPartition("a" * 250, 0)


@pytest.mark.parametrize("partition", ["00", "01", "³", "١", "-1", "+1", " 1", "1 ", "x", "2147483648", ""])
def test_partitions_that_are_not_canonical_numbers_are_refused(
    seeded: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str], partition: str
) -> None:
    source = jsonl(tmp_path, {"key": "k", "value": "v"})
    out = refused(capsys, seeded, "append", seeded.url, "orders", partition, source, "--now", str(CLOCK))
    assert f"partition {partition!r} of topic 'orders' is not a partition number" in out
    out = refused(capsys, seeded, "read", seeded.url, "orders", partition)
    assert f"partition {partition!r}" in out


@pytest.mark.parametrize("partition", [-1, 2**31, True, 1.0, "0"])
def test_the_api_refuses_partitions_that_are_not_partition_numbers(partition: object) -> None:
    with pytest.raises(InvalidArgumentError, match="is not a partition number"):
        TopicPartition("orders", partition)  # type: ignore[arg-type]


ILLEGAL_FOLDERS = ["bad topic/0", "orders/00", "orders/³", "orders/x", "orders/-1"]


def test_folders_that_cannot_be_topics_or_partitions_are_reported_and_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    store = Store.open(str(root))
    store.append(TP, keyed("a=1 b=2"), now_ms=1)
    manifest = store.append(TP, keyed("a=3"), now_ms=2)
    orphan = store.objects.write_segment(TP, keyed("z=9", start=3), 3, 4, created_ms=3)  # never committed
    day_old = (CLOCK - 86_400_000) / 1000
    os.utime(root / "orders" / "0" / orphan.path, (day_old, day_old))
    for folder in ILLEGAL_FOLDERS:  # each a full copy of orders/0, orphan included: gc would find work there
        shutil.copytree(root / "orders" / "0", root / folder)
    inside = {
        path: data for path, data in snapshot(store).items() if any(f"/{folder}/" in path for folder in ILLEGAL_FOLDERS)
    }

    assert store.topic_partitions() == [TP], "each partition once, none from an illegal folder"
    partitions, illegal = store.scan()
    assert partitions == [TP]
    assert [f.path for f in illegal] == ["bad topic", "orders/-1", "orders/00", "orders/x", "orders/³"]

    code, out = run(capsys, "status", store.url)
    assert code == EXIT_FAILED and "orders-0" in out and "3 records" in out
    assert "bad topic: not a topic" in out
    for folder in ILLEGAL_FOLDERS[1:]:
        assert f"{folder}: not a partition of orders" in out, out
    code, out = run(capsys, "status", store.url, "--json")
    doc = json.loads(out)
    assert [p["partition"] for p in doc["partitions"]] == ["orders-0"] and len(doc["errors"]) == 5

    code, out = run(capsys, "verify", store.url)
    assert code == EXIT_FAILED and "orders-0: version 2, 2 segment(s), 3 record(s), 1 unreferenced object(s): ok" in out
    assert "PROBLEM bad topic: not a topic" in out
    for folder in ILLEGAL_FOLDERS[1:]:
        assert f"PROBLEM {folder}: not a partition of orders" in out, out

    code, out = run(capsys, "gc", store.url, "--grace", "1h")
    assert code == EXIT_FAILED and "deleted 1 object(s)" in out
    assert "bad topic: skipped, nothing deleted" in out
    for folder in ILLEGAL_FOLDERS[1:]:
        assert f"{folder}: skipped, nothing deleted" in out, out
    assert not store.storage.exists(f"{TP.prefix}/{orphan.path}"), "the rest of the store was collected"
    assert store.manifest(TP) == manifest
    after = snapshot(store)
    assert {path: after.get(path) for path in inside} == inside, "gc never deletes inside an illegal folder"


def test_every_backend_lists_only_legal_partitions_and_names_the_rest(store: Store) -> None:
    store.append(TP, keyed("a=1"), now_ms=1)
    for folder in ILLEGAL_FOLDERS:
        store.storage.write_bytes(f"{folder}/_manifests/{1:020d}.json", b"{}")
    assert store.scan() == (
        [TP],
        [
            IllegalFolder(
                "bad topic",
                "not a topic: the name contains a character other than ASCII alphanumerics, '.', '_' and '-'",
            ),
            *(
                IllegalFolder(
                    f"orders/{name}",
                    "not a partition of orders: the name is not a "
                    "partition number: a non-negative decimal integer up to "
                    "2147483647 in ASCII digits, without sign, spaces or leading "
                    "zeros",
                )
                for name in ("-1", "00", "x", "³")
            ),
        ],
    )
    assert store.scan("other*") == ([], [])
    assert store.topics() == ["orders"] and store.partitions("orders") == [0]
    with pytest.raises(InvalidArgumentError, match=re.escape("topic name '..'")):
        store.partitions("..")


# Manifest versions beyond the 20-digit names --------------------------------------------------------------


def _manifest_doc(store: Store) -> dict:
    return json.loads(store.storage.read_bytes(f"{TP.prefix}/_manifests/{1:020d}.json"))


def _put_manifest(store: Store, name: str, version: int) -> None:
    store.storage.write_bytes(
        f"{TP.prefix}/_manifests/{name}", json.dumps({**_manifest_doc(store), "version": version}).encode()
    )


def test_an_append_past_the_last_20_digit_version_is_refused(
    seeded: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    last = 10**20 - 1
    _put_manifest(seeded, f"{last}.json", last)
    assert seeded.manifest(TP).version == last
    source = jsonl(tmp_path, {"key": "k", "value": "v"})
    out = refused(capsys, seeded, "append", seeded.url, "orders", "0", source, "--now", str(CLOCK), code=EXIT_FAILED)
    assert "orders/0 is at manifest version 99999999999999999999, the last a 20-digit manifest name holds" in out
    with pytest.raises(StoreError, match="takes no more commits"):
        seeded.append(TP, keyed("c=1"), now_ms=2)
    full = seeded.manifest(TP)
    unchanged = Replacement(
        (), (), full.first_dirty_offset, full.first_dirty_offset, full.log_start_offset, full.log_start_offset
    )
    with pytest.raises(StoreError, match="takes no more commits") as refusal:  # the limit, not a conflict
        seeded.replace(TP, unchanged, writer=Writer(), now_ms=2)
    assert not isinstance(refusal.value, CommitConflictError)
    assert seeded.manifest(TP).version == last


def test_manifest_names_that_are_not_20_digit_versions_are_ignored_and_flagged(seeded: Store) -> None:
    wide = f"{10**20}.json"
    foreign = "٠" * 19 + "٢.json"  # Arabic-Indic digits, which int() reads as 2
    trailing = f"{3:020d}.json\n"
    _put_manifest(seeded, wide, 10**20)
    _put_manifest(seeded, foreign, 2)
    _put_manifest(seeded, trailing, 3)
    assert seeded.versions(TP) == [1]
    assert seeded.manifest(TP).version == 1
    problems = [str(p) for r in verify(seeded, [TP]) for p in r.problems]
    for name in (wide, foreign, trailing):
        assert any(name in p and "is not named <20-digit version>.json: readers ignore it" in p for p in problems), (
            name,
            problems,
        )


def test_verify_reports_a_gap_across_the_version_space_and_checks_the_rest(
    seeded: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    last = 10**20 - 1
    _put_manifest(seeded, f"{last}.json", last)
    _put_manifest(seeded, f"{10**20}.json", 10**20)
    _put_manifest(seeded, f"{5:020d}.json", 5)
    other = TopicPartition("orders", 1)
    seeded.append(other, keyed("c=3"), now_ms=1)
    code, out = run(capsys, "verify", seeded.url)
    assert code == EXIT_FAILED and "Traceback" not in out, out
    where = f"{seeded.url}/orders/0/_manifests"
    assert (
        f"PROBLEM orders-0: {where}: manifest versions are not continuous: missing 2-4, 6-99999999999999999998" in out
    ), out
    assert f"PROBLEM orders-0: {where}/100000000000000000000.json: is not named <20-digit version>.json" in out, out
    assert "orders-0: version 99999999999999999999, 1 segment(s), 2 record(s)" in out, "its newest version checked"
    assert "orders-1: version 1, 1 segment(s), 1 record(s), 0 unreferenced object(s): ok" in out, out


# JSON Lines that are not UTF-8 text ------------------------------------------------------------------------


def test_jsonl_that_is_not_utf8_is_refused_with_its_line_and_byte(
    seeded: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"key": "a", "value": "1"}\n{"key": "caf\xe9", "value": "2"}\n')
    out = refused(capsys, seeded, "append", seeded.url, "orders", "0", str(path), "--now", str(CLOCK))
    assert f"{path} line 2 is not UTF-8: byte 0xe9 at column 13 (byte offset 39 in the file)" in out


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            '{"key": "\\ud800", "value": "v"}',
            "line 1: key is not Unicode text (a lone surrogate at character 0); use key_base64",
        ),
        ('{"key": "k", "value": "x\\udfff"}', "line 1: value is not Unicode text"),
        ('{"key": "k", "headers": [{"key": "\\ud800", "value": "v"}]}', "line 1: header key '\\ud800' is not Unicode"),
        ('{"key": "k", "is_control": true, "control_type": "\\ud800"}', "line 1: control_type is not Unicode text"),
        ("[" * 100_000 + "]" * 100_000, "line 1 is nested too deeply to be a record"),
    ],
)
def test_jsonl_text_that_cannot_be_stored_is_refused(
    seeded: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, message: str
) -> None:
    out = refused(capsys, seeded, "append", seeded.url, "orders", "0", jsonl(tmp_path, line), "--now", str(CLOCK))
    assert message in out


def test_jsonl_with_windows_line_ends_is_still_read(
    seeded: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "crlf.jsonl"
    path.write_bytes('{"key": "é", "value": "1"}\r\n{"key": "b", "value": "2"}\r\n'.encode())
    code, out = run(capsys, "append", seeded.url, "orders", "0", str(path), "--now", str(CLOCK))
    assert code == EXIT_OK, out
    assert seeded.read(TP, start=2).column("key").to_pylist() == ["é".encode(), b"b"]


# Numbers outside Kafka's ranges ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"key": "k", "offset": -5}, "offset -5 is negative"),
        ({"key": "k", "offset": 2**63}, f"offset {2**63} is outside Kafka's range for it [{LONG_MIN}, {LONG_MAX}]"),
        ({"key": "k", "offset": LONG_MAX}, f"offset {LONG_MAX} leaves no log end offset below Kafka's Long.MAX"),
        ({"key": "k", "offset": True}, "offset must be an integer, not true"),
        ({"key": "k", "timestamp": 2**64}, f"timestamp {2**64} is outside Kafka's range"),
        ({"key": "k", "timestamp": LONG_MIN - 1}, f"timestamp {LONG_MIN - 1} is outside Kafka's range"),
        ({"key": "k", "timestamp": 1.5}, "timestamp must be an integer, not 1.5"),
        ({"key": "k", "producer_id": 2**63}, f"producer_id {2**63} is outside Kafka's range"),
        ({"key": "k", "producer_id": LONG_MIN - 1}, f"producer_id {LONG_MIN - 1} is outside Kafka's range"),
        ({"key": "k", "producer_epoch": 2**15}, "producer_epoch 32768 is outside Kafka's range for it [-32768, 32767]"),
        ({"key": "k", "value": None, "delete_horizon_ms": 2**63}, "delete_horizon_ms 9223372036854775808 is outside"),
        (
            {"key": "k", "headers": [{"key": "v", "value_long": 2**63}]},
            f"header 'v' value_long {2**63} is outside Kafka's Long range [{LONG_MIN}, {LONG_MAX}]",
        ),
        (
            {"key": "k", "headers": [{"key": "v", "value_long": LONG_MIN - 1}]},
            f"header 'v' value_long {LONG_MIN - 1} is outside Kafka's Long range",
        ),
    ],
)
def test_jsonl_numbers_outside_kafkas_ranges_are_refused(
    seeded: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str], row: dict, message: str
) -> None:
    out = refused(capsys, seeded, "append", seeded.url, "orders", "0", jsonl(tmp_path, row), "--now", str(CLOCK))
    assert message in out


def test_a_number_outside_its_range_is_one_line_naming_the_file_the_line_and_the_field(
    seeded: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = jsonl(
        tmp_path,
        {"key": "a", "headers": [{"key": "version", "value_long": LONG_MAX}]},
        {"key": "b", "headers": [{"key": "version", "value_long": 9223372036854775808}]},
    )
    out = refused(capsys, seeded, "append", seeded.url, "orders", "0", source, "--now", str(CLOCK))
    assert out == (
        f"error: {source} line 2: header 'version' value_long 9223372036854775808 is outside Kafka's Long "
        "range [-9223372036854775808, 9223372036854775807] (the header holds an 8-byte long)\n"
    )


def test_the_record_builder_refuses_numbers_outside_kafkas_ranges() -> None:
    with pytest.raises(
        InvalidRecordsError,
        match=re.escape("records record 1: header 'v' 9223372036854775808 is outside Kafka's Long range"),
    ):
        records([{"key": "a", "headers": {"v": 1}}, {"key": "b", "headers": {"v": 2**63}}])
    with pytest.raises(
        InvalidRecordsError,
        match=re.escape("rows record 0: producer_epoch -32769 is outside Kafka's range for it [-32768, 32767]"),
    ):
        records([{"key": "a", "producer_epoch": -(2**15) - 1}], "rows")
    with pytest.raises(InvalidRecordsError, match="records: a field has the wrong type"):
        records([{"key": "a", "timestamp": "noon"}])


def test_a_first_offset_below_zero_is_refused_in_an_empty_partition(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Store.open(str(tmp_path / "store"))
    store.append(TopicPartition("other", 0), keyed("a=1"), now_ms=1)  # the store exists; orders-0 does not
    out = refused(
        capsys,
        store,
        "append",
        store.url,
        "orders",
        "0",
        jsonl(tmp_path, {"key": "k", "offset": -1}),
        "--now",
        str(CLOCK),
    )
    assert "offset -1 is negative" in out


@pytest.mark.parametrize(
    ("column", "message"),
    [
        (pa.array([-1, 0], pa.int64()), "offset -1 is negative"),
        (pa.array([LONG_MAX - 1, LONG_MAX], pa.int64()), f"offset {LONG_MAX} leaves no log end offset"),
        (
            pa.array([0, 2**63], pa.uint64()),
            "in.parquet row 1 (offset 9223372036854775808): offset 9223372036854775808 "
            "is outside Kafka's range for it [-9223372036854775808, 9223372036854775807]",
        ),
    ],
)
def test_parquet_offsets_outside_kafkas_range_are_refused(
    seeded: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str], column: pa.Array, message: str
) -> None:
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"offset": column, "key": pa.array([b"k"] * len(column))}), path)
    out = refused(capsys, seeded, "append", seeded.url, "orders", "0", str(path), "--now", str(CLOCK))
    assert message in out


@pytest.mark.parametrize(
    ("name", "column", "message"),
    [
        (
            "producer_epoch",
            pa.array([1, 40000], pa.int32()),
            "row 1 (offset 1): producer_epoch 40000 is outside Kafka's range for it [-32768, 32767]",
        ),
        (
            "producer_id",
            pa.array([0, 2**63], pa.uint64()),
            "row 1 (offset 1): producer_id 9223372036854775808 is outside Kafka's range for it "
            "[-9223372036854775808, 9223372036854775807]",
        ),
        (
            "timestamp",
            pa.array([1.0, 1e30]),
            "row 1 (offset 1): timestamp 1e+30 is outside Kafka's range for it [-9223372036854775808, "
            "9223372036854775807]",
        ),
        (
            "timestamp",
            pa.array([Decimal(1), Decimal(10**25)], pa.decimal128(38, 0)),
            "row 1 (offset 1): timestamp 10000000000000000000000000 is outside Kafka's range for it "
            "[-9223372036854775808, 9223372036854775807]",
        ),
        (
            "timestamp",
            pa.array([float("nan"), 1.0]),
            "row 0 (offset 0): timestamp nan (type double) cannot be read as int64",
        ),
        ("timestamp", pa.array([2.5, 1.0]), "row 0 (offset 0): timestamp 2.5 (type double) cannot be read as int64"),
        (
            "timestamp",
            pa.array([1_767_225_600_000_000_001, 0], pa.timestamp("ns")),
            "row 0 (offset 0): timestamp 1767225600000000001 (type timestamp[ns]) cannot be read as timestamp[ms]",
        ),
    ],
)
def test_parquet_numbers_outside_kafkas_ranges_are_refused_naming_the_row(
    seeded: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, column: pa.Array, message: str
) -> None:
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"offset": pa.array([0, 1]), "key": [b"a", b"b"], name: column}), path)
    other = TopicPartition("fresh", 0)  # an empty partition, so the offsets 0 and 1 fit
    out = refused(capsys, seeded, "append", seeded.url, other.topic, "0", str(path), "--now", str(CLOCK))
    assert out == f"error: {path} {message}\n"


def test_a_parquet_timestamp_column_is_read_in_milliseconds(
    seeded: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "in.parquet"
    pq.write_table(
        pa.table({"key": [b"a"], "timestamp": pa.array([1_767_225_600_123_000_000], pa.timestamp("ns"))}), path
    )
    assert run(capsys, "append", seeded.url, "orders", "0", str(path), "--now", str(CLOCK))[0] == EXIT_OK
    assert seeded.read(TP).column("timestamp").to_pylist()[-1] == 1_767_225_600_123


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("log_end_offset", 2**63),
        ("segments.0.next_offset", 2**64),
        ("segments.0.max_timestamp", -(2**63) - 1),
        ("segments.0.size_bytes", 10**30),
        ("writer.time_ms", 2**63),
        ("last_clean_ms", 2**63),
    ],
)
def test_manifest_numbers_outside_kafkas_ranges_make_it_unreadable(
    seeded: Store, capsys: pytest.CaptureFixture[str], field: str, value: int
) -> None:
    doc = _manifest_doc(seeded)
    *path, last = [int(part) if part.isdigit() else part for part in field.split(".")]
    target = doc
    for part in path:
        target = target[part]
    target[last] = value
    seeded.storage.write_bytes(f"{TP.prefix}/_manifests/{1:020d}.json", json.dumps(doc).encode())
    where = f"{seeded.url}/orders/0/_manifests/{1:020d}.json"
    bound = (
        "greater than or equal to -9223372036854775808" if value < 0 else "less than or equal to 9223372036854775807"
    )
    with pytest.raises(StoreError, match=re.escape(f"manifest {where} is invalid at {field}: Input should be {bound}")):
        seeded.manifest(TP)
    code, out = run(capsys, "status", seeded.url)
    assert code == EXIT_FAILED and f"unreadable: orders-0: manifest {where} is invalid at {field}" in out, out
    assert "Traceback" not in out


def test_assigned_offsets_stop_where_the_log_end_would_pass_long_max(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Store.open(str(tmp_path / "store"))
    store.append(TP, table(rec("a", offset=LONG_MAX - 3)), now_ms=1)  # log end LONG_MAX - 2
    out = refused(
        capsys,
        store,
        "append",
        store.url,
        "orders",
        "0",
        jsonl(tmp_path, {"key": "b"}, {"key": "c"}, {"key": "d"}),
        "--now",
        str(CLOCK),
    )
    assert f"3 record(s) from the log end {LONG_MAX - 2} would leave no log end offset" in out
    code, out = run(
        capsys, "append", store.url, "orders", "0", jsonl(tmp_path, {"key": "b"}, {"key": "c"}), "--now", str(CLOCK)
    )
    assert code == EXIT_OK, out
    assert store.manifest(TP).log_end_offset == LONG_MAX, "the last offset is Long.MAX - 1, the log end fits"


# --now -------------------------------------------------------------------------------------------------------


def _now_commands(store: Store, tmp_path: Path) -> list[list[str]]:
    source = jsonl(tmp_path, {"key": "k", "value": "v"})
    return [
        ["plan", store.url, "--set", "log.cleanup.policy=compact"],
        ["run", store.url, "--dry-run"],
        ["generate", store.url, "--records", "10", "--partitions", "1"],
        ["append", store.url, "orders", "0", source],
    ]


@pytest.mark.parametrize("now", [str(LONG_MAX + 1), str(LONG_MIN - 1), str(10**30)])
def test_a_now_outside_the_long_range_is_refused_by_every_command(
    seeded: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str], now: str
) -> None:
    for command in _now_commands(seeded, tmp_path):
        out = refused(capsys, seeded, *command, "--now", now, "--allow-future-now")
        assert f"--now {now} is outside Kafka's Long range [{LONG_MIN}, {LONG_MAX}]" in out, command


def test_a_now_in_the_future_is_refused_unless_allowed(
    seeded: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ahead = str(CLOCK + 6 * MINUTE)
    for command in _now_commands(seeded, tmp_path):
        out = refused(capsys, seeded, *command, "--now", ahead)
        assert f"--now {ahead} (2026-01-01T00:06:00.000+00:00) is in the future" in out, command
        assert "use --allow-future-now for tests and replays" in out
    out = refused(capsys, seeded, "run", seeded.url, "--now", "2027-01-01T00:00:00Z")
    assert "is in the future" in out
    append = _now_commands(seeded, tmp_path)[3]
    assert run(capsys, *append, "--now", str(CLOCK + 4 * MINUTE))[0] == EXIT_OK, "clock skew is tolerated"
    assert run(capsys, *append, "--now", ahead, "--allow-future-now")[0] == EXIT_OK
    assert run(capsys, *append, "--now", "2025-06-01T00:00:00Z")[0] == EXIT_OK, "a past time replays"
    assert seeded.manifest(TP).version == 4


# Fields only the cleaner sets ------------------------------------------------------------------------------


def test_a_tombstone_with_a_preset_delete_horizon_is_refused(
    seeded: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = jsonl(tmp_path, {"key": "a", "value": "2"}, {"key": "b", "value": None, "delete_horizon_ms": 1})
    out = refused(capsys, seeded, "append", seeded.url, "orders", "0", source, "--now", str(CLOCK))
    assert f"{source}: the record at offset 3 carries delete_horizon_ms 1, which only the cleaner sets" in out
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"key": [b"b"], "value": pa.array([None], pa.binary()), "delete_horizon_ms": [5]}), path)
    out = refused(capsys, seeded, "append", seeded.url, "orders", "0", str(path), "--now", str(CLOCK))
    assert "carries delete_horizon_ms 5, which only the cleaner sets" in out
    marker = rec(None, None, producer_id=7, is_control=True, control_type="abort", delete_horizon_ms=5)
    with pytest.raises(InvalidRecordsError, match="only the cleaner sets"):
        seeded.append(TP, table(marker), now_ms=2)


def test_a_dump_of_an_uncleaned_log_appends_again(
    seeded: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seeded.append(TP, keyed("a=-"), now_ms=2)
    dump = tmp_path / "dump.parquet"
    assert run(capsys, "read", seeded.url, "orders", "0", "-o", str(dump))[0] == EXIT_OK
    copy = Store.open(str(tmp_path / "copy"))
    code, out = run(capsys, "append", copy.url, "orders", "0", str(dump), "--now", str(CLOCK), "--no-timestamp")
    assert code == EXIT_OK, out
    assert copy.read(TP).equals(seeded.read(TP))


def test_snapshot_sees_every_file(seeded: Store) -> None:
    """The guard the tests above rely on: a stray file anywhere in the store changes the snapshot."""
    before = snapshot(seeded)
    with open(os.path.join(seeded.storage.root, "orders", "0", "segments", "stray"), "wb") as stray:
        stray.write(b"")
    assert snapshot(seeded) != before
