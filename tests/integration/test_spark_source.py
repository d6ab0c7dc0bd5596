"""The store as the Spark data source ``compaction``, on a classic session and on Spark Connect: discovered without
registration; a batch read returns what ``compaction read`` returns (chispa, every strategy's table view, both
segment formats, versions and offsets); filters are pushed down (what the tasks open is counted on S3); a write
appends what ``compaction read`` and ``compaction verify`` then find; racing writers lose nothing; bad input is
refused in one line before anything commits; the SQL table functions return what the commands print.

The streaming verbs are in test_spark_stream.py; the write's and the options' logic without Spark in
tests/unit/test_spark_write.py and tests/unit/test_spark_options.py.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality

from compaction.spark import register
from compaction.store import Manifest, SegmentFormat, SegmentMeta, Store, TopicPartition, Writer
from compaction.store import segment as segment_format
from compaction.store.log import appended_state
from compaction.store.segment import records
from compaction.synthetic import GenerateSpec, generate
from tests.helpers import readstore
from tests.helpers.cli import run
from tests.helpers.cluster import free_port
from tests.helpers.faultproxy import FaultProxy, fault_proxy
from tests.helpers.readstore import HEADER, NOW, TOPIC, Built, cli_table
from tests.helpers.s3server import new_bucket, storage_options

pytestmark = [pytest.mark.spark]

STRATEGY_VIEWS = [
    pytest.param([], id="log"),
    pytest.param(["offset"], id="latest-offset"),
    pytest.param(["timestamp"], id="latest-timestamp"),
    pytest.param(["header"], id="latest-header"),
]


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """Parquet segments: versions, deletion vectors, log starts, keyless records, tombstones, transactions."""
    return readstore.built_locally(tmp_path_factory)


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """Kafka's .log segments of zstd record batches, with a version header and records without a timestamp."""
    url = str(tmp_path_factory.mktemp("kafka") / "store")
    generate(
        Store.open(url),
        GenerateSpec(
            topics=(TOPIC,),
            partitions=2,
            records=1_200,
            keys=90,
            segment_records=200,
            tombstone_ratio=0.1,
            keyless_ratio=0.05,
            missing_timestamp_ratio=0.05,
            version_header=HEADER,
            segment_format=SegmentFormat.KAFKA,
            compression="zstd",
            end_time_ms=NOW,
            seed=11,
        ),
        now_ms=NOW,
    )
    return Built(url, {}, [], {0: [], 1: [], 2: []})


@pytest.fixture
def registered(any_spark: Any) -> Any:
    register(any_spark)
    return any_spark


@pytest.fixture
def classic(spark: Any) -> Any:
    """The classic session, registered: for what runs the same on both kinds of session once shown on both."""
    register(spark)
    return spark


