"""The table view of a partition: each key's winning record under the topic's strategy.

What a Kafka consumer that builds a table from the topic ends up holding: per key, the record that wins
under :mod:`compaction.rules` (the strategy's version, ties to the higher offset, tombstones competing
like any record), with keys whose winner is a tombstone absent; keyless records, transaction markers and
records of aborted transactions never compete. The same rules decide what a clean pass keeps, so the view
of a partition is the same before and after a pass.

Two reads: the fact columns (offsets, keys and the strategy's version, never values) of the whole
partition, to find the winners; then the winners' records, skipping tombstones. Memory holds the fact
columns of one partition.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction import rules, winners
from compaction.read.files import PartitionFiles
from compaction.read.filters import RecordFilter
from compaction.read.stream import output_schema, partition_batches
from compaction.store import Store
from compaction.store.erasure import erased_rows, tombstone_offsets


def _has_transactions(part: PartitionFiles) -> bool:
    return any(f.segment.transactional_count or f.segment.control_count for f in part.files)


def winner_offsets(
    store: Store, part: PartitionFiles, strategy: rules.Strategy | str, header: str, record_filter: RecordFilter
) -> np.ndarray:
    """Ascending offsets of each key's winner among the records ``record_filter`` selects.

    A record's transaction is judged by its marker wherever that is, so with transactions in the partition
    the whole partition is read and the filter applied afterwards; without, the filter is pushed down.
    """
    strategy = rules.Strategy(strategy)
    transactions = _has_transactions(part)
    columns = list(
        dict.fromkeys(
            [
                "offset",
                "key",
                *(rules.TRANSACTION_COLUMNS if transactions else []),
                *rules.strategy_columns(strategy),
                *record_filter.columns,
            ]
        )
    )
    pushed = RecordFilter() if transactions else record_filter
    batches = list(partition_batches(store, part, columns=columns, record_filter=pushed))
    table = pa.Table.from_batches(batches, schema=output_schema(columns, with_partition=False))
    n = table.num_rows
    if not n:
        return np.zeros(0, dtype=np.int64)
    keyed = pc.is_valid(table.column("key")).to_numpy(zero_copy_only=False)
    if transactions:
        control = pc.fill_null(table.column("is_control"), False).to_numpy(zero_copy_only=False)
        aborted = rules.transaction_facts(table).aborted
    else:
        control = aborted = np.zeros(n, dtype=bool)
    # A key a pending erasure request names keeps its tombstone: its records below it compete no more (rules, rule
    # 0). Once a pass has carried a request out, the live log holds none of them.
    erased = erased_rows(
        table.column("offset").to_numpy(),
        table.column("key"),
        tombstone_offsets(r for r in part.manifest.erasures if r.state == "pending"),
    )
    competing = rules.competes(keyed, control, aborted, erased)
    if transactions and not record_filter.empty:
        selected = record_filter.mask(table)
        if selected is not None:
            competing &= selected.to_numpy(zero_copy_only=False)
    valid, version = rules.versions(table, strategy, header)
    facts = pa.table(
        {
            "offset": table.column("offset"),
            "key": table.column("key"),
            "competes": competing,
            "version_valid": valid,
            "version": version,
        }
    )
    won = winners.winners(facts)
    return cast(np.ndarray, table.column("offset").to_numpy()[won])
