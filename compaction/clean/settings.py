"""The cleaner's configuration model: a topic's settings with Kafka's names, defaults and validators, and
the job's own ``[cleaner]`` settings. The application (:mod:`compaction.config`) loads them from files, the
environment and flags; the cleaner only reads them, through :class:`CleanerConfig`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from compaction.clean.layout import DEFAULT_DELETION_VECTOR_MAX_AGE_MS, DEFAULT_DELETION_VECTOR_MAX_RATIO
from compaction.errors import ConfigError
from compaction.rules import Strategy, WinnerSearch
from compaction.schema import LONG_MAX
from compaction.store.formats import SegmentFormat
from compaction.store.gc import DEFAULT_GRACE_MS, DEFAULT_KEEP_VERSIONS

POLICIES = ("compact", "delete")


@dataclass(frozen=True)
class CleaningConfig:
    """What a cleaning keeps of a topic's records (what Kafka's Cleaner reads; the rest of :class:`TopicConfig`
    chooses what to clean and how segments are made): which of a key's records wins (KIP-280), how long a tombstone
    outlives the cleaning that reaches it (the delete horizon), and how long an idle producer's last batch is kept."""

    compaction_strategy: Strategy = Strategy.OFFSET
    compaction_strategy_header: str = ""
    delete_retention_ms: int = 86_400_000
    # A producer is active (its last batch kept, empty if need be) while its last batch is younger than this.
    producer_id_expiration_ms: int = 86_400_000


@dataclass(frozen=True)
class TopicConfig:
    """The effective configuration of one topic (broker defaults with its overrides applied)."""

    cleanup_policy: tuple[str, ...] = ("delete",)
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    segment_bytes: int = 1_073_741_824
    segment_ms: int = 604_800_000
    retention_ms: int = 604_800_000
    retention_bytes: int = -1
    # What the cleaner writes: Parquet or Kafka's .log record batches; None: the format the partition's segments
    # already have (its newest segment's).
    segment_format: SegmentFormat | None = None
    # The largest record batch the topic takes (Kafka's check on a producer's batch): what a write refuses beyond it.
    max_message_bytes: int = 1_048_588
    cleaning: CleaningConfig = CleaningConfig()

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy


#: The settings of a topic's :class:`CleaningConfig`, by field name.
CLEANING_FIELDS = frozenset(f.name for f in fields(CleaningConfig))


def with_settings(config: TopicConfig, settings: Mapping[str, Any]) -> TopicConfig:
    """``config`` with ``settings`` (field name -> value, the fields :data:`TOPIC_KEYS` names, its cleaning's
    among them) in place of its own."""
    cleaning = {name: value for name, value in settings.items() if name in CLEANING_FIELDS}
    own = {name: value for name, value in settings.items() if name not in CLEANING_FIELDS}
    return replace(config, **own, cleaning=replace(config.cleaning, **cleaning))


# Kafka's topic-level name -> (its field in TopicConfig or its CleaningConfig, broker-level synonym)
TOPIC_KEYS: dict[str, tuple[str, str]] = {
    "cleanup.policy": ("cleanup_policy", "log.cleanup.policy"),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", "log.cleaner.min.cleanable.ratio"),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", "log.cleaner.min.compaction.lag.ms"),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", "log.cleaner.max.compaction.lag.ms"),
    "delete.retention.ms": ("delete_retention_ms", "log.cleaner.delete.retention.ms"),
    "segment.bytes": ("segment_bytes", "log.segment.bytes"),
    "segment.ms": ("segment_ms", "log.roll.ms"),
    "compaction.strategy": ("compaction_strategy", "log.cleaner.compaction.strategy"),
    "compaction.strategy.header": ("compaction_strategy_header", "log.cleaner.compaction.strategy.header"),
    "retention.ms": ("retention_ms", "log.retention.ms"),
    "retention.bytes": ("retention_bytes", "log.retention.bytes"),
    "segment.format": ("segment_format", "log.segment.format"),
    "producer.id.expiration.ms": ("producer_id_expiration_ms", "producer.id.expiration.ms"),
    "max.message.bytes": ("max_message_bytes", "message.max.bytes"),
}
#: Kafka's broker-level name -> its topic-level name.
BROKER_NAMES = {broker: topic for topic, (_, broker) in TOPIC_KEYS.items()}

#: Kafka's validators: name -> (lowest allowed, highest allowed) for numbers.
RANGES: dict[str, tuple[float, float | None]] = {
    "min.cleanable.dirty.ratio": (0, 1),
    "min.compaction.lag.ms": (0, None),
    "max.compaction.lag.ms": (1, None),
    "delete.retention.ms": (0, None),
    "segment.bytes": (14, None),
    "segment.ms": (1, None),
    "retention.ms": (-1, None),
    "retention.bytes": (-1, None),
    "producer.id.expiration.ms": (1, None),
    "max.message.bytes": (0, None),
}