def kafka_layout(log: pa.Table, headers: bool = False) -> pa.Table:
    """``compaction read``'s records in the Kafka source's columns, written out here: a timestamp in µs, none
    for a record without one (null or negative), timestampType 0, the topic's name."""
    stamps = [None if t is None or t < 0 else t * 1000 for t in log.column("timestamp").to_pylist()]
    columns = {
        "key": log.column("key"),
        "value": log.column("value"),
        "topic": pa.array([TOPIC] * log.num_rows),
        "partition": log.column("partition"),
        "offset": log.column("offset"),
        "timestamp": pa.array(stamps, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        "timestampType": pa.array([0] * log.num_rows, pa.int32()),
    }
    if headers:
        columns["headers"] = log.column("headers")
    return pa.table(columns)


def same_rows(spark: Any, frame: Any, expected: pa.Table) -> None:
    assert frame.columns == expected.column_names
    assert_df_equality(frame, spark.createDataFrame(expected), ignore_row_order=True, ignore_nullable=True)


def read(spark: Any, built: Built, **options: str) -> Any:
    reader = spark.read.format("compaction")
    for name, value in {**{f"storage.{k}": v for k, v in built.options.items()}, **options}.items():
        reader = reader.option(name, value)
    return reader.load(built.url)


# Discovery ------------------------------------------------------------------------------------------------------

DISCOVERY = textwrap.dedent("""
    import sys
    from compaction.engine.session import spark_session
    classic = spark_session("local[1]", conf={"spark.ui.enabled": "false",
        "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
        "spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": sys.argv[2]})
    connect = spark_session(remote="sc://127.0.0.1:" + sys.argv[2], ship=False)
    for session in (classic, connect):
        print(session.read.format("compaction").load(sys.argv[1]).count())
    connect.stop()
    classic.stop()
""")


@pytest.mark.slow
def test_format_compaction_needs_no_registration_on_classic_spark_or_spark_connect(
    local: Built, tmp_path: Path
) -> None:
    """Spark's own discovery of the installed pyspark_compaction module (make setup installs this checkout
    editable, whose import hook pkgutil cannot list: a folder on the path holds the module)."""
    script = tmp_path / "discover.py"
    script.write_text(DISCOVERY)
    done = subprocess.run(
        [sys.executable, str(script), local.url, str(free_port())],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    live = cli_table(local, tmp_path).num_rows
    assert done.stdout.split() == [str(live), str(live)]


# Batch read ----------------------------------------------------------------------------------------------------


READS = [
    pytest.param(session, name, view.values[0], id=f"{session}-{name}-{view.id}")
    for session in ("spark", "connect")
    for name in ("local", "kafka")
    for view in STRATEGY_VIEWS
    if session == "spark" or view.id in ("log", "latest-header")
]


@pytest.mark.parametrize(("session", "name", "view"), READS)
def test_a_batch_read_returns_the_records_of_compaction_read(
    request: pytest.FixtureRequest, tmp_path: Path, session: str, name: str, view: list[str]
) -> None:
    """Every strategy's view of both formats on classic Spark; the log and the header strategy's view on Connect."""
    any_spark = request.getfixturevalue(session)
    built: Built = request.getfixturevalue(name)
    flags = (
        []
        if not view
        else [
            "--latest",
            "--set",
            f"{TOPIC}:compaction.strategy={view[0]}",
            "--set",
            f"{TOPIC}:compaction.strategy.header={HEADER}",
        ]
    )
    expected = kafka_layout(cli_table(built, tmp_path, *flags), headers=True)
    options = (
        {} if not view else {"latest": "true", "compaction.strategy": view[0], "compaction.strategy.header": HEADER}
    )
    frame = read(any_spark, built, includeHeaders="true", **options)
    same_rows(any_spark, frame, expected)


def test_a_read_at_a_version_and_between_offsets_is_compaction_reads(
    any_spark: Any, local: Built, tmp_path: Path
) -> None:
    older = cli_table(local, tmp_path, "--version", str(readstore.OLDER))
    same_rows(any_spark, read(any_spark, local, version=str(readstore.OLDER)), kafka_layout(older))
    log = cli_table(local, tmp_path)
    starting, ending = {"0": 200, "2": -2}, {"0": 900, "1": 400}
    keep = [
        (p == 0 and 200 <= o < 900) or (p == 1 and o < 400) or p == 2
        for p, o in zip(log.column("partition").to_pylist(), log.column("offset").to_pylist(), strict=True)
    ]
    frame = read(
        any_spark, local, startingOffsets=json.dumps({TOPIC: starting}), endingOffsets=json.dumps({TOPIC: ending})
    )
    same_rows(any_spark, frame, kafka_layout(log.filter(pa.array(keep))))
    assigned = read(any_spark, local, assign=json.dumps({TOPIC: [1]}))
    same_rows(any_spark, assigned, kafka_layout(log.filter(pa.compute.equal(log.column("partition"), 1))))


def test_the_store_columns_come_only_when_asked(any_spark: Any, local: Built, tmp_path: Path) -> None:
    frame = read(any_spark, local, includeStoreColumns="true", assign=json.dumps({TOPIC: [0]}))
    log = cli_table(local, tmp_path)
    zero = log.filter(pa.compute.equal(log.column("partition"), 0))
    got = frame.select("offset", "producer_id", "is_control", "control_type").toArrow().sort_by("offset")
    assert got.column("is_control").to_pylist() == zero.column("is_control").to_pylist()
    assert got.column("producer_id").to_pylist() == zero.column("producer_id").to_pylist()
    assert "producer_id" not in read(any_spark, local).columns


def test_a_temporary_view_of_the_store_in_sql(any_spark: Any, local: Built, tmp_path: Path) -> None:
    any_spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW store_view USING compaction OPTIONS (path '{local.url}')")
    counted = any_spark.sql("SELECT partition, count(*) AS n FROM store_view GROUP BY partition ORDER BY partition")
    log = cli_table(local, tmp_path)
    expected = [(p, log.column("partition").to_pylist().count(p)) for p in range(readstore.PARTITIONS)]
    assert [(r.partition, r.n) for r in counted.collect()] == expected


# Pushdown, counted on S3 -----------------------------------------------------------------------------------------

ROWS_PER_GROUP, GROUPS, SEGMENTS = 200, 4, 3
CLICKS = "clicks"
BASE_MS = 1_700_000_000_000


@pytest.fixture(scope="module")
def clicks(s3_endpoint: str) -> Iterator[tuple[str, FaultProxy]]:
    """Topic ``clicks`` on S3: 2 partitions of 3 segments, each of 4 row groups of 200 records of 1 KB values that do
    not compress (a row group is larger than the tail a Parquet reader fetches for the footer; timestamps rise with
    offsets), and the proxy the reads go through."""
    url = new_bucket(s3_endpoint)
    store = Store.open(url, storage_options(s3_endpoint))
    noise = random.Random(5)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(segment_format, "ROW_GROUP_BYTES", 1)  # each piece a row group of its own
        for partition in range(2):
            tp = TopicPartition(CLICKS, partition)
            for first in range(0, ROWS_PER_GROUP * GROUPS * SEGMENTS, ROWS_PER_GROUP * GROUPS):
                pieces = [
                    records(
                        [
                            {
                                "offset": o,
                                "timestamp": BASE_MS + o * 1000,
                                "key": f"k-{o % 50}",
                                "value": noise.randbytes(1000),
                            }
                            for o in range(start, start + ROWS_PER_GROUP)
                        ]
                    )
                    for start in range(first, first + ROWS_PER_GROUP * GROUPS, ROWS_PER_GROUP)
                ]
                segment = store.objects.write_segment_pieces(
                    tp, pieces, first, first + ROWS_PER_GROUP * GROUPS, created_ms=NOW
                )
                assert segment is not None
                written: SegmentMeta = segment

                def build(latest: Manifest | None, written: SegmentMeta = written) -> dict[str, Any]:
                    return appended_state(latest, [written], records([]), "clicks")

                store.commit(tp, build, writer=Writer(), operation="append", now_ms=NOW)
    with fault_proxy(s3_endpoint) as proxy:
        yield url, proxy


def opened(store: Store, proxy: FaultProxy) -> dict[str, set[int]]:
    """Per segment object the read fetched bytes of, the row groups whose bytes it fetched besides the object's
    tail (where a reader finds the footer)."""
    groups: dict[str, tuple[int, list[tuple[int, int]]]] = {}
    for tp in (TopicPartition(CLICKS, 0), TopicPartition(CLICKS, 1)):
        for segment in store.manifest(tp).segments:
            meta = pq.ParquetFile(pa.BufferReader(store.storage.read_bytes(f"{tp.prefix}/{segment.path}"))).metadata
            spans = []
            for i in range(meta.num_row_groups):
                columns = [meta.row_group(i).column(j) for j in range(meta.num_columns)]
                start = min(c.dictionary_page_offset or c.data_page_offset for c in columns)
                spans.append((start, start + sum(c.total_compressed_size for c in columns)))
            groups[f"{tp.prefix}/{segment.path}"] = (segment.size_bytes, spans)
    found: dict[str, set[int]] = {}
    for path, asked in proxy.ranges:
        name = next((n for n in groups if path.split("?")[0].endswith("/" + n)), None)
        if name is None:
            continue
        size, spans = groups[name]
        low, high = (0, size - 1) if asked is None else map(int, asked.split("=")[1].split("-"))
        touched = found.setdefault(name, set())
        if high < size - 1:
            touched.update(i for i, (a, b) in enumerate(spans) if low < b and high >= a)
    return found


@pytest.mark.s3
@pytest.mark.parametrize(
    ("where", "rows", "objects", "groups"),
    [
        ("partition = 1 AND offset >= 1100 AND offset < 1280", 180, 1, 2),
        (f"timestamp >= timestamp_millis({BASE_MS + 2_300_000})", 200, 2, 2),
        ("topic = 'clicks' AND partition IN (0) AND offset = 2", 1, 1, 1),
        ("key = cast('k-7' AS binary) AND partition = 0", 48, 3, 12),
    ],
    ids=["partition-offsets", "timestamp", "offset", "key"],
)
def test_pushed_filters_skip_partitions_files_and_row_groups(
    registered: Any, clicks: tuple[str, FaultProxy], s3_endpoint: str, where: str, rows: int, objects: int, groups: int
) -> None:
    url, proxy = clicks
    proxy.clear()
    frame = (
        registered.read.format("compaction")
        .option("storage.client_kwargs.endpoint_url", proxy.endpoint)
        .option("storage.default_cache_type", "none")
        .load(url)
        .where(where)
    )
    assert frame.count() == rows
    touched = opened(Store.open(url, storage_options(s3_endpoint)), proxy)
    assert (len(touched), sum(len(g) for g in touched.values())) == (objects, groups), touched


def test_a_read_without_pushdown_still_filters_right(any_spark: Any, local: Built, tmp_path: Path) -> None:
    """Spark's default keeps pushdown off (spark.sql.python.filterPushdown.enabled): the read works, Spark filters."""
    any_spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    try:
        got = read(any_spark, local).where("partition = 1 AND offset < 300").count()
    finally:
        any_spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    log = cli_table(local, tmp_path)
    assert got == sum(
        1
        for p, o in zip(log.column("partition").to_pylist(), log.column("offset").to_pylist(), strict=True)
        if p == 1 and o < 300
    )


# Batch write -------------------------------------------------------------------------------------------------------


def rows_frame(spark: Any, rows: list[tuple[Any, ...]], schema: str) -> Any:
    return spark.createDataFrame(rows, schema)


@pytest.mark.parametrize("fmt", [SegmentFormat.PARQUET, SegmentFormat.KAFKA])
def test_a_write_appends_what_compaction_read_and_verify_then_find(
    registered: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: SegmentFormat
) -> None:
    url = str(tmp_path / "store")
    generate(
        Store.open(url),
        GenerateSpec(
            topics=("orders",), partitions=3, records=30, keys=10, segment_format=fmt, end_time_ms=NOW, seed=2
        ),
        now_ms=NOW,
    )
    frame = rows_frame(
        registered,
        [
            ("orders", 2, b"a", b"1", None),
            ("orders", None, b"user-7", b"2", None),
            ("orders", None, None, b"3", None),
            ("orders", 0, b"b", None, None),
        ],
        "topic string, partition int, key binary, value binary, timestamp timestamp",
    )
    frame.write.format("compaction").mode("append").save(url)
    code, out = run(capsys, "verify", url)
    assert code == 0, out
    log = cli_table(Built(url, {}, [], {}), tmp_path)
    written = log.filter(pa.compute.greater_equal(log.column("offset"), 10))
    pairs = sorted((r["key"] or b"", r["value"] or b"") for r in written.select(["key", "value"]).to_pylist())
    assert pairs == [(b"", b"3"), (b"a", b"1"), (b"b", b""), (b"user-7", b"2")]
    assert [r["partition"] for r in written.to_pylist() if r["key"] == b"a"] == [2]
    manifests = [Store.open(url).manifest(TopicPartition("orders", p)) for p in range(3)]
    assert {s.format for m in manifests for s in m.segments} == {fmt}, "a partition's own format"
    read_back = read(registered, Built(url, {}, [], {})).where("offset >= 10")
    same_rows(registered, read_back, kafka_layout(written))


def test_a_kafka_frame_with_offsets_is_mirrored_offsets_and_all(classic: Any, local: Built, tmp_path: Path) -> None:
    """The mirror recipe's shape: a frame read with the Kafka source's columns, written to an empty topic."""
    url = str(tmp_path / "mirror")
    Store.open(url).create_topic(TOPIC, readstore.PARTITIONS, now_ms=NOW)
    read(classic, local, includeHeaders="true").write.format("compaction").mode("append").save(url)
    got = read(classic, Built(url, {}, [], {}), includeHeaders="true")
    same_rows(classic, got, kafka_layout(cli_table(local, tmp_path), headers=True))


def test_two_writers_racing_on_one_partition_lose_and_reorder_nothing(spark: Any, tmp_path: Path) -> None:
    url = str(tmp_path / "race")
    store = Store.open(url)
    store.append(TopicPartition("orders", 0), records([{"key": "k", "value": "0"}]), now_ms=NOW)
    register(spark)
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            frame = rows_frame(
                spark,
                [("orders", 0, f"{name}-{i:03d}".encode()) for i in range(200)],
                "topic string, partition int, value binary",
            ).repartition(1)
            frame.write.format("compaction").mode("append").save(url)
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=writer, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    log = store.read(TopicPartition("orders", 0), columns=["offset", "value"]).to_pylist()
    assert [r["offset"] for r in log] == list(range(401))
    for name in ("a", "b"):
        mine = [r["value"] for r in log if r["value"].startswith(name.encode())]
        assert mine == [f"{name}-{i:03d}".encode() for i in range(200)]


# Bad input -------------------------------------------------------------------------------------------------------

BAD_WRITES = [
    pytest.param([(None, 1, b"k", b"v")], "a record for partition 1: field topic is null", id="null topic"),
    pytest.param(
        [("orders", 7, b"k", b"v")],
        "a record for orders-7: field partition 7 is outside topic orders's partitions 0 to 2",
        id="partition outside",
    ),
    pytest.param(
        [("refunds", 0, b"k", b"v")],
        "a record for topic refunds: topic refunds does not exist in store",
        id="unknown topic",
    ),
    pytest.param(
        [("orders", 1, b"k", b"v" * 2_000)],
        "a record for orders-1: field value makes a record of 2,0",
        id="value too large",
    ),
]


@pytest.fixture
def small(tmp_path: Path) -> str:
    url = str(tmp_path / "small")
    generate(
        Store.open(url),
        GenerateSpec(topics=("orders",), partitions=3, records=30, keys=10, end_time_ms=NOW, seed=2),
        now_ms=NOW,
    )
    (tmp_path / "small.toml").write_text('[topics.orders]\n"max.message.bytes" = 1000\n')
    return url


def versions(url: str) -> list[int]:
    store = Store.open(url)
    return [store.manifest(tp).version for tp in store.topic_partitions()]


@pytest.mark.parametrize(("rows", "problem"), BAD_WRITES)
def test_bad_rows_are_refused_in_one_line_before_anything_commits(
    classic: Any, small: str, tmp_path: Path, rows: list[tuple[Any, ...]], problem: str
) -> None:
    good = [("orders", 0, b"fine", b"v")] * 3
    frame = rows_frame(classic, good + rows, "topic string, partition int, key binary, value binary")
    before = versions(small)
    with pytest.raises(Exception, match=problem):
        (frame.write.format("compaction").mode("append").option("conf", str(tmp_path / "small.toml")).save(small))
    assert versions(small) == before, "nothing committed"


def test_a_timestamp_outside_kafkas_range_is_refused(classic: Any, small: str) -> None:
    frame = classic.sql(
        "SELECT 'orders' AS topic, 2 AS partition, CAST('k' AS binary) AS key, "
        "CAST('v' AS binary) AS value, TIMESTAMP'1969-12-31 23:59:59 UTC' AS timestamp"
    )
    with pytest.raises(Exception, match="a record for orders-2: field timestamp -1000 ms is before 1970-01-01"):
        frame.write.format("compaction").mode("append").save(small)


def test_offsets_at_or_below_a_partitions_log_end_are_refused(classic: Any, small: str) -> None:
    frame = rows_frame(
        classic,
        [("orders", 1, 5, b"k", b"v"), ("orders", 1, 6, b"k", b"w")],
        "topic string, partition int, offset bigint, key binary, value binary",
    )
    before = versions(small)
    with pytest.raises(
        Exception,
        match=r"records for orders-1: offsets from 5 are at or below the partition's log "
        r"end 10",
    ):
        frame.write.format("compaction").mode("append").save(small)
    assert versions(small) == before


@pytest.mark.parametrize(
    ("verb", "problem"),
    [
        ("read", r"does not know the option\(s\) subscirbe for a read"),
        ("write", r"does not know the option\(s\) kafka.bootstrap.servers for a write"),
        ("overwrite", "mode overwrite is refused: a store's log is append-only"),
        ("column", "column 'vaule' is not one a write to format compaction takes"),
    ],
)
def test_an_unknown_option_a_mode_or_a_column_is_refused_in_one_line(
    classic: Any, small: str, verb: str, problem: str
) -> None:
    frame = rows_frame(classic, [("orders", b"v")], "topic string, value binary")
    with pytest.raises(Exception, match=problem):
        if verb == "read":
            classic.read.format("compaction").option("subscirbe", "orders").load(small).count()
        elif verb == "write":
            frame.write.format("compaction").mode("append").option("kafka.bootstrap.servers", "b:9092").save(small)
        elif verb == "overwrite":
            frame.write.format("compaction").mode("overwrite").save(small)
        else:
            frame.withColumnRenamed("value", "vaule").write.format("compaction").mode("append").save(small)


# SQL table functions ---------------------------------------------------------------------------------------------


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out = run(capsys, *argv, "--json")
    assert code == 0, out
    return json.loads(out)


def split(name: str) -> tuple[str, int]:
    topic, _, partition = name.rpartition("-")
    return topic, int(partition)


def test_the_sql_functions_return_what_the_commands_print(
    registered: Any, local: Built, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "plan.toml"
    conf.write_text(
        '"log.cleanup.policy" = "compact"\n"log.roll.ms" = 1\n'
        '[cleaner]\n"deletion.vector.max.age.ms" = 9000000000000000000\n'
    )  # reasons that do not age
    status = registered.sql(f"SELECT * FROM compaction_status('{local.url}') ORDER BY partition").collect()
    printed = cli_json(capsys, "status", local.url)["partitions"]
    assert [r.asDict() for r in status] == [
        {**p, "topic": split(p["partition"])[0], "partition": split(p["partition"])[1]} for p in printed
    ]
    plan = registered.sql(f"SELECT * FROM compaction_plan('{local.url}', '{conf}') ORDER BY partition").collect()
    planned = cli_json(capsys, "plan", local.url, "--conf", str(conf))["partitions"]
    assert [(r.topic, r.partition, r.decision, r.reason, r.clean_range, r.segments) for r in plan] == [
        (*split(p["partition"]), p["decision"], p["reason"], p["clean_range"], p["segments"])
        for p in sorted(planned, key=lambda p: split(p["partition"]))
    ]
    assert {r.decision for r in plan} == {"clean"}
    files = registered.sql(f"SELECT * FROM compaction_files('{local.url}', '{TOPIC}')").collect()
    listed = cli_json(capsys, "files", local.url, TOPIC)["partitions"]
    assert sorted((r.partition, r.url, r.live_records, r.deletes_count) for r in files) == sorted(
        (p["partition"], f["url"], f["live_records"], f["deletes"]["count"] if f["deletes"] else 0)
        for p in listed
        for f in p["files"]
    )
    versions_ = registered.sql(f"SELECT * FROM compaction_history('{local.url}', '{TOPIC}', 1)").collect()
    entries = cli_json(capsys, "history", local.url, TOPIC, "1")
    assert [r.asDict() for r in versions_] == [{**e, "topic": TOPIC, "partition": 1} for e in entries]


def test_the_sql_functions_types_are_typed_columns(classic: Any, local: Built) -> None:
    schema = classic.sql(f"SELECT * FROM compaction_plan('{local.url}')").schema
    types = {f.name: f.dataType.simpleString() for f in schema.fields}
    assert (types["partition"], types["cleanable_ratio"], types["active_rolled"], types["clean_range"]) == (
        "int",
        "double",
        "boolean",
        "array<bigint>",
    )


def test_a_bad_argument_to_a_sql_function_is_one_line(classic: Any, local: Built) -> None:
    with pytest.raises(Exception, match="topic name 'no/such' "):
        classic.sql(f"SELECT * FROM compaction_history('{local.url}', 'no/such', 0)").collect()
