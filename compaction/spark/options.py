"""The source's options, in the names and meanings of Spark's Kafka source where it has one, read and checked once.

Spark hands a data source its options as a case-insensitive map of strings (``.option(...)``, and ``path`` from
``load(URL)`` / ``save(URL)``). A name this source does not know is refused with the names it knows, before any work:
a Kafka pipeline moved to ``format("compaction")`` must not keep an option that silently means nothing here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from compaction.errors import InvalidArgumentError
from compaction.rules import Strategy
from compaction.store import Store
from compaction.store.names import MAX_PARTITION, topic_name_problem

if TYPE_CHECKING:
    from compaction.config import Settings

#: The Kafka source's offsets in its JSON: -2 the earliest, -1 the latest.
EARLIEST, LATEST = -2, -1
#: Storage options (fsspec's, as ``--storage-option``) travel as options with this prefix:
#: ``.option("storage.client_kwargs.endpoint_url", "http://...")``.
STORAGE_PREFIX = "storage."

#: Each option's name as written in docs and messages (Spark lower-cases the keys it hands over).
_STORE = ("path", "conf")
_READ = (
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "includeHeaders",
    "includeStoreColumns",
    "version",
    "latest",
    "compaction.strategy",
    "compaction.strategy.header",
    "failOnDataLoss",
)
_WRITE = ("topic", "checkpointLocation")
NAMES = {name.lower(): name for name in (*_STORE, *_READ, *_WRITE)}

#: Per topic and partition (as the Kafka source's JSON has them): an offset, or a version.
PerPartition = dict[str, dict[int, int]]


def _known(options: Mapping[str, str], allowed: tuple[str, ...], verb: str) -> dict[str, str]:
    """The options as a plain dict of lower-cased names, each one this verb takes."""
    given = {str(k).lower(): str(v) for k, v in options.items()}
    wanted = {name.lower() for name in (*_STORE, *allowed)}
    unknown = sorted(k for k in given if k not in wanted and not k.startswith(STORAGE_PREFIX))
    if unknown:
        names = ", ".join(NAMES.get(k, k) for k in unknown)
        raise InvalidArgumentError(
            f"format compaction does not know the option(s) {names} for a {verb}: it takes "
            f"{', '.join((*_STORE, *allowed))} and storage.* (fsspec's storage options)"
        )
    return given


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = options.get(name.lower())
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise InvalidArgumentError(f"option {name} is {text!r}: expected true or false")
    return text.strip().lower() == "true"


def _storage_options(options: Mapping[str, str]) -> dict[str, Any]:
    """``storage.a.b=v`` as ``{"a": {"b": v}}``; a value that is JSON (a number, a boolean) is read as such."""
    nested: dict[str, Any] = {}
    for key, text in options.items():
        if not key.startswith(STORAGE_PREFIX):
            continue
        try:
            value: Any = json.loads(text)
        except json.JSONDecodeError:
            value = text
        *parents, leaf = key[len(STORAGE_PREFIX) :].split(".")
        target = nested
        for parent in parents:
            target = target.setdefault(parent, {})
        target[leaf] = value
    return nested


@dataclass(frozen=True)
class StoreOptions:
    """Where the store is and how it is configured: its URL (``path``), fsspec's options, the configuration file."""

    url: str
    storage_options: dict[str, Any] = field(default_factory=dict)
    conf: str | None = None

    @classmethod
    def of(cls, options: Mapping[str, str]) -> StoreOptions:
        url = options.get("path")
        if not url:
            raise InvalidArgumentError(
                "format compaction needs the store's URL: load(URL), save(URL), start(URL) or the option path"
            )
        return cls(url, _storage_options(options), options.get("conf"))

    def open(self) -> Store:
        return Store.open(self.url, self.storage_options)

    def settings(self) -> Settings:
        """The configuration (the ``conf`` file, the environment): topics' Kafka settings."""
        from compaction.config import Settings  # the configuration's models: only where a verb needs them

        return Settings.load(self.conf)


