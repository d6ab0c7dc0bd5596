"""The session helper: local mode retries failed tasks as a cluster does."""

from __future__ import annotations

import pytest

from compaction.clean.session import check_master, with_task_retries
from compaction.errors import CompactionError


@pytest.mark.parametrize(("master", "expected"), [
    ("local", "local[1,4]"), ("local[3]", "local[3,4]"), ("local[*]", "local[*,4]"),
    ("local[2,1]", "local[2,1]"), ("spark://host:7077", "spark://host:7077"), ("yarn", "yarn"),
])
def test_a_local_master_gets_the_task_attempts_a_cluster_gives(master: str, expected: str) -> None:
    assert with_task_retries(master) == expected


def test_the_attempts_can_be_set() -> None:
    assert with_task_retries("local[2]", "2") == "local[2,2]"


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "local[2,3]", "local[*,4]",
                                    "local-cluster[2,1,1024]"])
def test_every_local_master_spark_takes_is_accepted(master: str) -> None:
    check_master(master)


@pytest.mark.parametrize("master", ["local[0]", "local-cluster[2,1]", "local-cluster[2, 1, 1024]", "localhost:7077",
                                    "locall[2]", "mesos-cluster"])
def test_a_malformed_master_is_refused_with_the_forms_spark_takes(master: str) -> None:
    with pytest.raises(CompactionError, match="local-cluster"):
        check_master(master)


def test_a_local_cluster_master_keeps_its_own_task_attempts() -> None:
    assert with_task_retries("local-cluster[2,1,1024]") == "local-cluster[2,1,1024]", \
        "a local cluster schedules like a standalone one: spark.task.maxFailures applies"
