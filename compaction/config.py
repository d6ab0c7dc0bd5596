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
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from compaction.clean.settings import (
    BROKER_NAMES,
    TOPIC_KEYS,
    CleanerSettings,
    TopicConfig,
    check_topic,
    check_value,
)
from compaction.errors import ConfigError
from compaction.store.storage import DEFAULT_RETRY_BUDGET_MS, RETRY_BUDGET_OPTION

ENV_PREFIX = "COMPACTION_SET_"


class StoreSettings(BaseModel):
    """How to reach the store, in the ``[store]`` table: fsspec storage options (endpoint, region...;
    credentials belong in the environment) and how long a failing storage call may retry."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    options: dict[str, Any] = Field(default_factory=dict)
    retry_budget_ms: int = Field(DEFAULT_RETRY_BUDGET_MS, alias="retry.budget.ms", ge=1000)

    def storage_options(self) -> dict[str, Any]:
        """What :meth:`compaction.store.storage.Storage.from_url` takes: the options and the retry budget."""
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
    """Everything a run is configured with; frozen, and validated before any work starts.

    Kafka's broker-level names (``log.cleaner.min.cleanable.ratio``...) may sit at the top of a file; they
    are gathered into ``broker``. Their defaults are :class:`TopicConfig`'s, written once.
    """

    model_config = SettingsConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    broker: dict[str, Any] = Field(default_factory=dict)
    topics: dict[str, dict[str, Any]] = Field(default_factory=dict)
    cleaner: CleanerSettings = Field(default_factory=CleanerSettings)  # type: ignore[arg-type]
    store: StoreSettings = Field(default_factory=StoreSettings)  # type: ignore[arg-type]

    @model_validator(mode="before")
    @classmethod
    def _gather_broker_names(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            data = dict(data)
            broker = dict(data.get("broker") or {})
            broker.update({name: data.pop(name) for name in list(data) if name in BROKER_NAMES})
            data["broker"] = broker
        return data

    @field_validator("broker")
    @classmethod
    def _check_broker_keys(cls, broker: dict[str, Any]) -> dict[str, Any]:
        for name, value in broker.items():
            if name not in BROKER_NAMES:
                raise ValueError(f"Unknown configuration '{name}'")
            check_value(BROKER_NAMES[name], value, name)
        return broker

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
                check_value(key, value)
        return topics

    @property
    def defaults(self) -> TopicConfig:
        """The broker-level defaults as a topic configuration: Kafka's, with the broker names given."""
        values = {TOPIC_KEYS[BROKER_NAMES[name]][0]: check_value(BROKER_NAMES[name], value, name)
                  for name, value in self.broker.items()}
        return replace(TopicConfig(), **values)

    def topic_config(self, topic: str) -> TopicConfig:
        """The effective configuration of ``topic``: defaults, matching globs in order, then its exact name."""
        values = dict(self.defaults.__dict__)
        matches = [p for p in self.topics if p != topic and fnmatch.fnmatchcase(topic, p)]
        if topic in self.topics:
            matches.append(topic)
        for pattern in matches:
            for key, value in self.topics[pattern].items():
                values[TOPIC_KEYS[key][0]] = check_value(key, value)
        return check_topic(TopicConfig(**values), f" (topic {topic})")

    def validate_all(self) -> None:
        """Check the defaults and every override table on its own; raises ConfigError."""
        check_topic(self.defaults, " (broker defaults)")
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
    if message.startswith(("Invalid value", "Unknown topic config", "Unknown configuration", "conflict",
                           "compaction.strategy")):
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