@dataclass(frozen=True)
class Subscription:
    """Which topics a read takes (the Kafka source's ``subscribe``, ``subscribePattern`` or ``assign``); every topic
    of the store when none is given."""

    topics: tuple[str, ...] | None = None
    pattern: str | None = None
    assigned: dict[str, tuple[int, ...]] | None = None

    def select(self, store: Store) -> dict[str, list[int] | None]:
        """Each topic read, with its assigned partitions (None: all of them); a topic named that the store does not
        have is refused."""
        if self.assigned is not None:
            chosen: dict[str, list[int] | None] = {t: sorted(p) for t, p in self.assigned.items()}
        elif self.topics is not None:
            chosen = dict.fromkeys(self.topics)
        else:
            everything = store.topics()
            if self.pattern is None:
                return dict.fromkeys(everything)
            return dict.fromkeys(t for t in everything if re.fullmatch(self.pattern, t))
        present = set(store.topics())
        missing = [t for t in chosen if t not in present]
        if missing:
            raise InvalidArgumentError(f"topic(s) {', '.join(missing)} do not exist in store {store.url}")
        return chosen


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = [name for name in ("subscribe", "subscribePattern", "assign") if name.lower() in options]
    if len(given) > 1:
        raise InvalidArgumentError(
            f"options {' and '.join(given)} are both set: give one of subscribe, "
            "subscribePattern or assign, as for Spark's Kafka source"
        )
    if "subscribe" in options:
        topics = tuple(t.strip() for t in options["subscribe"].split(",") if t.strip())
        if not topics:
            raise InvalidArgumentError(f"option subscribe {options['subscribe']!r} names no topic")
        for topic in topics:
            _check_topic(topic, "subscribe")
        return Subscription(topics=topics)
    if "subscribepattern" in options:
        try:
            re.compile(options["subscribepattern"])
        except re.error as err:
            raise InvalidArgumentError(
                f"option subscribePattern {options['subscribepattern']!r} is not a regular expression: {err}"
            ) from None
        return Subscription(pattern=options["subscribepattern"])
    if "assign" in options:
        parsed = _json("assign", options["assign"])
        if not isinstance(parsed, dict) or not all(isinstance(v, list) for v in parsed.values()):
            raise InvalidArgumentError(
                f'option assign {options["assign"]!r} must be JSON like {{"topicA":[0,1],"topicB":[2,4]}}'
            )
        assigned = {}
        for topic, partitions in parsed.items():
            _check_topic(topic, "assign")
            assigned[topic] = tuple(_partition(p, "assign", topic) for p in partitions)
        return Subscription(assigned=assigned)
    return Subscription()


def _check_topic(topic: str, option: str) -> None:
    problem = topic_name_problem(topic)
    if problem:
        raise InvalidArgumentError(f"option {option}: topic name {topic!r} {problem}")


def _partition(value: Any, option: str, topic: str) -> int:
    text = str(value)
    if not re.fullmatch(r"[0-9]+", text, re.ASCII) or int(text) > MAX_PARTITION:
        raise InvalidArgumentError(f"option {option}: partition {value!r} of topic {topic} is not a partition number")
    return int(text)


