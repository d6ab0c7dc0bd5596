"""Configuration: Kafka's names, one frozen model, validated before any work.

Sources, lowest to highest precedence: the defaults (Kafka's), a TOML file (``conf/*.toml``), the
environment (``COMPACTION_SET_LOG_CLEANER_MIN_CLEANABLE_RATIO=0.2`` sets ``log.cleaner.min.cleanable.ratio``;
``COMPACTION_SET_CLEANER__KEYLESS_RECORDS=drop`` sets ``keyless.records`` in ``[cleaner]``), and command-line
``--set NAME=VALUE`` / ``--set TOPIC:NAME=VALUE`` flags.

Broker-level defaults sit at the top of the file with Kafka's broker names; ``[topics."<name or glob>"]``
tables override them with Kafka's topic-level names. For a topic, matching glob patterns apply in file
order, then an exact-name table last.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from compaction.errors import ConfigError
from compaction.rules import LONG_MAX, Plan, Strategy
from compaction.storage import DEFAULT_RETRY_BUDGET_MS, RETRY_BUDGET_OPTION

POLICIES = ("compact", "delete")
ENV_PREFIX = "COMPACTION_SET_"


@dataclass(frozen=True)
class TopicConfig:
    """The effective configuration of one topic (broker defaults with its overrides applied)."""

    cleanup_policy: tuple[str, ...] = ("delete",)
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    delete_retention_ms: int = 86_400_000
    segment_bytes: int = 1_073_741_824
    segment_ms: int = 604_800_000
    compaction_strategy: Strategy = Strategy.OFFSET
    compaction_strategy_header: str = ""
    retention_ms: int = 604_800_000
    retention_bytes: int = -1

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy


# Kafka's topic-level name -> (TopicConfig field, broker-level synonym)
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
}
BROKER_KEYS = {broker: field for _, (field, broker) in TOPIC_KEYS.items()}

#: Kafka's validators: name -> (lowest allowed, highest allowed) for numbers.
_RANGES: dict[str, tuple[float, float | None]] = {
    "min.cleanable.dirty.ratio": (0, 1),
    "min.compaction.lag.ms": (0, None),
    "max.compaction.lag.ms": (1, None),
    "delete.retention.ms": (0, None),
    "segment.bytes": (14, None),
    "segment.ms": (1, None),
    "retention.ms": (-1, None),
    "retention.bytes": (-1, None),
}


def _invalid(value: Any, name: str, reason: str) -> ConfigError:
    return ConfigError(f"Invalid value {value} for configuration {name}: {reason}")


def _check_value(key: str, value: Any, name: str | None = None) -> Any:
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
    if key == "compaction.strategy.header":
        if not isinstance(value, str):
            raise _invalid(value, name, "Expected value to be a string")
        return value.strip()
    low, high = _RANGES[key]
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


def _check_topic(config: TopicConfig, where: str) -> TopicConfig:
    """Kafka's cross-field rules (LogConfig.validateValues and KIP-280's topic validation)."""
    if config.min_compaction_lag_ms > config.max_compaction_lag_ms:
        raise ConfigError(f"conflict topic config setting min.compaction.lag.ms ({config.min_compaction_lag_ms}) > "
                          f"max.compaction.lag.ms ({config.max_compaction_lag_ms}){where}")
    if config.compaction_strategy == "header" and not config.compaction_strategy_header:
        raise ConfigError(f"compaction.strategy.header must be specified.{where}")
    return config


class CleanerSettings(BaseModel):
    """The job's own settings (no Kafka equivalent), in the ``[cleaner]`` table."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    keyless_records: Literal["keep", "drop"] = Field("keep", alias="keyless.records")
    dedupe_plan: Plan = Field(Plan.ARROW, alias="dedupe.plan")
    task_max_records: int = Field(5_000_000, alias="task.max.records", ge=1)
    deletion_vector_max_ratio: float = Field(0.2, alias="deletion.vector.max.ratio", ge=0, lt=1)
    deletion_vector_max_age_ms: int = Field(604_800_000, alias="deletion.vector.max.age.ms", ge=0)
    max_bytes_per_run: int | None = Field(None, alias="max.bytes.per.run", ge=1)
    gc_grace_ms: int = Field(86_400_000, alias="gc.grace.ms", ge=0)
    gc_keep_versions: int = Field(10, alias="gc.keep.versions", ge=1)
    metrics_textfile: str | None = Field(None, alias="metrics.textfile")
    metrics_pushgateway: str | None = Field(None, alias="metrics.pushgateway")


class StoreSettings(BaseModel):
    """How to reach the store, in the ``[store]`` table: fsspec storage options (endpoint, region...;
    credentials belong in the environment) and how long a failing storage call may retry."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    options: dict[str, Any] = Field(default_factory=dict)
    retry_budget_ms: int = Field(DEFAULT_RETRY_BUDGET_MS, alias="retry.budget.ms", ge=1000)

    def storage_options(self) -> dict[str, Any]:
        """What :meth:`compaction.storage.Storage.from_url` takes: the options and the retry budget."""
        return {RETRY_BUDGET_OPTION: self.retry_budget_ms, **self.options}


class _KafkaEnvironment(PydanticBaseSettingsSource):
    """``COMPACTION_SET_LOG_RETENTION_MS`` sets ``log.retention.ms``; ``COMPACTION_SET_CLEANER__GC_GRACE_MS``
    sets ``gc.grace.ms`` in ``[cleaner]``."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        self.environ = environ

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:  # pragma: no cover
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name, raw in self.environ.items():
            if not name.startswith(ENV_PREFIX):
                continue
            key = name[len(ENV_PREFIX):].lower()
            section, _, leaf = key.rpartition("__")
            dotted = leaf.replace("_", ".")
            value: Any = _parse_scalar(raw)
            if section:
                values.setdefault(section, {})[dotted] = value
            else:
                values[dotted] = value
        return values


