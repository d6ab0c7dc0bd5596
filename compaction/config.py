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

import difflib
import fnmatch
import logging
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import javaproperties
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from compaction.clean.settings import (
    BROKER_NAMES,
    TOPIC_KEYS,
    CleanerSettings,
    TopicConfig,
    check_topic,
    check_value,
    with_settings,
)
from compaction.errors import ConfigError
from compaction.store.storage import DEFAULT_RETRY_BUDGET_MS, RETRY_BUDGET_OPTION

ENV_PREFIX = "COMPACTION_SET_"

log = logging.getLogger("compaction.config")


class StoreSettings(BaseModel):
    """How to reach the store, in the ``[store]`` table: fsspec storage options (endpoint, region...;
    credentials belong in the environment) and how long a failing storage call may retry."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    options: dict[str, Any] = Field(default_factory=dict)
    retry_budget_ms: int = Field(DEFAULT_RETRY_BUDGET_MS, alias="retry.budget.ms", ge=1000)

    def storage_options(self) -> dict[str, Any]:
        """What :meth:`compaction.store.storage.Storage.from_url` takes: the options and the retry budget."""
        return {RETRY_BUDGET_OPTION: self.retry_budget_ms, **self.options}


class PublishSettings(BaseModel):
    """Publishing topics as Iceberg tables (``compaction publish``, and ``run`` with ``after.run``), in the
    ``[publish]`` table: the catalog's name, its properties as pyiceberg names them (``type``, ``uri``,
    ``warehouse``, ``s3.endpoint``...; they override ``.pyiceberg.yaml`` and ``PYICEBERG_CATALOG__*`` variables,
    and credentials belong there or in the environment), the tables' namespace (a topic's table is
    ``NAMESPACE.<topic>``), and whether each run publishes the topics it covers once their partitions commit."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    catalog: str = Field("default", min_length=1)
    namespace: str = Field("default", min_length=1)
    after_run: bool = Field(False, alias="after.run")
    properties: dict[str, str] = Field(default_factory=dict)


