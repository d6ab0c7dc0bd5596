"""What data platforms see of each command: OpenLineage events of ``run``, ``forget``, ``gc`` and ``publish``, and a
run's topics as Dagster assets through Dagster Pipes. Each is off unless configured (and then imports nothing of its
library and opens no connection), and neither ever changes a command's outcome or exit code.

- :mod:`.environment`: whether OpenLineage is configured, the job's namespace and name, the parent run an
  orchestrator passes; read without importing openlineage;
- :mod:`.datasets`: a topic of a store as a dataset of OpenLineage's naming conventions;
- :mod:`.figures`: what a command read and wrote, in lineage's terms (the facets of ``facets.json`` beside it);
- :mod:`.events`: the events, built with openlineage-python's classes;
- :mod:`.delivery`: sending them on a thread of their own, bounded by a timeout, a failure one warning line;
- :mod:`.dagster`: a run's topics as Dagster materializations and asset checks;
- this module: :func:`observe`, one command's lineage from its start to its exit code, and the functions the
  commands call with what they did.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from compaction import logs
from compaction.lineage import dagster
from compaction.lineage.delivery import Delivery
from compaction.lineage.environment import job_name, job_namespace, openlineage_configured, parent_run
from compaction.lineage.figures import CommandLineage, of_forget, of_gc, of_publish, of_run

if TYPE_CHECKING:
    from compaction.clean.results import RunReport
    from compaction.erasure.requests import Forgotten
    from compaction.publish import Target
    from compaction.publish.snapshot import PublishResult
    from compaction.store import Store
    from compaction.store.gc import GcResult

log = logging.getLogger("compaction.lineage")
T = TypeVar("T")

#: The commands whose runs are told (a dry run changes nothing and is not).
COMMANDS = ("run", "forget", "gc", "publish")
#: The exit codes of a command that completed (3: some partitions failed, the others committed), and of one that
#: failed as a whole.
COMPLETED = (0, 3)
FAILED = 1


def _wall_ms() -> int:
    return int(time.time() * 1000)  # clock-ok: an event's time is when it happens


class Invocation:
    """One command's lineage: START when it begins, COMPLETE or FAIL by its exit code with what it read and wrote,
    one run id throughout; and, for a run Dagster launched, its Pipes session."""

    def __init__(self, command: str, nominal_ms: int | None, environ: Mapping[str, str], secrets: Iterable[str]):
        self.command = command
        self.run_id = str(uuid.uuid4())
        self.nominal_ms = nominal_ms
        self.namespace, self.name = job_namespace(environ), job_name(command, environ)
        api_key = environ.get("OPENLINEAGE_API_KEY")
        self.secrets = set(secrets) | ({api_key} if api_key else set())
        self.seen: CommandLineage | None = None
        self.error: str | None = None
        self.trace: str | None = None
        self.delivery: Delivery | None = None
        self.parent = None
        if openlineage_configured(environ):
            self.parent = parent_run(environ)
            self.delivery = Delivery(_connect, self.secrets)
            self._send("START")
        self.pipes = (
            _guarded("Dagster Pipes", dagster.open_pipes)
            if command == "run" and dagster.launched_by_dagster(environ)
            else None
        )

    def failed(self, message: str, trace: str | None = None) -> None:
        """The error that ended the command, and its traceback (told in the FAIL event, masked)."""
        self.error = logs.redact(message, self.secrets)
        self.trace = logs.redact(trace, self.secrets) if trace else None

    def record(self, seen: Callable[[], CommandLineage], report: RunReport | None = None) -> None:
        """What the command did: its datasets for the end event, and a run's topics for Dagster."""
        if self.delivery is not None:
            self.seen = _guarded("OpenLineage", seen)
        if self.pipes is not None and report is not None:
            pipes, run_report = self.pipes, report
            _guarded("Dagster Pipes", lambda: dagster.report_run(pipes, run_report))

    def end(self, code: int) -> None:
        """Send COMPLETE (exit codes 0 and 3) or FAIL, then wait, bounded, for the events to be delivered."""
        if self.pipes is not None:
            pipes = self.pipes
            _guarded("Dagster Pipes", pipes.close)
        if self.delivery is None:
            return
        if code in COMPLETED:
            self._send("COMPLETE")
        else:
            internal = [
                f"{f['partition']}: {f['error']}" for f in (self.seen.failures if self.seen else []) if f["internal"]
            ]
            self.error = self.error or "; ".join(internal) or f"{self.command} ended with exit code {code}"
            self.trace = self.trace or (self.seen.trace if self.seen else None)
            self._send("FAIL")
        self.delivery.close()

    def _send(self, state: str) -> None:
        assert self.delivery is not None
        event_ms, seen, error, trace = _wall_ms(), self.seen, self.error, self.trace

        def build() -> Any:
            from compaction.lineage.events import run_event

            return run_event(
                state,
                run_id=self.run_id,
                namespace=self.namespace,
                name=self.name,
                event_ms=event_ms,
                nominal_ms=self.nominal_ms,
                parent=self.parent,
                seen=seen,
                error=error if state == "FAIL" else None,
                trace=trace if state == "FAIL" else None,
            )

        self.delivery.send(build)


