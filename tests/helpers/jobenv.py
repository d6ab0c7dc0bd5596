"""A job virtualenv as an Airflow worker has one: the project's wheel installed, and no checkout in sight.

Installing the wheel's dependencies from an index would take minutes (pyspark alone is hundreds of MB), so
the new virtualenv sees those of the project's .venv through a ``.pth`` file naming a folder of links to
them, with the project itself (its editable install) left out: the only ``compaction`` it can import is
the wheel's, and pip checks the wheel's requirements against what is there.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

from tests.helpers import ROOT

#: Entries of .venv's site-packages a job environment must not borrow: the project, and the packaging tools
#: the new environment has its own of.
NOT_BORROWED = (
    "compaction",
    "__editable__",
    "_distutils_hack",
    "distutils-precedence",
    "pip",
    "setuptools",
    "pkg_resources",
    "__pycache__",
)


def build_wheel(dest: Path) -> Path:
    """``make dist``'s command, into ``dest``; returns the wheel."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(dest),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = dest.glob("compaction-*.whl")
    return wheel


def borrow_dependencies(environment: Path) -> None:
    """Make the project's dependencies (from .venv) importable in the virtualenv at ``environment``."""
    folder = environment / "borrowed-site-packages"
    folder.mkdir(exist_ok=True)
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(NOT_BORROWED) and not entry.name.endswith(".pth"):
            (folder / entry.name).symlink_to(entry)
    [site] = (environment / "lib").glob("python3*/site-packages")
    (site / "borrowed-dependencies.pth").write_text(f"{folder}\n")


def job_environment(path: Path, wheel: Path) -> Path:
    """A virtualenv at ``path`` with ``wheel`` installed; returns its ``compaction`` command."""
    venv.EnvBuilder(with_pip=False).create(path)
    borrow_dependencies(path)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(path / "bin" / "python"),
            "install",
            "--quiet",
            "--no-index",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return path / "bin" / "compaction"