class Settings(BaseModel):
    """Everything a run is configured with; frozen, and validated before any work starts.

    Kafka's broker-level names (``log.cleaner.min.cleanable.ratio``...) may sit at the top of a file; they
    are gathered into ``broker``. Their defaults are :class:`TopicConfig`'s, written once.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    broker: dict[str, Any] = Field(default_factory=dict)
    topics: dict[str, dict[str, Any]] = Field(default_factory=dict)
    cleaner: CleanerSettings = Field(default_factory=CleanerSettings)  # type: ignore[arg-type]
    store: StoreSettings = Field(default_factory=StoreSettings)  # type: ignore[arg-type]
    publish: PublishSettings = Field(default_factory=PublishSettings)  # type: ignore[arg-type]

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
        values = {
            TOPIC_KEYS[BROKER_NAMES[name]][0]: check_value(BROKER_NAMES[name], value, name)
            for name, value in self.broker.items()
        }
        return with_settings(TopicConfig(), values)

    def topic_config(self, topic: str) -> TopicConfig:
        """The effective configuration of ``topic``: defaults, matching globs in order, then its exact name."""
        values: dict[str, Any] = {}
        matches = [p for p in self.topics if p != topic and fnmatch.fnmatchcase(topic, p)]
        if topic in self.topics:
            matches.append(topic)
        for pattern in matches:
            for key, value in self.topics[pattern].items():
                values[TOPIC_KEYS[key][0]] = check_value(key, value)
        return check_topic(with_settings(self.defaults, values), f" (topic {topic})")

    def validate_all(self) -> None:
        """Check the defaults and every override table on its own; raises ConfigError."""
        check_topic(self.defaults, " (broker defaults)")
        for pattern in self.topics:
            self.topic_config(pattern)

    @classmethod
    def load(
        cls,
        conf_file: str | Path | None = None,
        overrides: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
        flags: Sequence[str] = (),
    ) -> Settings:
        """Merge Kafka's defaults < the file (TOML, or Kafka's ``.properties``) < the environment < ``overrides``
        (a mapping shaped like the TOML file) < ``--set`` ``flags``; validate, and return the settings.

        Raises :class:`ConfigError` naming the setting, what was expected and where it was set.
        """
        entries: list[Entry] = []
        if conf_file is not None:
            entries += read_file(Path(conf_file))
        entries += from_environment(os.environ if environ is None else environ)
        entries += from_mapping(overrides or {}, "the overrides")
        entries += from_flags(flags)
        merged: dict[str, Any] = {}
        for entry in entries:
            _set(merged, entry.path, entry.value)
        try:
            settings = cls(**merged)
        except ValidationError as err:
            raise ConfigError(_describe(err, entries)) from err
        settings.validate_all()
        return settings


def _describe(err: ValidationError, entries: Sequence[Entry]) -> str:
    first = err.errors()[0]
    location = tuple(str(part) for part in first.get("loc", ()))
    name = location[-1] if location else "?"
    where = _source_of(entries, location)
    message = first.get("msg", str(err)).removeprefix("Value error, ")
    if first.get("type") == "extra_forbidden":
        section = f" in [{'.'.join(location[:-1])}]" if len(location) > 1 else ""
        return f"Unknown configuration '{name}'{section}{did_you_mean(name, _known(location[:-1]))}{where}"
    if not message.startswith(("Invalid value", "Unknown", "conflict", "compaction.strategy")):
        message = f"Invalid value {first.get('input')} for configuration {name}: {message}"
    return message + where


def _source_of(entries: Sequence[Entry], location: tuple[str, ...]) -> str:
    """`` (set in FILE line N)`` for the last entry that set the value at ``location``, if one did."""
    for entry in reversed(entries):
        if entry.path == location or (len(location) > len(entry.path) and location[: len(entry.path)] == entry.path):
            return f" (set in {entry.source})"
    return ""


# Sources ------------------------------------------------------------------------------------------------

#: Tables of the file that are not Kafka names: per-topic overrides and the job's own settings.
TOPICS, CLEANER, STORE, PUBLISH = "topics", "cleaner", "store", "publish"
#: Names of ``[publish]`` that are the job's own; the table's other names are the catalog's properties.
PUBLISH_NAMES = ("catalog", "namespace", "after.run")

#: Kafka's broker names given in another unit: name -> (the name in milliseconds, factor). Kafka lets the
#: milliseconds name win over minutes, and minutes over hours.
UNIT_NAMES = {
    "log.retention.hours": ("log.retention.ms", 3_600_000),
    "log.retention.minutes": ("log.retention.ms", 60_000),
    "log.roll.hours": ("log.roll.ms", 3_600_000),
}
_UNIT_RANK = {"hours": 0, "minutes": 1}


@dataclass(frozen=True)
class Entry:
    """One setting as a source gave it: where it goes (a broker name, or a table and a name) and where it
    came from, for error messages."""

    path: tuple[str, ...]
    value: Any
    source: str


def _known(table: tuple[str, ...]) -> list[str]:
    """The names a table takes: Kafka's broker names at the top, topic names in ``[topics."x"]``..."""
    if not table:
        return [*BROKER_NAMES, *UNIT_NAMES]
    if table[0] == TOPICS:
        return list(TOPIC_KEYS)
    if table[0] == PUBLISH:
        return [*PUBLISH_NAMES, "properties"]
    model = CleanerSettings if table[0] == CLEANER else StoreSettings
    return [field.alias or name for name, field in model.model_fields.items()]


