"""Configuration: Kafka's names and defaults, precedence of sources, and Kafka's wording for bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from compaction.clean.settings import BROKER_NAMES, TOPIC_KEYS, CleaningConfig, TopicConfig
from compaction.cli import EXIT_INVALID, main
from compaction.config import Settings, read_properties
from compaction.errors import ConfigError
from compaction.rules import Strategy
from compaction.schema import LONG_MAX
from compaction.store.formats import SegmentFormat
from tests.helpers import ROOT


def test_defaults_are_kafkas() -> None:
    assert Settings.load(environ={}).defaults == TopicConfig(
        cleanup_policy=("delete",),
        min_cleanable_dirty_ratio=0.5,
        min_compaction_lag_ms=0,
        max_compaction_lag_ms=LONG_MAX,
        segment_bytes=1_073_741_824,
        segment_ms=604_800_000,
        retention_ms=604_800_000,
        retention_bytes=-1,
        segment_format=None,
        max_message_bytes=1_048_588,
        cleaning=CleaningConfig(
            compaction_strategy=Strategy.OFFSET,
            compaction_strategy_header="",
            delete_retention_ms=86_400_000,
            producer_id_expiration_ms=86_400_000,
        ),
    )


#: A value other than the default for each of Kafka's topic names.
OTHER_VALUES = {
    "cleanup.policy": "compact,delete",
    "min.cleanable.dirty.ratio": 0.25,
    "min.compaction.lag.ms": 5,
    "max.compaction.lag.ms": 6,
    "delete.retention.ms": 7,
    "segment.bytes": 800,
    "segment.ms": 9,
    "compaction.strategy": "header",
    "compaction.strategy.header": "v",
    "retention.ms": 10,
    "retention.bytes": 11,
    "segment.format": "kafka",
    "producer.id.expiration.ms": 12,
    "max.message.bytes": 13,
}
EXPECTED = TopicConfig(
    cleanup_policy=("compact", "delete"),
    min_cleanable_dirty_ratio=0.25,
    min_compaction_lag_ms=5,
    max_compaction_lag_ms=6,
    segment_bytes=800,
    segment_ms=9,
    retention_ms=10,
    retention_bytes=11,
    segment_format=SegmentFormat.KAFKA,
    max_message_bytes=13,
    cleaning=CleaningConfig(
        compaction_strategy=Strategy.HEADER,
        compaction_strategy_header="v",
        delete_retention_ms=7,
        producer_id_expiration_ms=12,
    ),
)


def test_each_kafka_name_sets_its_own_setting_at_the_broker_and_the_topic_level() -> None:
    assert sorted(OTHER_VALUES) == sorted(TOPIC_KEYS)
    broker = {TOPIC_KEYS[name][1]: value for name, value in OTHER_VALUES.items()}
    assert sorted(BROKER_NAMES[name] for name in broker) == sorted(TOPIC_KEYS)
    assert Settings.load(overrides=broker, environ={}).defaults == EXPECTED
    topic = Settings.load(overrides={"topics": {"orders": OTHER_VALUES}}, environ={})
    assert topic.topic_config("orders") == EXPECTED
    assert topic.topic_config("other") == TopicConfig()


@pytest.mark.parametrize("name", ["local.toml", "production.toml"])
def test_shipped_examples_are_valid(name: str) -> None:
    settings = Settings.load(ROOT / "conf" / name, environ={})
    assert settings.defaults.compact


def test_file_then_environment_then_flags(tmp_path: Path) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text(
        '"log.cleanup.policy" = "compact"\n"log.cleaner.min.cleanable.ratio" = 0.3\n'
        '[topics."orders*"]\n"compaction.strategy" = "timestamp"\n"segment.ms" = 1000\n'
        '[topics."orders"]\n"segment.ms" = 2000\n[cleaner]\n"keyless.records" = "drop"\n'
    )
    settings = Settings.load(conf, environ={})
    assert settings.defaults.min_cleanable_dirty_ratio == 0.3
    orders = settings.topic_config("orders")
    assert (orders.cleaning.compaction_strategy, orders.segment_ms) == ("timestamp", 2000), "exact name applies last"
    assert settings.topic_config("orders-eu").segment_ms == 1000
    assert settings.topic_config("other").cleaning.compaction_strategy == "offset"
    assert settings.cleaner.keyless_records == "drop"

    env = {
        "COMPACTION_SET_LOG_CLEANER_MIN_CLEANABLE_RATIO": "0.4",
        "COMPACTION_SET_CLEANER__KEYLESS_RECORDS": "keep",
        "COMPACTION_CONFIG_FILE": "other variables of the project are not settings",
    }
    settings = Settings.load(conf, environ=env)
    assert (settings.defaults.min_cleanable_dirty_ratio, settings.cleaner.keyless_records) == (0.4, "keep")

    flags = ["log.cleaner.min.cleanable.ratio=0.6", "orders:segment.ms=3000", "cleaner.max.bytes.per.run=1000"]
    settings = Settings.load(conf, environ=env, flags=flags)
    assert settings.defaults.min_cleanable_dirty_ratio == 0.6
    assert settings.topic_config("orders").segment_ms == 3000
    assert settings.topic_config("orders").cleaning.compaction_strategy == "timestamp", "flags merge into file tables"
    assert settings.cleaner.max_bytes_per_run == 1000


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"log.cleaner.min.cleanable.ratio": 1.5},
            "Invalid value 1.5 for configuration log.cleaner.min.cleanable.ratio: Value must be no more than 1",
        ),
        (
            {"topics": {"t": {"min.cleanable.dirty.ratio": -0.1}}},
            "Invalid value -0.1 for configuration min.cleanable.dirty.ratio: Value must be at least 0",
        ),
        (
            {"topics": {"t": {"min.compaction.lag.ms": -1}}},
            "Invalid value -1 for configuration min.compaction.lag.ms: Value must be at least 0",
        ),
        (
            {"log.cleaner.max.compaction.lag.ms": 0},
            "Invalid value 0 for configuration log.cleaner.max.compaction.lag.ms: Value must be at least 1",
        ),
        (
            {"topics": {"t": {"min.compaction.lag.ms": 200, "max.compaction.lag.ms": 100}}},
            "conflict topic config setting min.compaction.lag.ms (200) > max.compaction.lag.ms (100)",
        ),
        ({"topics": {"t": {"compaction.strategy": "header"}}}, "compaction.strategy.header must be specified."),
        (
            {"topics": {"t": {"compaction.strategy": "newest"}}},
            "Invalid value newest for configuration compaction.strategy: String must be one of: offset, timestamp, "
            "header",
        ),
        (
            {"topics": {"t": {"cleanup.policy": "compact,forever"}}},
            "Invalid value compact,forever for configuration cleanup.policy: String must be one of: compact, delete",
        ),
        ({"topics": {"t": {"min.cleanable.ratio": 0.1}}}, "Unknown topic config name: min.cleanable.ratio"),
        ({"log.cleaner.threads.count": 2}, "Unknown configuration 'log.cleaner.threads.count'"),
        (
            {"log.retention.ms": "soon"},
            "Invalid value soon for configuration log.retention.ms: Not a number of type LONG",
        ),
    ],
)
def test_invalid_values_fail_with_kafkas_wording(overrides: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.load(overrides=overrides, environ={})
    assert str(info.value).startswith(message)


def test_a_combination_of_matching_tables_is_checked_for_the_topic() -> None:
    settings = Settings.load(
        overrides={"topics": {"a*": {"min.compaction.lag.ms": 500}, "*z": {"max.compaction.lag.ms": 100}}}, environ={}
    )
    with pytest.raises(ConfigError, match=r"lag.ms \(500\) > max.compaction.lag.ms \(100\) \(topic az\)"):
        settings.topic_config("az")


def test_invalid_configuration_exits_with_its_own_code_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('"log.cleaner.min.cleanable.ratio" = 2\n')
    missing_store = str(tmp_path / "never-created")
    assert main(["plan", missing_store, "--conf", str(bad)]) == EXIT_INVALID
    assert "Value must be no more than 1" in capsys.readouterr().err
    assert main(["plan", missing_store, "--set", "orders:compaction.strategy=header"]) == EXIT_INVALID
    assert "compaction.strategy.header must be specified." in capsys.readouterr().err
    not_toml = tmp_path / "x.toml"
    not_toml.write_text("= nope")
    assert main(["plan", missing_store, "--conf", str(not_toml)]) == EXIT_INVALID
    assert not Path(missing_store).exists()


def test_unquoted_dotted_names_are_kafkas_names(tmp_path: Path) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text(
        'log.cleanup.policy = "compact"\nlog.cleaner.min.cleanable.ratio = 0.2\n'
        "[topics.orders]\nmin.compaction.lag.ms = 5\n[cleaner]\ngc.grace.ms = 1000\n"
    )
    settings = Settings.load(conf, environ={})
    assert settings.defaults.compact and settings.defaults.min_cleanable_dirty_ratio == 0.2
    assert settings.topic_config("orders").min_compaction_lag_ms == 5
    assert settings.cleaner.gc_grace_ms == 1000


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "log.cleaner.min.cleanable.ration = 0.2\n",
            "Unknown configuration 'log.cleaner.min.cleanable.ration' (did you mean "
            "'log.cleaner.min.cleanable.ratio'?) "
            "(set in {conf} line 1)",
        ),
        (
            '\n[cleaner]\n"gc.grace" = 5\n',
            "Unknown configuration 'gc.grace' in [cleaner] (did you mean 'gc.grace.ms'?) (set in {conf} line 3)",
        ),
        (
            '"log.cleanup.policy" = "compact"\n"log.retention.ms" = -5\n',
            "Invalid value -5 for configuration log.retention.ms: Value must be at least -1 (set in {conf} line 2)",
        ),
        (
            '[cleaner]\n"task.max.records" = 0\n',
            "Invalid value 0 for configuration task.max.records: Input should be greater than or equal to 1 "
            "(set in {conf} line 2)",
        ),
    ],
)
def test_errors_name_the_file_and_line_and_suggest_a_name(tmp_path: Path, text: str, message: str) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text(text)
    with pytest.raises(ConfigError) as info:
        Settings.load(conf, environ={})
    assert str(info.value) == message.format(conf=conf)


def test_errors_name_the_environment_variable_or_the_flag() -> None:
    with pytest.raises(ConfigError, match=r"\(set in environment variable COMPACTION_SET_LOG_ROLL_MS\)$"):
        Settings.load(environ={"COMPACTION_SET_LOG_ROLL_MS": "0"})
    expected = r"did you mean 'segment.ms'\?\) \(in \[topics.'t'\], set in --set t:segment=1\)"
    with pytest.raises(ConfigError, match=expected):
        Settings.load(environ={}, flags=["t:segment=1"])


def test_a_kafka_server_properties_file_is_read_as_it_is(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    conf = tmp_path / "server.properties"
    conf.write_text(
        "# Kafka's broker configuration\nbroker.id=0\nnum.network.threads=3\n"
        "log.cleanup.policy=compact\nlog.retention.hours=168\nlog.roll.hours = 24\n"
        "log.cleaner.delete.retention.ms: 3600000\n! a comment\nlog.dirs=/var/lib/kafka/a,\\\n"
        "    /var/lib/kafka/b\nlog.cleaner.min.cleanable.ration=0.1\n"
    )
    with caplog.at_level("WARNING", logger="compaction.config"):
        settings = Settings.load(conf, environ={})
    defaults = settings.defaults
    assert defaults.compact and defaults.retention_ms == 168 * 3_600_000 and defaults.segment_ms == 24 * 3_600_000
    assert defaults.cleaning.delete_retention_ms == 3_600_000
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, "the names this job does not use are listed once"
    assert "broker.id, num.network.threads, log.dirs" in warnings[0]
    assert "log.cleaner.min.cleanable.ration (did you mean 'log.cleaner.min.cleanable.ratio'?)" in warnings[0]


#: Every form of Java's .properties syntax, as bytes: Kafka reads server.properties with
#: Properties.load(InputStream), so the file is ISO 8859-1 and other characters come as \uXXXX escapes.
EVERY_FORM = (
    b"# Kafka's broker configuration\n"
    b"! a bang comment\n"
    b"   # an indented comment\n"
    b"plain=one\n"
    b"colon:two\n"
    b"space three\n"
    b"  padded   =   four  \n"
    b"tab\tfive\n"
    b"escaped\\ key\\=x\\:y = six\n"
    b"unicode=caf\\u00e9 \\u0041\n"
    b"escapes=a\\tb\\nc\\\\d\\qe\n"
    b"multi = first, \\\n"
    b"        second, \\\n"
    b"   third\n"
    b"not.continued = ends in a backslash\\\\\n"
    b"# a comment does not continue \\\n"
    b"comment.next = seven\n"
    b"double==eight\n"
    b"empty.value=\n"
    b"lonely.key\n"
    b"latin1 = \xe9\n"
    b"utf8 = \xc3\xa9\n"
    b"emoji = \\ud83d\\ude00\n"
    b"crlf = nine\r\n"
    b"cr = ten\r"
    b"last = eleven\\"
)


def test_a_properties_file_is_read_as_javas_properties_load_reads_it() -> None:
    # What java.util.Properties.load(InputStream) gives for EVERY_FORM (JDK 17), with the line each setting
    # starts on.
    assert read_properties(EVERY_FORM, "every.properties") == [
        ("plain", "one", 4),
        ("colon", "two", 5),
        ("space", "three", 6),
        ("padded", "four  ", 7),  # trailing white space is part of the value
        ("tab", "five", 8),
        ("escaped key=x:y", "six", 9),
        ("unicode", "caf\u00e9 A", 10),
        ("escapes", "a\tb\nc\\dqe", 11),  # \t \n \\ are escapes; before any other character \ is dropped
        ("multi", "first, second, third", 12),  # a continuation line's leading white space is dropped
        ("not.continued", "ends in a backslash\\", 15),  # an escaped backslash does not continue the line
        ("comment.next", "seven", 17),  # nor does a backslash ending a comment
        ("double", "=eight", 18),  # one separator only
        ("empty.value", "", 19),
        ("lonely.key", "", 20),
        ("latin1", "\u00e9", 21),  # the byte 0xE9
        ("utf8", "\u00c3\u00a9", 22),  # UTF-8's two bytes for é are two ISO 8859-1 characters, as Kafka sees them
        ("emoji", "\U0001f600", 23),  # a UTF-16 surrogate pair of escapes is one character
        ("crlf", "nine", 24),
        ("cr", "ten", 25),
        ("last", "eleven", 26),  # a continuation at the end of the file ends the value
    ]


def test_a_malformed_unicode_escape_is_refused_naming_its_line(tmp_path: Path) -> None:
    conf = tmp_path / "server.properties"
    conf.write_bytes(b"broker.id=0\n# \\u in a comment is text\nlog.cleanup.policy=\\u00compact\n")
    with pytest.raises(
        ConfigError,
        match=rf"^configuration file {conf} line 3: malformed \\uXXXX escape "
        r"\\u00co \(a \\u takes 4 hexadecimal digits\)$",
    ):
        Settings.load(conf, environ={})


def test_server_properties_escapes_and_continuations_reach_the_settings(tmp_path: Path) -> None:
    conf = tmp_path / "server.properties"
    conf.write_bytes(
        b"log.cleanup.policy = \\u0063ompact\n"
        b"log.cleaner.delete.retention.ms: 36\\\n"
        b"      00000\n"
        b"log.roll.hours\t24\r\n"
        b"log.cleaner.min.cleanable.ratio=0.7\\\n"
    )
    defaults = Settings.load(conf, environ={}).defaults
    assert defaults.compact and defaults.cleaning.delete_retention_ms == 3_600_000
    assert defaults.segment_ms == 24 * 3_600_000 and defaults.min_cleanable_dirty_ratio == 0.7
    conf.write_bytes(b"broker.id=0\n\nlog.cleaner.min.cleanable.ratio = \\\n   1.5\n")
    with pytest.raises(ConfigError, match=rf"\(set in {conf} line 3\)$"):
        Settings.load(conf, environ={})


def test_a_toml_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    conf = tmp_path / "c.toml"
    conf.write_bytes(b'"log.cleanup.policy" = "compact"\n[cleaner]\n"metrics.textfile" = "/tmp/caf\xe9.prom"\n')
    with pytest.raises(
        ConfigError,
        match=rf"^configuration file {conf} is not UTF-8 text \(TOML is\): byte 0xe9 "
        "on line 3$",
    ):
        Settings.load(conf, environ={})


def test_the_finer_unit_wins_as_in_kafka() -> None:
    both = {"log.retention.hours": 1, "log.retention.minutes": 2, "log.roll.hours": 1, "log.roll.ms": 5}
    defaults = Settings.load(overrides=both, environ={}).defaults
    assert (defaults.retention_ms, defaults.segment_ms) == (120_000, 5)
