"""Nothing the command line prints carries a credential, at any verbosity (SPEC §5)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import cast

import pytest

from tests.helpers import ROOT
from tests.helpers.s3server import new_bucket
from tests.unit.test_logs import SECRET, TOKEN

KEY_ID = "AKIAQWERTYSECRET7788"


def _clean_environment(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_DEFAULT_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",
        AWS_CONFIG_FILE=str(tmp_path / "no-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-file"),
    )
    return env


def _credentials(source: str, tmp_path: Path) -> tuple[dict[str, str], list[str]]:
    """The environment and extra flags that hand the CLI the credentials from ``source``."""
    env = _clean_environment(tmp_path)
    if source == "environment":
        env.update(AWS_ACCESS_KEY_ID=KEY_ID, AWS_SECRET_ACCESS_KEY=SECRET, AWS_SESSION_TOKEN=TOKEN)
        return env, []
    if source == "profile":  # values the CLI cannot know up front: masked by their shape
        profile = tmp_path / "credentials"
        profile.write_text(
            f"[default]\naws_access_key_id = {KEY_ID}\naws_secret_access_key = {SECRET}\naws_session_token = {TOKEN}\n"
        )
        env["AWS_SHARED_CREDENTIALS_FILE"] = str(profile)
        return env, []
    return env, [
        "--storage-option",
        f"key={KEY_ID}",
        "--storage-option",
        f"secret={SECRET}",
        "--storage-option",
        f"token={TOKEN}",
    ]


@pytest.mark.s3
@pytest.mark.parametrize("source", ["environment", "profile", "options"])
def test_verbose_commands_print_no_credential(s3_endpoint: str, tmp_path: Path, source: str) -> None:
    url = new_bucket(s3_endpoint)
    env, flags = _credentials(source, tmp_path)
    records = tmp_path / "records.jsonl"
    records.write_text('{"key": "a", "value": "1"}\n')
    where = ["--storage-option", f"client_kwargs.endpoint_url={s3_endpoint}", *flags]

    def cli(*args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "compaction.cli", *args, *where],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    printed = []
    for batch in (
        [("-v", "append", url, "orders", "0", str(records))],  # then the rest side by side
        [("-vv", "status", url), ("-vv", "read", url, "orders", "0"), ("-vv", "read", url, "orders", "9")],
    ):
        for process in [cli(*args) for args in batch]:
            output, _ = process.communicate(timeout=120)
            failing = cast(list[str], process.args)[-len(where) - 1] == "9"
            assert process.returncode == (1 if failing else 0), output[-3000:]
            printed.append(output)
    output = "\n".join(printed)

    assert "x-amz-security-token:" in output.lower(), "the storage client's request dumps were printed (-vv)"
    assert "error: partition" in output, "and an error"
    for secret in (KEY_ID, SECRET, TOKEN, TOKEN[:20], SECRET[:20]):
        assert secret not in output


@pytest.mark.s3
@pytest.mark.slow
def test_a_run_is_quiet_by_default_and_verbose_when_asked(s3_endpoint: str, tmp_path: Path) -> None:
    url = new_bucket(s3_endpoint)
    env = {**{k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP"}, "AWS_ENDPOINT_URL": s3_endpoint}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "compaction.cli", *args],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        return done

    cli(
        "generate",
        url,
        "--records",
        "8000",
        "--keys",
        "400",
        "--partitions",
        "2",
        "--segment-records",
        "1000",
        "--now",
        "2026-01-01T00:00:00Z",
    )
    run = cli("run", url, "--set", "log.cleanup.policy=compact", "--now", "2026-01-02T00:00:00Z")
    assert "2 partition(s) cleaned" in run.stdout, "the job's own progress and summary are on stdout"
    assert run.stderr == "", "no storage client INFO lines, no Spark or JVM line, no console progress bar"

    verbose = cli("-v", "status", url)
    assert "INFO aiobotocore.credentials: Found credentials in environment variables." in verbose.stderr
    assert "DEBUG botocore" not in verbose.stderr, "request dumps only with -vv"
    assert "DEBUG botocore" in cli("-vv", "status", url).stderr