def _invalid(value: Any, name: str, reason: str) -> ConfigError:
    return ConfigError(f"Invalid value {value} for configuration {name}: {reason}")


def check_value(key: str, value: Any, name: str | None = None) -> Any:
    """Validate one setting (by its topic-level ``key``) the way Kafka's ConfigDef does, with Kafka's messages.

    ``name`` is the name the user wrote (a broker-level synonym, say), used in the message.
    """
    name = name or key
    if key == "cleanup.policy":
        items = [v.strip() for v in value.split(",")] if isinstance(value, str) else list(value)
        if not items or any(item not in POLICIES for item in items):
            raise _invalid(value, name, f"String must be one of: {', '.join(POLICIES)}")
        return tuple(sorted(set(items)))
    if key == "compaction.strategy":
        try:
            return Strategy(str(value).lower())
        except ValueError:
            raise _invalid(value, name, f"String must be one of: {', '.join(Strategy)}") from None
    if key == "segment.format":
        if value not in list(SegmentFormat):
            raise _invalid(value, name, f"String must be one of: {', '.join(SegmentFormat)}")
        return SegmentFormat(value)
    if key == "compaction.strategy.header":
        if not isinstance(value, str):
            raise _invalid(value, name, "Expected value to be a string")
        return value.strip()
    low, high = RANGES[key]
    kind = "DOUBLE" if key == "min.cleanable.dirty.ratio" else "LONG"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind == "LONG" and isinstance(value, float)):
        raise _invalid(value, name, f"Not a number of type {kind}")
    if value < low:
        raise _invalid(value, name, f"Value must be at least {low}")
    if high is not None and value > high:
        raise _invalid(value, name, f"Value must be no more than {high}")
    if kind == "LONG" and value > LONG_MAX:
        raise _invalid(value, name, f"Not a number of type {kind}")
    return float(value) if kind == "DOUBLE" else int(value)


def check_topic(config: TopicConfig, where: str) -> TopicConfig:
    """Kafka's cross-field rules (LogConfig.validateValues and KIP-280's topic validation)."""
    if config.min_compaction_lag_ms > config.max_compaction_lag_ms:
        raise ConfigError(
            f"conflict topic config setting min.compaction.lag.ms ({config.min_compaction_lag_ms}) > "
            f"max.compaction.lag.ms ({config.max_compaction_lag_ms}){where}"
        )
    if config.cleaning.compaction_strategy == "header" and not config.cleaning.compaction_strategy_header:
        raise ConfigError(f"compaction.strategy.header must be specified.{where}")
    return config


class CleanerSettings(BaseModel):
    """The job's own settings (no Kafka equivalent), in the ``[cleaner]`` table."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    keyless_records: Literal["keep", "drop"] = Field("keep", alias="keyless.records")
    dedupe_plan: WinnerSearch = Field(WinnerSearch.ARROW, alias="dedupe.plan")
    task_max_records: int = Field(5_000_000, alias="task.max.records", ge=1)
    deletion_vector_max_ratio: float = Field(
        DEFAULT_DELETION_VECTOR_MAX_RATIO, alias="deletion.vector.max.ratio", ge=0, lt=1
    )
    deletion_vector_max_age_ms: int = Field(
        DEFAULT_DELETION_VECTOR_MAX_AGE_MS, alias="deletion.vector.max.age.ms", ge=0
    )
    max_bytes_per_run: int | None = Field(None, alias="max.bytes.per.run", ge=1)
    gc_grace_ms: int = Field(DEFAULT_GRACE_MS, alias="gc.grace.ms", ge=0)
    gc_keep_versions: int = Field(DEFAULT_KEEP_VERSIONS, alias="gc.keep.versions", ge=1)
    # An erasure request (compaction forget) is due this long after it is recorded (one day).
    erasure_max_delay_ms: int = Field(86_400_000, alias="erasure.max.delay.ms", ge=0, le=LONG_MAX)
    # What still holds an erased key goes after this, not gc.grace.ms (None: gc.grace.ms); readers of versions from
    # before an erasure must finish within it.
    erasure_grace_ms: int | None = Field(None, alias="erasure.grace.ms", ge=0, le=LONG_MAX)
    metrics_textfile: str | None = Field(None, alias="metrics.textfile")
    metrics_pushgateway: str | None = Field(None, alias="metrics.pushgateway")

    @property
    def erasure_grace(self) -> int:
        """``erasure.grace.ms``, or gc's grace when it is not set."""
        return self.gc_grace_ms if self.erasure_grace_ms is None else self.erasure_grace_ms


class CleanerConfig(Protocol):
    """What the cleaner reads of a configuration: its own settings and each topic's effective settings."""

    @property
    def cleaner(self) -> CleanerSettings: ...

    def topic_config(self, topic: str) -> TopicConfig: ...
