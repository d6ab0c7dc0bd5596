"""Pins: manifest versions that a reader outside the store holds (an Iceberg snapshot), which gc must keep.

A table published from the store (``compaction publish``) lists the store's segment objects as its data files.
The store cannot read a catalog, so the publisher tells it what it holds: before it commits a snapshot, it
writes a pin per partition, ``<topic>/<partition>/_pins/<20-digit version>-<holder>.json``, and it deletes the
pins of the snapshots it expires. gc keeps every pinned manifest version, and so every object those versions
reference, however old; ``verify`` reports a pin whose version or objects are missing.

The version is in the name, so gc learns what is pinned from one listing. A pin is written once and never
changed: two publishers at once each write their own, and neither can undo the other's.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from compaction.errors import CorruptManifestError, InvalidArgumentError
from compaction.store.names import TopicPartition
from compaction.store.storage import Storage

PIN_DIR = "_pins"
#: ``<20-digit version>-<holder>.json``; the holder names who holds the version (``iceberg-<table>-<snapshot>``).
PIN_NAME = re.compile(r"^([0-9]{20})-([0-9A-Za-z._-]{1,200})\.json\Z")
HOLDER = re.compile(r"^[0-9A-Za-z._-]{1,200}\Z")


@dataclass(frozen=True)
class Pin:
    """A manifest version held from outside the store: by whom, and since when (the object's modification time)."""

    version: int
    holder: str
    written_ms: int | None

    @property
    def name(self) -> str:
        return pin_name(self.version, self.holder)


def pin_name(version: int, holder: str) -> str:
    if not HOLDER.match(holder):
        raise InvalidArgumentError(f"pin holder {holder!r} is not 1 to 200 ASCII letters, digits, '.', '_' or '-'")
    return f"{version:020d}-{holder}.json"


def list_pins(storage: Storage, tp: TopicPartition) -> list[Pin]:
    """The partition's pins, by version then holder (names that are not pins are left alone)."""
    pins = [
        Pin(int(m.group(1)), m.group(2), e.mtime_ms)
        for e in storage.list_dir(f"{tp.prefix}/{PIN_DIR}")
        if not e.is_dir and (m := PIN_NAME.match(e.name))
    ]
    return sorted(pins, key=lambda p: (p.version, p.holder))


def write_pin(storage: Storage, tp: TopicPartition, version: int, holder: str, description: str) -> Pin:
    """Pin ``version`` for ``holder``; ``description`` says who holds it, for people and ``verify``."""
    name = pin_name(version, holder)
    data = json.dumps({"version": version, "holder": holder, "description": description}).encode()
    storage.write_bytes(f"{tp.prefix}/{PIN_DIR}/{name}", data)
    return Pin(version, holder, None)


def describe_pin(storage: Storage, tp: TopicPartition, pin: Pin) -> str:
    """What the pin says of its holder (``Iceberg table lake.default.orders snapshot 123``), or its name."""
    rel = f"{tp.prefix}/{PIN_DIR}/{pin.name}"
    try:
        description = json.loads(storage.read_bytes(rel)).get("description")
    except (ValueError, AttributeError) as err:
        raise CorruptManifestError(f"pin {storage.describe(rel)} is not the JSON a publisher writes: {err}") from err
    return description if isinstance(description, str) and description else pin.holder


def delete_pin(storage: Storage, tp: TopicPartition, pin: Pin) -> None:
    storage.delete(f"{tp.prefix}/{PIN_DIR}/{pin.name}")
