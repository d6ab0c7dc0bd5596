"""The one row codec between the driver and the executors: versioned payloads, and the Arrow rows that carry them.

A stage's tasks travel as rows of a small DataFrame (:data:`TASK_SCHEMA`: the task's number and its pickled payload,
a bin of units of work) and its results come back as rows the driver collects (:data:`RESULT_SCHEMA`: per unit, its
identity, its pickled value or what stopped it, and its time by phase). Each payload carries the
:data:`PAYLOAD_VERSION` of the library that built it, and unpickling it (on the receiving side) refuses another
version with :class:`~compaction.errors.PayloadVersionError`, so a driver and executors that run different builds of
this library fail with both versions named, not with a missing field deep inside a task or a wrong answer.
"""

from __future__ import annotations

import pickle
import zlib
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from compaction.errors import PayloadVersionError

#: The version of the payloads this library ships. Bump it whenever one of them changes a field or its meaning.
PAYLOAD_VERSION = 13

#: The phases of a unit's time (:mod:`compaction.engine.phases`), each a column of :data:`RESULT_SCHEMA`.
PHASES = ("read", "decide", "write")

#: A stage's input: one row per Spark task; its payload is a bin of units.
TASK_SCHEMA = pa.schema([("task", pa.int32()), ("payload", pa.binary())])
#: What stopped a unit, as the columns of the rows that carry it (null in the rows of a unit that did not fail):
#: ``error`` is ``Type: message``; ``internal`` marks an error that is not the data's or the store's (a bug), whose
#: executor traceback is in ``trace``.
FAILURE_FIELDS = (pa.field("error", pa.string()), pa.field("internal", pa.bool_()), pa.field("trace", pa.string()))
#: A stage's output: per unit of work (``ident``), its pickled value, or what stopped it (:data:`FAILURE_FIELDS`);
#: then the seconds the unit spent in each phase.
RESULT_SCHEMA = pa.schema(
    [
        ("ident", pa.string()),
        ("payload", pa.binary()),
        *FAILURE_FIELDS,
        *((f"{name}_s", pa.float64()) for name in PHASES),
    ]
)


def carrying_failures(schema: pa.Schema) -> pa.Schema:
    """``schema`` with the failure columns (:data:`FAILURE_FIELDS`) after its own: rows a stage hands on, which can
    carry what stopped their unit to its result."""
    return pa.schema([*schema, *FAILURE_FIELDS])


#: The first bytes of a payload: its framing (a pickle, compressed by zlib at its fastest level).
FRAMING = b"cz1"


def dumps(value: Any) -> bytes:
    """A payload (or a list or tuple of them) as the bytes a row carries: compressed, since a task's payload repeats
    the same names and paths (a thousand small partitions' tasks pickle to 1.1 MB and compress to 0.2 MB, which can
    then travel with a stage's function instead of in rows joined by broadcast, a Spark job of its own)."""
    return FRAMING + zlib.compress(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), 1)


def loads(data: bytes) -> Any:
    """The payload a row carries (a payload of another version is refused as it unpickles)."""
    if not data.startswith(FRAMING):
        raise PayloadVersionError(
            f"a payload framed as {bytes(data[: len(FRAMING)])!r} cannot be read by this library, "
            f"which reads {FRAMING!r} (payload version {PAYLOAD_VERSION}): the driver and the "
            "executors run different versions of compaction"
        )
    return pickle.loads(zlib.decompress(data[len(FRAMING) :]))


@dataclass(frozen=True)
class Payload:
    """A value shipped between the driver and executors, stamped with the payload version that built it."""

    payload_version: int = field(default=PAYLOAD_VERSION, kw_only=True)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickle, refusing a payload of another version before anything reads its fields."""
        found = state.get("payload_version")
        if found != PAYLOAD_VERSION:
            raise PayloadVersionError(
                f"{type(self).__name__} payload of version {found if found is not None else 'none'} cannot be read "
                f"by this library, which reads payload version {PAYLOAD_VERSION}: the driver and the executors run "
                "different versions of compaction"
            )
        self.__dict__.update(state)