def _parse_scalar(raw: str) -> Any:
    lowered = raw.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


class Settings(BaseSettings):
    """Everything a run is configured with; frozen, and validated before any work starts."""

    model_config = SettingsConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    cleanup_policy: Any = Field("delete", alias="log.cleanup.policy")
    min_cleanable_dirty_ratio: Any = Field(0.5, alias="log.cleaner.min.cleanable.ratio")
    min_compaction_lag_ms: Any = Field(0, alias="log.cleaner.min.compaction.lag.ms")
    max_compaction_lag_ms: Any = Field(LONG_MAX, alias="log.cleaner.max.compaction.lag.ms")
    delete_retention_ms: Any = Field(86_400_000, alias="log.cleaner.delete.retention.ms")
    segment_bytes: Any = Field(1_073_741_824, alias="log.segment.bytes")
    segment_ms: Any = Field(604_800_000, alias="log.roll.ms")
    compaction_strategy: Any = Field("offset", alias="log.cleaner.compaction.strategy")
    compaction_strategy_header: Any = Field("", alias="log.cleaner.compaction.strategy.header")
    retention_ms: Any = Field(604_800_000, alias="log.retention.ms")
    retention_bytes: Any = Field(-1, alias="log.retention.bytes")
    topics: dict[str, dict[str, Any]] = Field(default_factory=dict)
    cleaner: CleanerSettings = Field(default_factory=CleanerSettings)  # type: ignore[arg-type]
    store: StoreSettings = Field(default_factory=StoreSettings)  # type: ignore[arg-type]

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)  # load() merges the explicit sources itself, in a documented order

    @field_validator("topics")
    @classmethod
    def _check_topic_keys(cls, topics: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for pattern, overrides in topics.items():
            for key, value in overrides.items():
                if key not in TOPIC_KEYS:
                    raise ValueError(f"Unknown topic config name: {key} (in [topics.{pattern!r}])")
                _check_value(key, value)
        return topics

    @property
    def defaults(self) -> TopicConfig:
        """The broker-level defaults as a topic configuration."""
        values = {}
        for topic_key, (field, broker_key) in TOPIC_KEYS.items():
            values[field] = _check_value(topic_key, getattr(self, field), broker_key)
        return TopicConfig(**values)

    def topic_config(self, topic: str) -> TopicConfig:
        """The effective configuration of ``topic``: defaults, matching globs in order, then its exact name."""
        values = dict(self.defaults.__dict__)
        matches = [p for p in self.topics if p != topic and fnmatch.fnmatchcase(topic, p)]
        if topic in self.topics:
            matches.append(topic)
        for pattern in matches:
            for key, value in self.topics[pattern].items():
                values[TOPIC_KEYS[key][0]] = _check_value(key, value)
        return _check_topic(TopicConfig(**values), f" (topic {topic})")

    def validate_all(self) -> None:
        """Check the defaults and every override table on its own; raises ConfigError."""
        _check_topic(self.defaults, " (broker defaults)")
        for pattern in self.topics:
            self.topic_config(pattern)

    @classmethod
    def load(cls, conf_file: str | Path | None = None, overrides: Mapping[str, Any] | None = None,
             environ: Mapping[str, str] | None = None) -> Settings:
        """Merge defaults < TOML file < environment < overrides, validate, and return the settings."""
        layers: list[dict[str, Any]] = []
        if conf_file is not None:
            path = Path(conf_file)
            if not path.is_file():
                raise ConfigError(f"configuration file {path} does not exist")
            try:
                layers.append(TomlConfigSettingsSource(cls, toml_file=path)())
            except ValueError as err:  # tomllib.TOMLDecodeError is a ValueError
                raise ConfigError(f"configuration file {path} is not valid TOML: {err}") from err
        layers.append(_KafkaEnvironment(cls, os.environ if environ is None else environ)())
        layers.append(dict(overrides or {}))
        merged: dict[str, Any] = {}
        for layer in layers:
            _deep_merge(merged, layer)
        try:
            settings = cls(**merged)
        except ValidationError as err:
            raise ConfigError(_describe(err, merged)) from err
        settings.validate_all()
        return settings


def _deep_merge(target: dict[str, Any], source: Mapping[str, Any]) -> None:
    for key, value in source.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _deep_merge(target[key], value)
        else:
            target[key] = dict(value) if isinstance(value, Mapping) else value


def _describe(err: ValidationError, merged: Mapping[str, Any]) -> str:
    first = err.errors()[0]
    location = [str(part) for part in first.get("loc", ())]
    name = location[-1] if location else "?"
    if first.get("type") == "extra_forbidden":
        section = f" in [{'.'.join(location[:-1])}]" if len(location) > 1 else ""
        return f"Unknown configuration '{name}'{section}"
    message = first.get("msg", str(err)).removeprefix("Value error, ")
    if message.startswith(("Invalid value", "Unknown topic config", "conflict", "compaction.strategy")):
        return message
    return f"Invalid value {first.get('input')} for configuration {name}: {message}"


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``NAME=VALUE`` (broker level or ``cleaner.NAME``) and ``TOPIC:NAME=VALUE`` flags to a settings mapping."""
    result: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r} must look like NAME=VALUE or TOPIC:NAME=VALUE")
        value = _parse_scalar(raw)
        topic, colon, name = key.partition(":")
        if colon:
            result.setdefault("topics", {}).setdefault(topic, {})[name] = value
        elif key.startswith(("cleaner.", "store.")):
            section, _, leaf = key.partition(".")
            result.setdefault(section, {})[leaf] = value
        else:
            result[key] = value
    return result
