"""Topic and partition names: Kafka's rules for them, and the folders of a store that break those rules."""

from __future__ import annotations

import re
from dataclasses import dataclass

from compaction.errors import InvalidArgumentError

#: Kafka's Topic.validate: 1 to 249 of these characters, and neither "." nor "..".
TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}\Z")
MAX_TOPIC_LENGTH = 249
#: A partition's folder is its number written the one canonical way: ASCII digits, no sign, no leading zero.
PARTITION_NAME = re.compile(r"^(0|[1-9][0-9]{0,9})\Z")
MAX_PARTITION = 2**31 - 1  # Kafka's partition numbers are Java ints


def topic_name_problem(name: str) -> str | None:
    """Why ``name`` is not a legal Kafka topic name (Kafka's Topic.validate), or None when it is one."""
    if not name:
        return "is empty"
    if name in (".", ".."):
        return 'cannot be "." or ".."'
    if len(name) > MAX_TOPIC_LENGTH:
        return f"is {len(name)} characters long, longer than the {MAX_TOPIC_LENGTH} Kafka allows"
    if not TOPIC_NAME.match(name):
        return "contains a character other than ASCII alphanumerics, '.', '_' and '-'"
    return None


def partition_name_problem(name: str) -> str | None:
    """Why ``name`` is not a partition number as the store writes it (``0``, ``1``, ... ``2147483647``),
    or None when it is one."""
    if PARTITION_NAME.match(name) and int(name) <= MAX_PARTITION:
        return None
    return (
        f"is not a partition number: a non-negative decimal integer up to {MAX_PARTITION} in ASCII digits, "
        "without sign, spaces or leading zeros"
    )


@dataclass(frozen=True, order=True)
class TopicPartition:
    """A partition of a topic; printed the Kafka way (``orders-3``)."""

    topic: str
    partition: int

    def __post_init__(self) -> None:
        # The names become paths under the store: an illegal one could reach outside it ("..") or alias
        # another partition.
        problem = topic_name_problem(self.topic) if isinstance(self.topic, str) else "is not a string"
        if problem:
            raise InvalidArgumentError(f"topic name {self.topic!r} {problem}")
        if (
            isinstance(self.partition, bool)
            or not isinstance(self.partition, int)
            or not 0 <= self.partition <= MAX_PARTITION
        ):
            raise InvalidArgumentError(
                f"partition {self.partition!r} of topic {self.topic} is not a partition number (0 to {MAX_PARTITION})"
            )

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def prefix(self) -> str:
        return f"{self.topic}/{self.partition}"


@dataclass(frozen=True)
class IllegalFolder:
    """A folder where a topic or a partition would be, whose name cannot be one: never read, never collected."""

    path: str  # relative to the store: "bad topic" or "orders/00"
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"
