"""A store seen and changed from outside: every object it holds, byte for byte (to show that a refused change
changed nothing), and bytes changed behind its back."""

from __future__ import annotations

from compaction.store import Store


def snapshot(store: Store) -> dict[str, bytes]:
    fs = store.storage.fs
    return {path: fs.cat_file(path) for path in fs.find(store.storage.root)}


def tamper(store: Store, rel: str) -> None:
    """Change an object's bytes without changing its size or making it undecodable (the footer's writer name)."""
    data = store.storage.fs.cat_file(store.storage.path(rel))
    assert b"parquet-cpp-arrow" in data
    store.storage.fs.pipe_file(store.storage.path(rel), data.replace(b"parquet-cpp-arrow", b"parquet-cpp-arroW"))
