"""This package on a Spark Connect server: sent as an artifact of the session, or found installed in its Python."""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from pyspark.errors import UnsupportedOperationException
from pyspark.sql import SparkSession

from compaction.errors import CompactionError

log = logging.getLogger(__name__)


def package_archive(folder: Path) -> Path:
    """This package's modules and data as a zip in ``folder`` (what the wheel of ``make dist`` holds), for a
    Spark Connect server's Python workers."""
    try:
        version = importlib.metadata.version("compaction")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        version = "dev"
    root = Path(__file__).resolve().parents[2]
    archive = folder / f"compaction-{version}.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                zipped.write(path, Path("compaction") / path.relative_to(root))
    return archive


def ship_package(session: SparkSession, url: str) -> bool:
    """Send this package to the session's Python workers as a Spark Connect artifact, so that they run the
    driver's own version of it (its payloads refuse any other); its dependencies must be installed there.
    False when the server takes no artifacts (Sail): its workers must then have the package installed."""
    with tempfile.TemporaryDirectory(prefix="compaction-artifact-") as folder:
        try:
            session.addArtifacts(str(package_archive(Path(folder))), pyfile=True)
        except UnsupportedOperationException:
            return False
        except Exception as err:  # a server that refuses this one: say what works instead
            raise CompactionError(
                f"could not send the compaction package to the Spark Connect server {url} ({err}); "
                "install it on the server's Python and run with --no-ship-package"
            ) from err
    return True


def check_installed_package(session: SparkSession, url: str, why: str, instead: str) -> None:
    """Fail in one line, before any work, unless the server's Python workers import this very version of the
    package (``why``: why it was not sent to them; ``instead``: the other way to run)."""
    installed, ours = installed_version(session), importlib.import_module("compaction").__version__
    if installed == ours:
        return
    found = f"has compaction {installed}" if installed else "has no compaction package"
    raise CompactionError(
        f"the Spark Connect server {url} {why}, and its Python {found}: install compaction "
        f"{ours} in the Python the server runs (the wheel of `make dist`), or {instead}"
    )


def installed_version(session: SparkSession) -> str | None:
    """The version of the compaction package the server's Python workers import, or None when they import none."""

    def probe(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # Defined here, so that it travels by value: the server needs nothing of this package to run it.
        import importlib

        import pyarrow

        try:
            version = importlib.import_module("compaction").__version__
        except ImportError:
            version = ""
        for _ in batches:
            pass
        yield pyarrow.record_batch([pyarrow.array([version])], names=["version"])

    rows = session.range(0, 1, 1, 1).mapInArrow(probe, "version string").collect()
    return (rows[0]["version"] or None) if rows else None
