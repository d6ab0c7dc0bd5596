"""``compaction erasure``: every erasure request of a store, how far it has got and what it waits for."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compaction.clean.planner import Selected, plan_partition
from compaction.clean.settings import TopicConfig
from compaction.errors import StoreError
from compaction.store import Store, TopicPartition, read_manifests
from compaction.store.manifest import ErasureRequest, Manifest
from compaction.store.pins import describe_pin


@dataclass(frozen=True)
class RequestStatus:
    """One request as the store has it at ``now_ms``: its state (pending, rewritten, gone), whether it is past its
    deadline, and why it is not done yet."""

    partition: TopicPartition
    version: int
    request: ErasureRequest
    overdue: bool
    waits: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        r = self.request
        return {
            "partition": str(self.partition),
            "version": self.version,
            "key_sha256": r.key_sha256,
            "state": r.state,
            "overdue": self.overdue,
            "tombstone_offset": r.tombstone_offset,
            "requested_ms": r.requested_ms,
            "deadline_ms": r.deadline_ms,
            "rewritten_ms": r.rewritten_ms,
            "rewritten_version": r.rewritten_version,
            "completed_ms": r.completed_ms,
            "held": [h.model_dump() for h in r.held],
            "waits": list(self.waits),
        }


def erasure_status(
    store: Store, topics: str | Sequence[str] | None, now_ms: int, config: Callable[[str], TopicConfig], grace_ms: int
) -> tuple[list[RequestStatus], dict[str, str]]:
    """Every request in the newest manifests of the partitions of ``topics`` (globs; default all), in partition
    order, late or not by ``grace_ms`` (the erasure grace period); and the partitions whose manifest could not be
    read, with the reason (a request there is unknown)."""
    statuses: list[RequestStatus] = []
    errors: dict[str, str] = {}
    for tp, manifest in sorted(read_manifests(store, store.topic_partitions(topics)).items()):
        if isinstance(manifest, StoreError):
            errors[str(tp)] = str(manifest)
            continue
        if not manifest.erasures:
            continue
        waits = _waits(store, tp, manifest, config(tp.topic), now_ms)
        statuses.extend(
            RequestStatus(tp, manifest.version, r, r.overdue(now_ms, grace_ms), waits(r)) for r in manifest.erasures
        )
    return statuses, errors


def _waits(
    store: Store, tp: TopicPartition, manifest: Manifest, config: TopicConfig, now_ms: int
) -> Callable[[ErasureRequest], tuple[str, ...]]:
    """What each request of the partition waits for: a run (and why the planner would not carry it out yet), or gc
    (the objects still holding the key, and the pins that keep versions from before the rewrite)."""
    plan = plan_partition(tp, manifest, config, now_ms)
    chosen = {r.ident for r in plan.figures.erasures} if isinstance(plan, Selected) else set()
    pins = store.objects.pins(tp)

    def waits(request: ErasureRequest) -> tuple[str, ...]:
        if request.state == "pending":
            if request.ident in chosen:
                return ("the next run carries it out",)
            return (f"the next run does not carry it out: {plan.reason}",)
        if request.state == "gone":
            return ()
        found = [f"gc: {h.path} still holds the key" for h in request.held if h.removed_ms is None]
        for pin in pins:
            if request.rewritten_version is not None and pin.version < request.rewritten_version:
                try:
                    holder = describe_pin(store.storage, tp, pin)
                except StoreError as err:
                    holder = f"pin {pin.name} ({err})"
                found.append(
                    f"version {pin.version}, from before the rewrite, is pinned by {holder}: gc keeps it "
                    "until the pin goes (publish expires a replaced snapshot after erasure.grace.ms)"
                )
        return tuple(found) or ("gc: to remove what older versions and orphans hold, and record it done",)

    return waits


def overdue_requests(store: Store, planned: Mapping[TopicPartition, Manifest], now_ms: int, grace_ms: int) -> int:
    """How many requests of the partitions of ``planned`` are late (see ``ErasureRequest.overdue``; the gauge
    ``compaction_erasure_overdue_requests``), read from their newest manifests; a partition whose newest cannot be
    read is counted at its ``planned`` manifest."""
    newest = read_manifests(store, planned)
    return sum(
        1
        for tp, manifest in newest.items()
        for r in (planned[tp] if isinstance(manifest, StoreError) else manifest).erasures
        if r.overdue(now_ms, grace_ms)
    )
