"""A stand-in for the part of Spark's RDD API the Arrow plan uses, running tasks in this process.

It lets the job's own code (planning, the Arrow plan's tasks, both stages of a split partition, the
commits) run hundreds of times per test without starting a JVM. Tasks and their results are pickled on
the way, as Spark ships them, so whatever would not reach an executor fails here too.
"""

from __future__ import annotations

import pickle
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any


def _shipped(items: Iterable[Any]) -> list[Any]:
    return [pickle.loads(pickle.dumps(item)) for item in items]


class InlineRDD:
    def __init__(self, items: Iterable[Any], parts: list[list[Any]] | None = None) -> None:
        self.items = list(items)
        self.parts = parts  # after partitionBy: the items of each partition

    def map(self, fn: Callable[[Any], Any]) -> InlineRDD:
        return InlineRDD(_shipped(fn(item) for item in self.items))

    def flatMap(self, fn: Callable[[Any], Iterable[Any]]) -> InlineRDD:
        return InlineRDD(_shipped(out for item in self.items for out in fn(item)))

    def union(self, other: InlineRDD) -> InlineRDD:
        return InlineRDD(self.items + other.items)

    def groupByKey(self, numPartitions: int | None = None) -> InlineRDD:
        groups: dict[Any, list[Any]] = defaultdict(list)
        for key, value in self.items:
            groups[key].append(value)
        return InlineRDD(groups.items())

    def partitionBy(self, numPartitions: int, partitionFunc: Callable[[Any], int]) -> InlineRDD:
        parts: list[list[Any]] = [[] for _ in range(numPartitions)]
        for key, value in self.items:
            parts[partitionFunc(key) % numPartitions].append((key, value))
        return InlineRDD([pair for part in parts for pair in part], parts)

    def glom(self) -> InlineRDD:
        return InlineRDD(self.parts if self.parts is not None else [self.items])

    def persist(self, *_: Any) -> InlineRDD:
        return self

    def unpersist(self) -> InlineRDD:
        return self

    def collect(self) -> list[Any]:
        return list(self.items)


class Broadcast:
    def __init__(self, value: Any) -> None:
        self.value = pickle.loads(pickle.dumps(value))


class Accumulator:
    """Spark's accumulator, in this process."""

    def __init__(self, value: Any, param: Any) -> None:
        self.value, self.param = value, param

    def add(self, term: Any) -> None:
        self.value = self.param.addInPlace(self.value, term)


class InlineContext:
    def accumulator(self, value: Any, param: Any) -> Accumulator:
        return Accumulator(value, param)

    def parallelize(self, items: Iterable[Any], numSlices: int | None = None) -> InlineRDD:
        return InlineRDD(_shipped(items))

    def broadcast(self, value: Any) -> Broadcast:
        return Broadcast(value)


class InlineSession:
    """Passed to :class:`compaction.clean.cleaner.Cleaner` in place of a SparkSession (the Arrow plan only)."""

    sparkContext = InlineContext()
