"""The payloads between the driver and executors: they survive Spark's pickling, and another version is refused."""

from __future__ import annotations

import pickle
import re
from dataclasses import replace
from typing import cast

import pytest

from compaction.clean.layout import SegmentCounts
from compaction.clean.payloads import (
    AppliedJob,
    ApplyJob,
    CleanedPartition,
    CleanTask,
    PassContext,
    SegmentVerdicts,
    SourceVerdicts,
    Verdicts,
)
from compaction.engine.codec import PAYLOAD_VERSION, Payload, dumps, loads
from compaction.errors import PayloadVersionError
from compaction.store import SegmentFormat, Store, TopicPartition
from compaction.store.segment import records
from tests.helpers.builders import clean_task

TP = TopicPartition("t", 0)


def shipped(payload: Payload) -> Payload:
    """The payload as the other side of a Spark task receives it."""
    return cast(Payload, loads(dumps(payload)))


def one_of_each(store: Store) -> list[Payload]:
    store.append(TP, records([{"key": "a"}, {"key": "b"}, {"key": "a"}]), now_ms=0)
    segment = store.manifest(TP).segments[0]
    counts = SegmentCounts(records=3, kept=2, stamped=0, dropped={"superseded": 1}, next_horizon_ms=None)
    applied = AppliedJob(
        tp=TP,
        job_id=0,
        sources=(0,),
        deletes_only=False,
        segment=segment,
        records_read=3,
        bytes_read=segment.size_bytes,
        records_written=2,
        bytes_written=10,
    )
    return [
        clean_task(TP, store, (segment,)),
        ApplyJob(
            context=PassContext(
                store=store, pass_id="pass", now_ms=0, horizon_ms=5, segment_format=SegmentFormat.PARQUET
            ),
            tp=TP,
            log_start_offset=0,
            batch_policy=None,
            job_id=0,
            sources=(segment,),
            deletes_only=False,
            verdicts=(SourceVerdicts(rows=3, kept=True, listed=(("segments/_x.verdicts.parquet", 0),)),),
        ),
        Verdicts(tp=TP, path="segments/_x.verdicts.parquet", segments=(SegmentVerdicts(0, counts, 3, 0),)),
        applied,
        CleanedPartition(tp=TP, segment_counts={0: counts}, jobs=(applied,)),
    ]


def test_every_payload_arrives_as_it_was_sent(memory_store: Store) -> None:
    for payload in one_of_each(memory_store):
        arrived = shipped(payload)
        assert type(arrived) is type(payload) and arrived.payload_version == PAYLOAD_VERSION
        if isinstance(payload, (CleanTask, ApplyJob)):
            assert (
                cast(CleanTask, arrived).tp == TP
                and cast(CleanTask, arrived).context.pass_id == payload.context.pass_id
            )
            if isinstance(payload, ApplyJob):
                assert cast(ApplyJob, arrived).verdicts == payload.verdicts
        else:
            assert arrived == payload


@pytest.mark.parametrize("kind", ["CleanTask", "ApplyJob", "Verdicts", "AppliedJob", "CleanedPartition"])
def test_a_payload_of_another_version_is_refused_naming_both_versions(memory_store: Store, kind: str) -> None:
    (payload,) = [p for p in one_of_each(memory_store) if type(p).__name__ == kind]
    from_other_build = replace(payload, payload_version=PAYLOAD_VERSION + 1)
    message = (
        f"{kind} payload of version {PAYLOAD_VERSION + 1} cannot be read by this library, which reads "
        f"payload version {PAYLOAD_VERSION}: the driver and the executors run different versions of compaction"
    )
    with pytest.raises(PayloadVersionError, match=f"^{re.escape(message)}$"):
        shipped(from_other_build)


def test_a_payload_from_a_build_before_versions_is_refused() -> None:
    received = Verdicts.__new__(Verdicts)
    with pytest.raises(PayloadVersionError, match=r"^Verdicts payload of version none cannot be read"):
        received.__setstate__({"tp": TP, "path": None})


def test_a_payload_framed_otherwise_is_refused_naming_the_framing(memory_store: Store) -> None:
    """A plain pickle (as builds before compressed payloads sent) is refused before anything unpickles it."""
    with pytest.raises(
        PayloadVersionError,
        match=r"^a payload framed as b'\\x80\\x05\\x95' cannot be read by this "
        r"library, which reads b'cz1' \(payload version \d+\)",
    ):
        loads(pickle.dumps(one_of_each(memory_store)[0], protocol=5))


def test_payloads_travel_compressed(memory_store: Store) -> None:
    task = one_of_each(memory_store)[0]
    tasks = [pickle.loads(pickle.dumps(task)) for _ in range(50)]  # alike, as a bin's tasks are, but not shared
    assert len(dumps(tasks)) < len(pickle.dumps(tasks, protocol=5)) / 3