def _connect() -> Any:
    """The OpenLineage client, configured as its documentation says (the variables and files it reads); the console
    transport's events at INFO, so that they show. The client writes ``OPENLINEAGE_URL`` back into the environment as
    ``OPENLINEAGE__TRANSPORT__*`` variables; they are taken out once it is configured, so that they configure no
    later command of this process (nor a process it starts) that the user's settings do not."""
    from openlineage.client import OpenLineageClient

    logging.getLogger("openlineage.client.transport.console").setLevel(logging.INFO)
    before = set(os.environ)
    client = OpenLineageClient()
    for name in set(os.environ) - before:
        if name.startswith("OPENLINEAGE__"):
            del os.environ[name]
    return client


def _guarded(what: str, step: Callable[[], T]) -> T | None:
    """``step``, whose failure (a bug of this module, a library's) is a warning: lineage never changes a command."""
    try:
        return step()
    except Exception as err:
        log.warning("%s: %s: %s; the command's outcome is not affected", what, type(err).__name__, err)
        return None


def observe(
    args: argparse.Namespace, secrets: Iterable[str], command: Callable[[Callable[[str], None] | None], int]
) -> int:
    """Run ``command`` (given the function its errors are told to) as the command ``args`` asks for, with its lineage
    when it is told (not a dry run); the commands reach it as ``args.lineage``. Returns the exit code."""
    name = getattr(args, "command", None)
    invocation = (
        Invocation(name, getattr(args, "now", None), os.environ, secrets)
        if name in COMMANDS and not getattr(args, "dry_run", False)
        else None
    )
    args.lineage = invocation
    if invocation is None:
        return command(None)
    try:
        code = command(invocation.failed)
    except BaseException as err:  # a bug, or an interrupt: the run failed, and is told so before it goes on up
        invocation.failed(f"{type(err).__name__}: {err}", traceback.format_exc())
        invocation.end(FAILED)
        raise
    invocation.end(code)
    return code


def _of(args: argparse.Namespace) -> Invocation | None:
    return getattr(args, "lineage", None)


def ran(args: argparse.Namespace, store: Store, report: RunReport) -> None:
    if (invocation := _of(args)) is not None:
        invocation.record(lambda: of_run(store, report), report)


def forgot(args: argparse.Namespace, store: Store, topic: str, forgotten: Sequence[Forgotten]) -> None:
    if (invocation := _of(args)) is not None:
        invocation.record(lambda: of_forget(store, topic, forgotten))


def collected(args: argparse.Namespace, store: Store, results: Sequence[GcResult], skipped: Mapping[str, Any]) -> None:
    if (invocation := _of(args)) is not None:
        invocation.record(lambda: of_gc(store, results, skipped))


def published(args: argparse.Namespace, store: Store, topic: str, target: Target, result: PublishResult) -> None:
    if (invocation := _of(args)) is not None:
        invocation.record(lambda: of_publish(store, topic, target, result))