def did_you_mean(name: str, known: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` when a known name is close to ``name``."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _check_names(entries: list[Entry], ignore_unknown: bool = False) -> list[Entry]:
    """Refuse (or, for a Kafka ``.properties`` file, list once and drop) names this job does not use, and
    turn Kafka's hours and minutes names into milliseconds."""
    kept, ignored = [], []
    for entry in entries:
        table, name = entry.path[:-1], entry.path[-1]
        if table == (PUBLISH, "properties"):  # the catalog's own names, which pyiceberg checks
            kept.append(entry)
            continue
        if name not in _known(table[:1]):
            if ignore_unknown:
                ignored.append(name + did_you_mean(name, _known(table[:1])))
                continue
            hint = did_you_mean(name, _known(table[:1]))
            if table[:1] == (TOPICS,):  # Kafka's wording for topic-level names
                raise ConfigError(
                    f"Unknown topic config name: {name}{hint} (in [topics.{table[1]!r}], set in {entry.source})"
                )
            where = f" in [{'.'.join(table)}]" if table else ""
            raise ConfigError(f"Unknown configuration '{name}'{where}{hint} (set in {entry.source})")
        kept.append(entry)
    if ignored:
        log.warning("ignoring %d setting(s) this job does not use: %s", len(ignored), ", ".join(ignored))
    # hours, then minutes, then the milliseconds name itself, so that the finer unit wins within a source
    kept.sort(key=lambda e: _UNIT_RANK.get(e.path[-1].rsplit(".", 1)[-1], 2) if e.path[-1] in UNIT_NAMES else 2)
    converted = []
    for entry in kept:
        if entry.path[-1] in UNIT_NAMES:
            target, factor = UNIT_NAMES[entry.path[-1]]
            value = (
                entry.value * factor
                if isinstance(entry.value, int) and not isinstance(entry.value, bool)
                else entry.value
            )
            entry = Entry((*entry.path[:-1], target), value, entry.source)
        converted.append(entry)
    for entry in converted:  # each value on its own, so that an error names where it was set
        table, name = entry.path[:-1], entry.path[-1]
        if not table or table[0] == TOPICS:
            try:
                check_value(BROKER_NAMES.get(name, name), entry.value, name)
            except ConfigError as err:
                raise ConfigError(f"{err} (set in {entry.source})") from None
    return converted


def read_file(path: Path) -> list[Entry]:
    """A TOML file, or a Kafka ``.properties`` file (``server.properties`` as it is)."""
    if not path.is_file():
        raise ConfigError(f"configuration file {path} does not exist")
    if path.suffix == ".properties":
        entries = [
            Entry((name,), _parse_scalar(value), f"{path} line {line}")
            for name, value, line in read_properties(path.read_bytes(), str(path))
        ]
        return _check_names(entries, ignore_unknown=True)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        line = path.read_bytes().count(b"\n", 0, err.start) + 1
        raise ConfigError(
            f"configuration file {path} is not UTF-8 text (TOML is): byte 0x{err.object[err.start]:02x} on line {line}"
        ) from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"configuration file {path} is not valid TOML: {err}") from err
    return from_mapping(doc, str(path), text.splitlines())


def _line_of(lines: Sequence[str], name: str) -> str:
    """`` line N`` of the first line that sets ``name`` (quoted or dotted), or of its last part."""
    for candidate in (name, name.rsplit(".", 1)[-1]):
        pattern = re.compile(rf"^\s*(\"{re.escape(candidate)}\"|{re.escape(candidate)})\s*=")
        for number, line in enumerate(lines, start=1):
            if pattern.match(line):
                return f" line {number}"
    return ""


def read_properties(data: bytes, source: str) -> list[tuple[str, str, int]]:
    """A ``.properties`` file's settings (name, value, line), in order, exactly as Kafka's ``Utils.loadProps``
    reads them with Java's ``Properties.load(InputStream)``: the bytes are ISO 8859-1 (other characters come as
    ``\\uXXXX`` escapes), ``name=value``, ``name: value`` or ``name value``, escapes, continuation lines, ``#``
    and ``!`` comments. ``line`` is where a setting starts."""
    settings: list[tuple[str, str, int]] = []
    line = 1
    elements = javaproperties.parse(data)
    while True:
        try:
            element = next(elements, None)
        except javaproperties.InvalidUEscapeError as err:  # Java: "Malformed \uxxxx encoding."
            raise ConfigError(
                f"configuration file {source} line {line}: malformed \\uXXXX escape "
                f"{err.escape} (a \\u takes 4 hexadecimal digits)"
            ) from None
        if element is None:
            return settings
        if isinstance(element, javaproperties.KeyValue):
            settings.append((element.key, element.value, line))
        line += len(_LINE_END.findall(element.source)) or 1  # the last line may have no line end


#: Java's line ends: \n, \r or \r\n.
_LINE_END = re.compile(r"\r\n|\r|\n")


def from_mapping(doc: Mapping[str, Any], source: str, lines: Sequence[str] = ()) -> list[Entry]:
    """A TOML document (or a mapping shaped like one) as entries; nested tables of unquoted dotted names
    (``log.cleaner.min.cleanable.ratio = 0.5``) become Kafka's dotted names. ``lines``: the file's text,
    to name the line of each setting."""
    entries = []
    for key, value in doc.items():
        if key == TOPICS and isinstance(value, Mapping):
            for pattern, table in value.items():
                if not isinstance(table, Mapping):
                    raise ConfigError(
                        f"[topics] must hold tables of settings per topic; {pattern!r} is {value!r} (set in {source})"
                    )
                entries += [Entry((TOPICS, pattern, name), v, source) for name, v in _dotted(table)]
        elif key == STORE and isinstance(value, Mapping):
            for name, v in value.items():
                entries += (
                    [Entry((STORE, "options"), dict(v), source)]
                    if name == "options"
                    else [Entry((STORE, n), x, source) for n, x in _dotted({name: v})]
                )
        elif key == CLEANER and isinstance(value, Mapping):
            entries += [Entry((CLEANER, name), v, source) for name, v in _dotted(value)]
        elif key == PUBLISH and isinstance(value, Mapping):
            entries += [_publish_entry(name, v, source) for name, v in _dotted(value)]
        else:
            entries += [Entry((name,), v, source) for name, v in _dotted({key: value})]
    if lines:
        entries = [Entry(e.path, e.value, f"{source}{_line_of(lines, e.path[-1])}") for e in entries]
    return _check_names(entries)


def _dotted(table: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    items = []
    for key, value in table.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        items += _dotted(value, name) if isinstance(value, Mapping) else [(name, value)]
    return items


def _publish_entry(name: str, value: Any, source: str) -> Entry:
    """A ``[publish]`` name: the job's own, or a catalog property (a string, as pyiceberg takes them)."""
    if name in PUBLISH_NAMES:
        return Entry((PUBLISH, name), value, source)
    hint = did_you_mean(name, PUBLISH_NAMES)
    if hint:  # pyiceberg would take it as a catalog property and ignore it
        raise ConfigError(f"Unknown configuration '{name}' in [publish]{hint} (set in {source})")
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return Entry((PUBLISH, "properties", name), text, source)


def from_environment(environ: Mapping[str, str]) -> list[Entry]:
    """``COMPACTION_SET_LOG_RETENTION_MS`` sets ``log.retention.ms``; ``COMPACTION_SET_CLEANER__GC_GRACE_MS``
    sets ``gc.grace.ms`` in ``[cleaner]``."""
    entries = []
    for variable, raw in environ.items():
        if not variable.startswith(ENV_PREFIX):
            continue
        section, _, leaf = variable[len(ENV_PREFIX) :].lower().rpartition("__")
        path = (section, leaf.replace("_", ".")) if section else (leaf.replace("_", "."),)
        entries.append(Entry(path, _parse_scalar(raw), f"environment variable {variable}"))
    return _check_names(entries)


def from_flags(items: Sequence[str]) -> list[Entry]:
    """``--set NAME=VALUE`` (a broker name, ``cleaner.NAME``, ``store.NAME`` or ``publish.NAME``) and
    ``--set TOPIC:NAME=VALUE``."""
    entries = []
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item!r} must look like NAME=VALUE or TOPIC:NAME=VALUE")
        topic, colon, name = key.partition(":")
        if colon:
            path: tuple[str, ...] = (TOPICS, topic, name)
        elif key.startswith(PUBLISH + "."):
            entries.append(_publish_entry(key.split(".", 1)[1], _parse_scalar(raw), f"--set {item}"))
            continue
        elif key.startswith((CLEANER + ".", STORE + ".")):
            path = tuple(key.split(".", 1))
        else:
            path = (key,)
        entries.append(Entry(path, _parse_scalar(raw), f"--set {item}"))
    return _check_names(entries)


def _parse_scalar(raw: str) -> Any:
    lowered = raw.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw.strip()


def _set(target: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value
