"""This package, sent to a Spark Connect server's Python workers as an artifact of the session."""

from __future__ import annotations

import importlib.metadata
import tempfile
import zipfile
from pathlib import Path

from pyspark.sql import SparkSession

from compaction.errors import CompactionError


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


def ship_package(session: SparkSession, url: str) -> None:
    """Send this package to the session's Python workers as a Spark Connect artifact, so that they run the
    driver's own version of it (its payloads refuse any other); its dependencies must be installed there."""
    with tempfile.TemporaryDirectory(prefix="compaction-artifact-") as folder:
        try:
            session.addArtifacts(str(package_archive(Path(folder))), pyfile=True)
        except Exception as err:  # a server that refuses artifacts: say what works instead
            raise CompactionError(f"could not send the compaction package to the Spark Connect server {url} ({err}); "
                                  "install it on the server's Python and run with --no-ship-package") from err
