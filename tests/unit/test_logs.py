"""Credentials are masked in everything printed: the secrets the job knows and the ones it recognises."""

from __future__ import annotations

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
