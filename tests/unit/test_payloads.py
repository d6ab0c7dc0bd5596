"""The payloads between the driver and executors: they survive Spark's pickling, and another version is refused."""

from __future__ import annotations

import pickle
import re
from dataclasses import replace
from typing import cast

import numpy as np
import pytest

from compaction.clean.layout import SegmentOutcome
from compaction.clean.payloads import (
    PAYLOAD_VERSION,
    AppliedJob,
    ApplyJob,
    CleanedPartition,
    CleanTask,
    DecisionRow,
    Payload,
)
from compaction.errors import PayloadVersionError
from compaction.store import Store, TopicPartition
from compaction.store.segment import records
from tests.helpers.builders import clean_task

TP = TopicPartition("t", 0)


def shipped(payload: Payload) -> Payload:
    """The payload as the other side of a Spark task receives it."""
    return pickle.loads(pickle.dumps(payload))


def one_of_each(store: Store) -> list[Payload]:
    store.append(TP, records([{"key": "a"}, {"key": "b"}, {"key": "a"}]), now_ms=0)
    segment = store.manifest(TP).segments[0]
    outcome = SegmentOutcome(records=3, kept=2, stamped=0, dropped={"superseded": 1}, next_horizon_ms=None)
    applied = AppliedJob(tp=TP, job_id=0, sources=(0,), deletes_only=False, segment=segment, records_read=3,
                         bytes_read=segment.size_bytes, records_written=2, bytes_written=10)
    return [
        clean_task(TP, store, (segment,)),
        ApplyJob(tp=TP, store=store, job_id=0, sources=(segment,), horizon_ms=5, now_ms=0, log_start_offset=0,
                 deletes_only=False, pass_id="pass", segment_format="parquet", batch_policy=None),
        DecisionRow(tp=TP, segment_base=0, outcome=outcome, rows=3, dropped=np.packbits([True, False, False]),
                    stamps=np.array([], dtype=np.int64)),
        applied,
        CleanedPartition(tp=TP, outcomes={0: outcome}, jobs=(applied,)),
    ]


def test_every_payload_arrives_as_it_was_sent(memory_store: Store) -> None:
    for payload in one_of_each(memory_store):
        arrived = shipped(payload)
        assert type(arrived) is type(payload) and arrived.payload_version == PAYLOAD_VERSION
        if isinstance(payload, DecisionRow):
            assert isinstance(arrived, DecisionRow)
            assert (arrived.tp, arrived.segment_base, arrived.outcome, arrived.rows) == (TP, 0, payload.outcome, 3)
            assert arrived.dropped.tolist() == [0b1000_0000] and arrived.stamps.tolist() == []
        elif isinstance(payload, (CleanTask, ApplyJob)):
            assert cast(CleanTask, arrived).tp == TP and cast(CleanTask, arrived).pass_id == payload.pass_id
        else:
            assert arrived == payload


@pytest.mark.parametrize("kind", ["CleanTask", "ApplyJob", "DecisionRow", "AppliedJob", "CleanedPartition"])
def test_a_payload_of_another_version_is_refused_naming_both_versions(memory_store: Store, kind: str) -> None:
    (payload,) = [p for p in one_of_each(memory_store) if type(p).__name__ == kind]
    from_other_build = replace(payload, payload_version=PAYLOAD_VERSION + 1)
    message = (f"{kind} payload of version {PAYLOAD_VERSION + 1} cannot be read by this library, which reads "
               f"payload version {PAYLOAD_VERSION}: the driver and the executors run different versions of compaction")
    with pytest.raises(PayloadVersionError, match=f"^{re.escape(message)}$"):
        shipped(from_other_build)


def test_a_payload_from_a_build_before_versions_is_refused() -> None:
    received = DecisionRow.__new__(DecisionRow)
    with pytest.raises(PayloadVersionError, match=r"^DecisionRow payload of version none cannot be read"):
        received.__setstate__({"tp": TP, "segment_base": 0})


def test_a_decision_row_sent_for_its_counts_leaves_its_bitmap_and_stamps_behind() -> None:
    outcome = SegmentOutcome(records=9, kept=1, stamped=1, dropped={"superseded": 8})
    row = DecisionRow(tp=TP, segment_base=10, outcome=outcome, rows=9, dropped=np.packbits([True] * 8 + [False]),
                      stamps=np.array([18], dtype=np.int64))
    counts = row.counts()
    assert (counts.tp, counts.segment_base, counts.outcome, counts.rows) == (TP, 10, outcome, 9)
    assert counts.dropped.tolist() == [] and counts.stamps.tolist() == []

