"""Publishing's entry points without pyiceberg: the package loads none of it until a publish runs, and says which
extra to install when it is missing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from compaction.errors import ConfigError
from compaction.publish import Target, check_catalog, publish_topic
from compaction.store import Store

TARGET = Target(
    catalog="lake",
    properties={"type": "sql", "uri": "sqlite:///:memory:"},
    namespace="default",
    grace_ms=0,
    erasure_grace_ms=0,
)


def test_the_job_and_the_publish_package_import_no_pyiceberg() -> None:
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, compaction.job, compaction.publish; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyiceberg'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert loaded.strip() == "[]"


def test_publishing_without_pyiceberg_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, memory_store: Store
) -> None:
    # An import of it, or of any module of it, fails (those other tests imported are dropped too: Python takes a
    # module already imported without looking at its package).
    for module in ["pyiceberg", *(m for m in sys.modules if m.startswith("pyiceberg."))]:
        monkeypatch.setitem(sys.modules, module, None)
    for module in [m for m in sys.modules if m.startswith("compaction.publish.")]:
        if module != "compaction.publish.target":
            monkeypatch.delitem(sys.modules, module)
    with pytest.raises(ConfigError, match=r"needs pyiceberg .*: pip install 'compaction\[iceberg\]'"):
        check_catalog(TARGET)
    with pytest.raises(ConfigError, match=r"needs pyiceberg"):
        publish_topic(memory_store, "orders", TARGET, wall_ms=0)