def _json(option: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InvalidArgumentError(f"option {option} {text!r} is not JSON: {err.msg}") from None


def per_partition(option: str, text: str, lowest: int) -> PerPartition:
    """The Kafka source's JSON per topic and partition, ``{"topicA":{"0":23,"1":-2}}``, each number at least
    ``lowest``."""
    parsed = _json(option, text)
    if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
        raise InvalidArgumentError(
            f'option {option} {text!r} must be earliest, latest or JSON like {{"topicA":{{"0":23,"1":-2}}}}'
        )
    result: PerPartition = {}
    for topic, partitions in parsed.items():
        _check_topic(topic, option)
        result[topic] = {}
        for partition, number in partitions.items():
            if isinstance(number, bool) or not isinstance(number, int) or number < lowest:
                raise InvalidArgumentError(
                    f"option {option}: {number!r} for {topic}-{partition} must be an integer of at least {lowest}"
                )
            result[topic][_partition(partition, option, topic)] = number
    return result


#: ``earliest``, ``latest`` or the offsets of some partitions (the others: the named end's default).
Offsets = str | PerPartition


def _offsets(options: Mapping[str, str], name: str, default: str, refused: str | None) -> Offsets:
    text = options.get(name.lower(), default).strip()
    if text.lower() in ("earliest", "latest"):
        if text.lower() == refused:
            raise InvalidArgumentError(f"option {name} cannot be {refused} here, as for Spark's Kafka source")
        return text.lower()
    return per_partition(name, text, EARLIEST if refused != "earliest" else LATEST)


@dataclass(frozen=True)
class ReadOptions:
    """What a read (batch or streaming) takes."""

    store: StoreOptions
    subscription: Subscription
    starting: Offsets
    ending: Offsets
    include_headers: bool
    include_store_columns: bool
    version: int | PerPartition | None
    latest: bool
    strategy: str | None
    strategy_header: str | None
    fail_on_data_loss: bool

    @classmethod
    def of(cls, options: Mapping[str, str], streaming: bool) -> ReadOptions:
        verb = "streaming read" if streaming else "read"
        allowed = tuple(n for n in _READ if not (streaming and n in ("endingOffsets", "version", "latest")))
        given = _known(options, allowed, verb)
        return cls(
            store=StoreOptions.of(given),
            subscription=_subscription(given),
            starting=_offsets(
                given, "startingOffsets", "latest" if streaming else "earliest", None if streaming else "latest"
            ),
            ending=_offsets(given, "endingOffsets", "latest", "earliest"),
            include_headers=_flag(given, "includeHeaders", False),
            include_store_columns=_flag(given, "includeStoreColumns", False),
            version=_version(given.get("version")),
            latest=_flag(given, "latest", False),
            strategy=given.get("compaction.strategy"),
            strategy_header=given.get("compaction.strategy.header"),
            fail_on_data_loss=_flag(given, "failOnDataLoss", True),
        )

    def strategy_of(self, settings: Settings, topic: str) -> tuple[Strategy, str]:
        """The topic's ``compaction.strategy`` and its header: the options', else the configuration's."""
        cleaning = settings.topic_config(topic).cleaning
        header = self.strategy_header if self.strategy_header is not None else cleaning.compaction_strategy_header
        chosen = cleaning.compaction_strategy if self.strategy is None else self.strategy
        try:
            strategy = Strategy(str(chosen).lower())
        except ValueError:
            raise InvalidArgumentError(
                f"option compaction.strategy {chosen!r} is not one of {', '.join(s.value for s in Strategy)}"
            ) from None
        if strategy is Strategy.HEADER and not header:
            raise InvalidArgumentError("the header strategy needs the header's name: option compaction.strategy.header")
        return strategy, header


def _version(text: str | None) -> int | PerPartition | None:
    if text is None:
        return None
    if re.fullmatch(r"\s*[0-9]+\s*", text, re.ASCII):
        if int(text) < 1:
            raise InvalidArgumentError("option version 0 is not a version: versions count from 1")
        return int(text)
    return per_partition("version", text, 1)


@dataclass(frozen=True)
class WriteOptions:
    """What a write (batch or streaming) takes."""

    store: StoreOptions
    topic: str | None
    checkpoint: str | None

    @classmethod
    def of(cls, options: Mapping[str, str], streaming: bool) -> WriteOptions:
        given = _known(options, _WRITE if streaming else ("topic",), "streaming write" if streaming else "write")
        topic = given.get("topic")
        if topic is not None:
            _check_topic(topic, "topic")
        return cls(StoreOptions.of(given), topic, given.get("checkpointlocation"))
