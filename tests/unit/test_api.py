"""The public API: every exported name resolves, and importing the package starts nothing heavy."""

from __future__ import annotations

import subprocess
import sys

import compaction


def test_every_public_name_resolves_to_what_its_module_defines() -> None:
    for name in compaction.__all__:
        value = getattr(compaction, name)
        assert getattr(value, "__name__", name) == name, name


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        compaction.Nothing  # noqa: B018
    except AttributeError as err:
        assert "Nothing" in str(err)
    else:
        raise AssertionError("compaction.Nothing resolved")


def test_importing_the_package_or_the_store_loads_no_spark() -> None:
    code = "import sys, compaction, compaction.store; print('pyspark' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_the_read_api_loads_no_engine_until_its_adapter_is_used() -> None:
    code = (
        "import sys, compaction; compaction.scan, compaction.snapshot, compaction.history; "
        "print([m for m in ('pyspark', 'duckdb', 'polars') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
