"""What the environment says of lineage, read without importing openlineage: whether OpenLineage is configured (where
its client looks: ``OPENLINEAGE_URL``, ``OPENLINEAGE__TRANSPORT__*``, ``OPENLINEAGE_CONFIG``, an ``openlineage.yml``;
``OPENLINEAGE_DISABLED``), the job's namespace and name, and the parent run an orchestrator passes."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("compaction.lineage")

#: The job namespace when ``OPENLINEAGE_NAMESPACE`` is not set, and the jobs' names before ``.<command>`` when
#: ``COMPACTION_LINEAGE_JOB`` is not.
DEFAULT_NAMESPACE = "compaction"
DEFAULT_JOB = "compaction"


def openlineage_configured(environ: Mapping[str, str], cwd: Path | None = None, home: Path | None = None) -> bool:
    """Whether the OpenLineage client would find a transport's configuration, and is not disabled: the places its
    ``OpenLineageClient()`` reads (without them, it would print every event on the console, which is not asked for)."""
    if environ.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OPENLINEAGE_URL") or environ.get("OPENLINEAGE_CONFIG"):
        return True
    if any(name.startswith("OPENLINEAGE__TRANSPORT") for name in environ):
        return True
    files = [(cwd or Path.cwd()) / "openlineage.yml", (home or Path.home()) / ".openlineage" / "openlineage.yml"]
    return any(path.is_file() for path in files)


def job_namespace(environ: Mapping[str, str]) -> str:
    """The namespace of the jobs: ``OPENLINEAGE_NAMESPACE``, as OpenLineage's integrations read it."""
    return environ.get("OPENLINEAGE_NAMESPACE") or DEFAULT_NAMESPACE


def job_name(command: str, environ: Mapping[str, str]) -> str:
    """A command's job: ``<COMPACTION_LINEAGE_JOB>.<command>`` (``compaction.run``, ``compaction.gc``...)."""
    return f"{environ.get('COMPACTION_LINEAGE_JOB') or DEFAULT_JOB}.{command}"


@dataclass(frozen=True)
class RunRef:
    """A run of another job: its job's namespace and name, and the run's id (a UUID)."""

    namespace: str
    name: str
    run_id: str


@dataclass(frozen=True)
class Parent:
    """The run that started this one, and the root of that run's hierarchy (itself when it has no parent)."""

    run: RunRef
    root: RunRef


def parent_run(environ: Mapping[str, str]) -> Parent | None:
    """The parent run an orchestrator passes: ``OPENLINEAGE_CONTEXT`` (``{"parent": {"run": {"runId"}, "job":
    {"namespace", "name"}, "root": {...}}}``), else ``OPENLINEAGE_PARENT_ID`` and ``OPENLINEAGE_ROOT_PARENT_ID``
    (``namespace/name/runId``, as the Airflow OpenLineage provider's ``lineage_parent_id`` and
    ``lineage_root_parent_id`` macros give them). Anything malformed is named in a warning and left out."""
    if environ.get("OPENLINEAGE_CONTEXT"):
        return _from_context(environ["OPENLINEAGE_CONTEXT"])
    if not environ.get("OPENLINEAGE_PARENT_ID"):
        return None
    parent = _run_ref("OPENLINEAGE_PARENT_ID", environ["OPENLINEAGE_PARENT_ID"])
    if parent is None:
        return None
    root = (
        _run_ref("OPENLINEAGE_ROOT_PARENT_ID", environ["OPENLINEAGE_ROOT_PARENT_ID"])
        if environ.get("OPENLINEAGE_ROOT_PARENT_ID")
        else None
    )
    return Parent(parent, root or parent)


def _run_ref(variable: str, text: str) -> RunRef | None:
    rest, _, run_id = text.rpartition("/")
    namespace, _, name = rest.partition("/")
    if namespace and name and _is_uuid(run_id):
        return RunRef(namespace, name, run_id)
    log.warning(
        "%s %r is not NAMESPACE/JOB/RUN_ID (a UUID): the run's parent is left out of its lineage", variable, text
    )
    return None


def _from_context(text: str) -> Parent | None:
    try:
        parent = json.loads(text)["parent"]
        run = RunRef(parent["job"]["namespace"], parent["job"]["name"], parent["run"]["runId"])
        root_doc = parent.get("root") or {}
        root = (
            RunRef(root_doc["job"]["namespace"], root_doc["job"]["name"], root_doc["run"]["runId"]) if root_doc else run
        )
    except (ValueError, KeyError, TypeError) as err:
        log.warning(
            "OPENLINEAGE_CONTEXT is not a parent run's JSON (%s: %s): the run's parent is left out of its lineage",
            type(err).__name__,
            err,
        )
        return None
    if not (_is_uuid(run.run_id) and _is_uuid(root.run_id)):
        log.warning(
            "OPENLINEAGE_CONTEXT names a run id that is not a UUID: the run's parent is left out of its lineage"
        )
        return None
    return Parent(run, root)


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True
