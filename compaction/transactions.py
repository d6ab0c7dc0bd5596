"""Transaction facts for a cleaning pass: which data records were aborted, which markers still guard records.

Kafka's rules (reference §3.9): records of an aborted transaction are removed by the first pass that
covers them; a commit or abort marker stays while any record of its transaction remains in the log before
it, and once none remains it gets a delete horizon and goes when the horizon passes. A transaction of a
producer runs from its first transactional record after the producer's previous marker to its next marker.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class TransactionFacts:
    """Per input row: ``aborted`` (a data record whose transaction ended in an abort marker) and
    ``marker_pending`` (a marker whose transaction still has records before it)."""

    aborted: np.ndarray
    marker_pending: np.ndarray


def transaction_facts(table: pa.Table) -> TransactionFacts:
    """Facts for rows in offset order with ``offset``, ``producer_id``, ``is_transactional``, ``is_control``
    and ``control_type``; a transaction whose marker is not in ``table`` is still open (not aborted)."""
    n = table.num_rows
    aborted = np.zeros(n, dtype=bool)
    pending = np.zeros(n, dtype=bool)
    is_control = pc.fill_null(table.column("is_control"), False)
    involved = pc.or_(is_control, pc.fill_null(table.column("is_transactional"), False))
    rows = np.flatnonzero(involved.to_numpy(zero_copy_only=False))
    if not len(rows):
        return TransactionFacts(aborted, pending)
    producers = table.column("producer_id").to_numpy(zero_copy_only=False)[rows]
    controls = is_control.to_numpy(zero_copy_only=False)[rows]
    types = table.column("control_type").take(pa.array(rows)).to_pylist()
    current: dict[int, int] = {}  # producer id -> index of its open transaction
    members: list[list[int]] = []  # transaction index -> rows of its data records
    for row, producer, control, kind in zip(rows.tolist(), producers.tolist(), controls.tolist(), types, strict=True):
        if control:
            txn = current.pop(producer, None)
            records = members[txn] if txn is not None else []
            pending[row] = bool(records)
            if kind == "abort" and records:
                aborted[records] = True
        else:
            txn = current.setdefault(producer, len(members))
            if txn == len(members):
                members.append([])
            members[txn].append(row)
    return TransactionFacts(aborted, pending)
