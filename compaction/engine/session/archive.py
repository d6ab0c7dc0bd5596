"""The driver JVM's class-data-sharing archive: built once per environment (``compaction warm-up``), mapped by runs.

A JVM that maps Spark's classes from an archive starts its session about 2.5 s sooner than one that loads them
from the jars. Dumping the archive takes a JVM's whole run and 15-20 s more at its exit, so no run of the job
dumps it: ``compaction warm-up`` does, when the environment is made (``make setup`` in a checkout, the install
step of a wheel's virtualenv, an image's build), by running a small clean pass of its own, and a run without an
archive starts the way Spark always does.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyspark

from compaction.errors import CompactionError

log = logging.getLogger(__name__)

#: Set in the warm-up's own process: its driver JVM dumps the classes it loads to this path at its exit.
DUMP_VARIABLE = "COMPACTION_CLASS_ARCHIVE_DUMP"
#: Seconds the warm-up may take: a JVM's start, a small pass, and the dump (some 25 s on 2 cores).
WARM_UP_TIMEOUT_S = 900


def class_archive() -> Path:
    """Where this environment's archive for Spark lives: named by the pyspark version and the java binary, so a
    different JVM or Spark never maps a stale one (a JVM that cannot map an archive loads its classes as usual)."""
    java = os.path.realpath(shutil.which("java") or "java")
    tag = hashlib.sha256(f"{java}:{os.path.getmtime(java) if os.path.exists(java) else 0}".encode()).hexdigest()[:12]
    return Path(sys.prefix) / "share" / "compaction" / f"spark-{pyspark.__version__}-{tag}.jsa"


def class_archive_option() -> str | None:
    """The driver JVM's option for the archive: map it when this environment has one; dump one in the warm-up's
    own process; else None (``compaction warm-up`` builds it)."""
    dump = os.environ.get(DUMP_VARIABLE)
    if dump:
        return f"-XX:ArchiveClassesAtExit={dump}"
    archive = class_archive()
    if archive.exists():
        log.debug("the driver's JVM maps the class archive %s", archive)
        return f"-XX:SharedArchiveFile={archive}"
    log.debug("no class archive at %s: `compaction warm-up` builds one (about 2.5 s off every run's start)", archive)
    return None


@dataclass(frozen=True)
class BuiltArchive:
    """What ``compaction warm-up`` did: the archive, whether it was built now, and how long that took."""

    archive: Path
    built: bool
    seconds: float
    size_bytes: int


def build_class_archive(clean_pass: Sequence[str], force: bool = False) -> BuiltArchive:
    """Build this environment's archive, unless it has one (``force``: build it again): ``clean_pass``, the command
    of a clean pass of a small store, runs in a process of its own (given a folder to work in), and its driver JVM
    dumps the classes it loaded at its exit. The dump gets a name of its own and becomes the archive by a rename,
    so that a run starting meanwhile never maps half an archive."""
    archive = class_archive()
    if archive.exists() and not force:
        return BuiltArchive(archive, built=False, seconds=0.0, size_bytes=archive.stat().st_size)
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
        probe = archive.parent / f".{uuid.uuid4().hex}.probe"
        probe.touch()
        probe.unlink()
    except OSError as err:
        raise CompactionError(
            f"cannot write the class archive in {archive.parent} ({err.strerror or err}): run "
            "`compaction warm-up` as the owner of this Python environment"
        ) from err
    dump = archive.parent / f".{archive.name}.{uuid.uuid4().hex}.dump"
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="compaction-warm-up-") as work:
        env = {**os.environ, DUMP_VARIABLE: str(dump)}
        env.pop("SPARK_REMOTE", None)
        try:
            done = subprocess.run(
                [*clean_pass, work],
                env=env,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=WARM_UP_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired as err:
            dump.unlink(missing_ok=True)
            raise CompactionError(f"the warm-up's clean pass did not finish in {WARM_UP_TIMEOUT_S} s") from err
    if done.returncode != 0 or not dump.exists():
        dump.unlink(missing_ok=True)
        lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        raise CompactionError(
            f"the warm-up's clean pass failed (exit code {done.returncode}): {lines[-1] if lines else 'no output'}"
        )
    dump.chmod(0o444)
    os.replace(dump, archive)
    return BuiltArchive(archive, built=True, seconds=time.perf_counter() - started, size_bytes=archive.stat().st_size)
