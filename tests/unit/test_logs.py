"""Credentials are masked in everything printed and reported: the secrets the job knows and the ones it recognises."""

from __future__ import annotations

from compaction.clean.results import PartitionResult, RunIdentity, RunReport, Status
from compaction.job import masked
from compaction.logs import MASK, redact, secrets_in

# Distinctive values, so that any trace of them in the output is found (tests/integration/test_logs.py uses them too).
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzzSECRET"
TOKEN = "IQoJb3JpZ2luX2VjEXAMPLESESSIONTOKENzz9+/w=="


def test_known_secrets_and_recognisable_credentials_are_masked() -> None:
    secrets = secrets_in(
        {"AWS_SECRET_ACCESS_KEY": SECRET, "HOME": "/home/me"},
        {"client_kwargs": {"endpoint_url": "http://x", "aws_session_token": TOKEN}},
    )
    assert secrets == {SECRET, TOKEN}
    text = (
        f"secret {SECRET} token {TOKEN}; Authorization: AWS4-HMAC-SHA256 Credential=ASIAXYZXYZXYZXYZXYZ1/"
        f"20260101/us-east-1/s3/aws4_request, Signature=0a1b2c; headers={{'X-Amz-Security-Token': b'abc/+='}}\n"
        "x-amz-security-token:abc/+=\n"
    )
    assert redact(text, secrets) == (
        f"secret {MASK} token {MASK}; Authorization: AWS4-HMAC-SHA256 Credential={MASK}/20260101/us-east-1/s3/"
        f"aws4_request, Signature={MASK}; headers={{'X-Amz-Security-Token': b'{MASK}'}}\n"
        f"x-amz-security-token:{MASK}\n"
    )


def test_a_reports_failures_are_masked_in_a_copy_and_the_pass_report_is_left_as_it_is() -> None:
    cleaned = PartitionResult("t-0", Status.CLEANED, "dirty ratio", error=f"not an error {SECRET}")
    failed = PartitionResult("t-1", Status.FAILED, "dirty ratio", error=f"OSError: key {SECRET}", trace=f"at {TOKEN}")
    unnamed = PartitionResult("t-2", Status.UNCLEANABLE, "manifest unreadable")
    identity = RunIdentity(run_id="r", store="memory://s", now_ms=0, dedupe_plan="arrow")
    report = RunReport(identity, 5, [cleaned, failed, unnamed], {"failed": 2}, {})

    shown = masked(report, {SECRET, TOKEN})

    assert [(r.error, r.trace) for r in shown.partitions] == [
        (f"not an error {SECRET}", None),  # only failures carry what a library put in an error
        (f"OSError: key {MASK}", f"at {MASK}"),
        ("", None),
    ]
    assert (failed.error, failed.trace) == (f"OSError: key {SECRET}", f"at {TOKEN}"), "the pass's own result"
    assert report.partitions == [cleaned, failed, unnamed] and shown.totals == report.totals
