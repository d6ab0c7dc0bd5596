"""A command's OpenLineage run events, built with openlineage-python's classes: the job, the run with its facets
(nominal time, processing engine, parent, error message, failures), and each topic as an input or output dataset
with its schema, output statistics and the command's own figures. Imported only when OpenLineage is configured."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from importlib.metadata import version
from typing import Any

from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import (
    DatasetFacet,
    JobFacet,
    OutputDatasetFacet,
    RunFacet,
    error_message_run,
    job_type_job,
    nominal_time_run,
    output_statistics_output_dataset,
    parent_run,
    processing_engine_run,
    schema_dataset,
)

from compaction import __version__
from compaction.lineage.environment import Parent
from compaction.lineage.figures import FACETS_SCHEMA, PRODUCER, CommandLineage, Written
from compaction.schema import RECORD_SCHEMA

STATES = {"START": RunState.START, "COMPLETE": RunState.COMPLETE, "FAIL": RunState.FAIL}


def run_event(
    state: str,
    *,
    run_id: str,
    namespace: str,
    name: str,
    event_ms: int,
    nominal_ms: int | None,
    parent: Parent | None = None,
    seen: CommandLineage | None = None,
    error: str | None = None,
    trace: str | None = None,
) -> RunEvent:
    """The event of ``state`` (START, COMPLETE or FAIL) of the command's run ``run_id``; ``seen`` (what the command
    read and wrote) and ``error`` (why it failed) as far as known."""
    facets: dict[str, RunFacet] = {
        "processing_engine": processing_engine_run.ProcessingEngineRunFacet(
            version=__version__,
            name="compaction",
            openlineageAdapterVersion=version("openlineage-python"),
            producer=PRODUCER,
        )
    }
    if nominal_ms is not None:
        facets["nominalTime"] = nominal_time_run.NominalTimeRunFacet(
            nominalStartTime=_iso(nominal_ms), producer=PRODUCER
        )
    if parent is not None:
        facets["parent"] = parent_run.ParentRunFacet(
            run=parent_run.Run(runId=parent.run.run_id),
            job=parent_run.Job(namespace=parent.run.namespace, name=parent.run.name),
            root=parent_run.Root(
                run=parent_run.RootRun(runId=parent.root.run_id),
                job=parent_run.RootJob(namespace=parent.root.namespace, name=parent.root.name),
            ),
            producer=PRODUCER,
        )
    if error is not None:
        facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
            message=error, programmingLanguage="python", stackTrace=trace, producer=PRODUCER
        )
    if seen is not None and seen.failures:
        facets["compaction_failures"] = _custom(RunFacet, "CompactionFailuresRunFacet", {"failures": seen.failures})
    job_facets: dict[str, JobFacet] = {
        "jobType": job_type_job.JobTypeJobFacet(
            processingType="BATCH", integration="COMPACTION", jobType="JOB", producer=PRODUCER
        )
    }
    return RunEvent(
        eventType=STATES[state],
        eventTime=_iso(event_ms),
        producer=PRODUCER,
        run=Run(runId=run_id, facets=facets),
        job=Job(namespace=namespace, name=name, facets=job_facets),
        inputs=[
            InputDataset(namespace=d.namespace, name=d.name, facets=_dataset_facets(d.topic))
            for d in (seen.inputs if seen else [])
        ],
        outputs=[_output(w) for w in (seen.outputs if seen else [])],
    )


def _output(written: Written) -> OutputDataset:
    facets: dict[str, OutputDatasetFacet] = {
        written.facet: _custom(OutputDatasetFacet, written.definition, written.figures)
    }
    if written.rows is not None:
        facets["outputStatistics"] = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
            rowCount=written.rows, size=written.size, producer=PRODUCER
        )
    return OutputDataset(
        namespace=written.dataset.namespace,
        name=written.dataset.name,
        facets=_dataset_facets(written.dataset.topic),
        outputFacets=facets,
    )


def _dataset_facets(topic: bool) -> dict[str, DatasetFacet]:
    """A topic's datasets carry the record schema every segment holds (SPEC §2)."""
    if not topic:
        return {}
    return {
        "schema": schema_dataset.SchemaDatasetFacet(
            fields=[schema_dataset.SchemaDatasetFacetFields(name=f.name, type=str(f.type)) for f in RECORD_SCHEMA],
            producer=PRODUCER,
        )
    }


def _custom(base: type[Any], definition: str, figures: Mapping[str, Any]) -> Any:
    """A facet of compaction's own, whose ``_schemaURL`` is its definition in ``compaction/lineage/facets.json``."""
    schema = f"{FACETS_SCHEMA}#/$defs/{definition}"
    kind = type(definition, (base,), {"_get_schema": staticmethod(lambda: schema)})
    return kind(producer=PRODUCER).with_additional_properties(**figures)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")
