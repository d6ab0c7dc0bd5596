"""The winner search (:mod:`compaction.winners`) held to the rule it implements, on random partitions: among the
competing records of a key, a valid version beats an invalid one, then the greater version wins, then the greater
offset (:data:`compaction.rules.SURVIVAL_ORDER`, KIP-280); the manifest's promise (``unique_before``) and records
beaten beyond the facts change nothing else."""

from __future__ import annotations

import itertools
from typing import Any

import hypothesis.strategies as st
import numpy as np
import pyarrow as pa
from hypothesis import given, settings

from compaction import rules, winners
from tests.helpers.builders import facts

NOW = 1_000_000

#: One record: its key (None: keyless, which never competes; "dd" is wider than the rest, so that partitions
#: holding it group binary keys and the others keys of one width, :func:`compaction.winners.one_width`), whether it
#: is aborted (nor does it), whether its version is valid and the version (an invalid one reads -1, as
#: :func:`compaction.rules.versions` gives it).
RECORD = st.fixed_dictionaries(
    {
        "key": st.one_of(st.none(), st.sampled_from(["a", "b", "c", "dd"])),
        "aborted": st.booleans(),
        "version_valid": st.booleans(),
        "version": st.integers(-3, 3),
    }
)


@st.composite
def partitions(draw: st.DrawFn) -> tuple[list[dict[str, Any]], int]:
    """Records in offset order (with gaps), split into segments, and how many of the first hold the manifest's
    promise: no two competing records share a key there."""
    records: list[dict[str, Any]] = draw(st.lists(RECORD, max_size=24))
    offset_strategy = draw(st.booleans())  # the version is the offset itself
    offset = draw(st.integers(0, 5))
    rows: list[dict[str, Any]] = []
    for record in records:
        row = {"offset": offset, "key": record["key"], "aborted": record["aborted"]}
        if not offset_strategy:
            valid = record["version_valid"]
            row |= {"version_valid": int(valid), "version": record["version"] if valid else -1}
        rows.append(row)
        offset += draw(st.integers(1, 3))
    unique = 0  # the longest prefix whose competing records have distinct keys
    seen: set[str] = set()
    for row in rows:
        if row["key"] is not None and not row["aborted"]:
            if row["key"] in seen:
                break
            seen.add(row["key"])
        unique += 1
    return rows, draw(st.integers(0, unique))


def table(rows: list[dict[str, Any]], cuts: int) -> pa.Table:
    """The facts of ``rows``, in ``cuts`` + 1 chunks (as read, one per segment)."""
    bounds = sorted({0, len(rows), *(min(len(rows), 3 * (i + 1)) for i in range(cuts))})
    return pa.concat_tables([facts(*rows[a:b]) for a, b in itertools.pairwise(bounds)] or [facts()])


def expected(rows: list[dict[str, Any]]) -> list[bool]:
    """Each key's greatest competing record, by the rule written out."""
    best: dict[str, tuple[tuple[int, int, int], int]] = {}
    for index, row in enumerate(rows):
        if row["key"] is None or row["aborted"]:
            continue
        rank = (row.get("version_valid", 1), row.get("version", row["offset"]), row["offset"])
        if row["key"] not in best or rank > best[row["key"]][0]:
            best[row["key"]] = (rank, index)
    won = {index for _, index in best.values()}
    return [index in won for index in range(len(rows))]


@settings(max_examples=300, deadline=None)
@given(partition=partitions(), cuts=st.integers(0, 4))
def test_each_key_keeps_its_greatest_competing_record(partition: tuple[list[dict[str, Any]], int], cuts: int) -> None:
    rows, _ = partition
    assert winners.winners(table(rows, cuts)).tolist() == expected(rows)


@settings(max_examples=300, deadline=None)
@given(partition=partitions(), cuts=st.integers(0, 4))
def test_the_manifests_promise_of_unique_clean_keys_changes_no_winner(
    partition: tuple[list[dict[str, Any]], int], cuts: int
) -> None:
    rows, unique = partition
    facts_table = table(rows, cuts)
    unique_before = rows[unique]["offset"] if unique < len(rows) else (rows[-1]["offset"] + 1 if rows else 0)
    assert winners.winners(facts_table, unique_before).tolist() == expected(rows)


def test_a_version_decides_before_the_offset_and_a_valid_one_before_both() -> None:
    rows = [
        {"offset": 0, "key": "a", "version": 7},
        {"offset": 1, "key": "a", "version": 5},  # a lower version later loses
        {"offset": 2, "key": "b", "version": 5},
        {"offset": 3, "key": "b", "version_valid": 0, "version": -1},  # an invalid one loses to any valid one
        {"offset": 4, "key": "c", "version": 2},
        {"offset": 5, "key": "c", "version": 2},  # equal versions: the later record
    ]
    assert winners.winners(facts(*rows)).tolist() == [True, False, True, False, False, True]


def test_records_beaten_beyond_the_facts_lose_and_nothing_else_changes() -> None:
    """``beaten``: rows whose key a greater record beyond the facts holds (a clean section against its dirty keys)."""
    rows = facts(
        {"offset": 0, "key": "a"},
        {"offset": 1, "key": "b"},
        {"offset": 2, "key": "b"},
        {"offset": 3, "key": "c"},
    )
    beaten = np.array([True, False, False, False])
    decided = winners.decide(rows, now_ms=NOW, keyless_drop=False, beaten=beaten)
    kept = [code == rules.KEPT for code in decided.code.tolist()]
    assert kept == [False, False, True, True]
    assert winners.decide(rows, now_ms=NOW, keyless_drop=False).code.tolist()[0] == rules.KEPT


@settings(max_examples=300, deadline=None)
@given(
    keys=st.lists(st.binary(max_size=3) | st.none(), max_size=12),
    large=st.booleans(),
    cut=st.integers(0, 2),
    parts=st.integers(1, 3),
)
def test_keys_of_one_width_are_seen_as_fixed_size_binary_and_others_are_not(
    keys: list[bytes | None], large: bool, cut: int, parts: int
) -> None:
    """The view holds the same keys, sliced and chunked arrays, empty chunks and large_binary included; a null, a
    key of another width or only empty keys leave keys as they are."""
    kind = pa.large_binary() if large else pa.binary()
    array = pa.array([b"pad"] * cut + keys, kind).slice(cut)
    step = max(1, len(keys) // parts)
    chunked = pa.chunked_array([array[i : i + step] for i in range(0, len(keys), step)] + [array[:0]], kind)
    widths = {None if k is None else len(k) for k in keys}
    for given_keys in (array, chunked):
        view = winners.one_width(given_keys)
        if len(widths) == 1 and widths != {None} and widths != {0}:
            assert view is not None and view.type == pa.binary(len(keys[0] or b""))
            assert view.to_pylist() == keys
        else:
            assert view is None


def test_a_null_spanning_a_keys_width_and_text_keys_are_not_seen_as_fixed_size_binary() -> None:
    """Arrow lets a null's slot hold bytes: a view without the nulls would make it a key. Text is not binary."""
    offsets = pa.py_buffer(np.array([0, 3, 6], np.int32))
    spanning = pa.Array.from_buffers(pa.binary(), 2, [pa.py_buffer(bytes([0b01])), offsets, pa.py_buffer(b"abcdef")])
    assert spanning.to_pylist() == [b"abc", None]
    assert winners.one_width(spanning) is None
    assert winners.one_width(pa.array(["abc", "def"])) is None
    assert winners.one_width(pa.array([b"abc", b"def"])).to_pylist() == [b"abc", b"def"]  # type: ignore[union-attr]
