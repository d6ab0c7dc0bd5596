"""The Arrow plan's trust in a compacted clean section: each key once there, so the dirty keys alone decide (the
plans compared with each other, on Spark too, are in tests/integration/test_dedupe.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from compaction import winners
from tests.helpers.builders import facts


def test_a_clean_section_with_unique_keys_is_decided_from_the_dirty_keys_alone() -> None:
    rng = np.random.default_rng(7)
    for strategy_versions in (False, True):
        for _ in range(20):
            clean = rng.permutation(200)[: rng.integers(1, 150)]  # a compacted section: each key once
            dirty = rng.integers(0, 300, rng.integers(0, 100))
            ids = np.concatenate([clean, dirty])
            rows = []
            for offset, key in enumerate(ids.tolist()):
                row: dict[str, Any] = {
                    "offset": offset,
                    "key": None if rng.random() < 0.05 else f"k{key}",
                    "aborted": bool(rng.random() < 0.05),
                }
                if strategy_versions:  # a timestamp-like version, often older in the dirty section
                    row.update(version_valid=int(rng.random() < 0.9), version=int(rng.integers(0, 50)))
                rows.append(row)
            table = facts(*rows)
            full = winners.decide(table, now_ms=0, keyless_drop=False)
            trusted = winners.decide(table, now_ms=0, keyless_drop=False, unique_before=len(clean))
            assert np.array_equal(full.code, trusted.code)
    # What it trusts: two clean records of one key that no dirty record names both stay.
    table = facts({"offset": 0, "key": "a"}, {"offset": 1, "key": "a"}, {"offset": 2, "key": "b"})
    assert winners.decide(table, now_ms=0, keyless_drop=False, unique_before=2).code.tolist() == [0, 0, 0]
    assert winners.decide(table, now_ms=0, keyless_drop=False).code.tolist() == [1, 0, 0]
