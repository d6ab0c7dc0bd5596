"""Run inside the Dagster virtualenv: load the example definitions (dagster-defs/compaction_assets.py, configured by
the environment), materialize() their assets as Dagster's UI would, and print what Dagster recorded.

    python dagster_runner.py DEFINITIONS_FILE

prints one line ``RESULT <json>``: whether the run succeeded, each materialization (its asset key, its metadata's
values) and each asset check's evaluation (asset key, check, passed, metadata), in the order Dagster recorded them.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from typing import Any

import dagster as dg


def values(metadata: dict[str, Any]) -> dict[str, Any]:
    return {name: getattr(value, "value", value) for name, value in metadata.items()}


def main() -> None:
    spec = importlib.util.spec_from_file_location("compaction_assets", sys.argv[1])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    defs: dg.Definitions = module.defs
    result = dg.materialize(
        list(defs.assets or []), resources={"pipes": dg.PipesSubprocessClient()}, raise_on_error=False
    )
    materializations = [
        {"asset": e.asset_key.to_user_string(), "metadata": values(e.materialization.metadata)}
        for e in result.get_asset_materialization_events()
    ]
    checks = []
    for event in result.all_events:
        if event.event_type_value == "ASSET_CHECK_EVALUATION":
            evaluation = event.event_specific_data
            checks.append(
                {
                    "asset": evaluation.asset_key.to_user_string(),
                    "check": evaluation.check_name,
                    "passed": evaluation.passed,
                    "metadata": values(evaluation.metadata),
                }
            )
    print(
        "RESULT " + json.dumps({"success": result.success, "materializations": materializations, "checks": checks}),
        flush=True,
    )


if __name__ == "__main__":
    main()
