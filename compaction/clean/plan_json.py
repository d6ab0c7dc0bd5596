"""A plan as ``plan --json`` prints it (docs/commands.md), and as the SQL function ``compaction_plan`` shows it:
the published shape of the planner's values, kept at the edge."""

from __future__ import annotations

from typing import Any

from compaction.clean.planner import CompactionPlan, PartitionPlan, Selected, Skipped


def plan_json(plan: CompactionPlan) -> dict[str, Any]:
    return {
        "now_ms": plan.now_ms,
        "max_dirty_percent": plan.max_dirty_percent,
        "max_compaction_delay_secs": plan.max_compaction_delay_ms // 1000,
        "delayed_partitions": plan.delayed_partitions,
        "byte_budget": plan.byte_budget,
        "partitions": [partition_json(p) for p in plan.partitions],
    }


def partition_json(p: PartitionPlan) -> dict[str, Any]:
    """A partition's plan: every field for every shape, null or zero where the planner measured nothing."""
    manifest = p.manifest if isinstance(p, Selected | Skipped) else None
    retention = p.retention if isinstance(p, Selected | Skipped) else None
    figures = p.figures if isinstance(p, Selected | Skipped) else None
    offsets = figures.offsets if figures is not None else None
    return {
        "partition": str(p.partition),
        "decision": p.decision.value,
        "reason": str(p.reason),
        "version": manifest.version if manifest else None,
        "checkpoint": manifest.first_dirty_offset if manifest is not None and retention is not None else None,
        "first_dirty_offset": offsets.first_dirty_offset if offsets else None,
        "checkpoint_reset": str(offsets.checkpoint_reset) if offsets and offsets.checkpoint_reset else None,
        "first_uncleanable_offset": offsets.first_uncleanable_offset if offsets else None,
        "log_start_offset": retention.log_start_offset if retention else None,
        "clean_bytes": figures.clean_bytes if figures else 0,
        "cleanable_bytes": figures.cleanable_bytes if figures else 0,
        "cleanable_ratio": round(figures.cleanable_ratio if figures else 0.0, 6),
        "compaction_delay_ms": figures.compaction_delay_ms if figures else 0,
        "active_rolled": figures.active_segment_rolled if figures else False,
        "tombstone_purge": figures.tombstone_purge if figures else False,
        "overdue_ms": figures.overdue_ms if figures else None,
        "expired_segments": [s.path for s in retention.expired_segments] if retention else [],
        "erasures": [r.key_sha256 for r in figures.erasures] if figures else [],
        "clean_range": [retention.log_start_offset, offsets.first_uncleanable_offset]
        if isinstance(p, Selected) and retention and offsets
        else None,
        "segments": [s.path for s in figures.segments] if figures else [],
    }
