"""A run's topics as Dagster assets, through Dagster Pipes (``dagster-pipes``, its context from the environment Dagster
launched the job in): a materialization per topic whose asset the step targets, with the run report's figures of it
as metadata, and the asset check ``partitions_cleanable``, failed when a partition of the topic failed or stayed
uncleanable."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dagster_pipes import PipesContext

    from compaction.clean.results import RunReport

log = logging.getLogger("compaction.lineage")

#: The variable through which Dagster Pipes passes its context (``dagster_pipes.DAGSTER_PIPES_CONTEXT_ENV_VAR``).
PIPES_CONTEXT_VARIABLE = "DAGSTER_PIPES_CONTEXT"
#: The asset check reported for each topic: no partition of it failed or stayed uncleanable.
CHECK = "partitions_cleanable"


def launched_by_dagster(environ: Mapping[str, str]) -> bool:
    return PIPES_CONTEXT_VARIABLE in environ


def open_pipes() -> PipesContext:
    """The Pipes session Dagster opened for this process (its "opened" message sent now)."""
    from dagster_pipes import open_dagster_pipes

    return open_dagster_pipes()


def asset_keys(context: PipesContext, topics: list[str]) -> dict[str, str]:
    """Each topic's asset among those the step targets: the asset key whose last component is the topic's name
    (``orders``, ``kafka/orders``...). A topic no asset names is not reported (Dagster would refuse it)."""
    from dagster_pipes import to_asset_key_path

    if not context.is_asset_step:
        return {}
    by_name = {to_asset_key_path(key)[-1]: key for key in context.asset_keys}
    return {topic: by_name[topic] for topic in topics if topic in by_name}


def report_run(context: PipesContext, report: RunReport) -> None:
    """A materialization and a check result per topic of the run that the step targets."""
    topics = report.topics()
    failures: dict[str, list[str]] = {}
    for failure in report.to_dict()["failures"]:
        failures.setdefault(failure["partition"].rpartition("-")[0], []).append(
            f"{failure['partition']}: {failure['error']}"
        )
    keys = asset_keys(context, list(topics))
    for topic, key in keys.items():
        figures = topics[topic]
        metadata: dict[str, Any] = {name: value for name, value in figures.items() if name != "versions"}
        metadata["versions"] = {"raw_value": figures["versions"], "type": "json"}
        metadata["store"] = report.run.store
        metadata["run_id"] = report.run.run_id
        context.report_asset_materialization(asset_key=key, metadata=metadata)
        problems = failures.get(topic, [])
        context.report_asset_check(
            check_name=CHECK,
            asset_key=key,
            passed=not figures["partitions_failed"] and not problems,
            severity="ERROR",
            metadata={
                "partitions_failed": figures["partitions_failed"],
                "failures": {"raw_value": problems, "type": "json"},
            },
        )
    for topic in sorted(set(topics) - set(keys)):
        log.debug("Dagster Pipes: topic %s has no asset in this step; not reported", topic)
