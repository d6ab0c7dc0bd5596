"""The session helper: local mode retries failed tasks as a cluster does."""

from __future__ import annotations

import pytest

from compaction.clean.session import with_task_retries


@pytest.mark.parametrize(("master", "expected"), [
    ("local", "local[1,4]"), ("local[3]", "local[3,4]"), ("local[*]", "local[*,4]"),
    ("local[2,1]", "local[2,1]"), ("spark://host:7077", "spark://host:7077"), ("yarn", "yarn"),
])
def test_a_local_master_gets_the_task_attempts_a_cluster_gives(master: str, expected: str) -> None:
    assert with_task_retries(master) == expected


def test_the_attempts_can_be_set() -> None:
    assert with_task_retries("local[2]", "2") == "local[2,2]"
