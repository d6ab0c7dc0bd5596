"""The command line's logging: levels by verbosity, and output that never carries a credential."""

from __future__ import annotations

import logging
import re
import sys
import traceback
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any

MASK = "****"
#: Shorter values are not masked by value (masking "x" everywhere would garble every message); real
#: credentials are far longer, and AWS-shaped ones are masked by their shape whatever their length.
MIN_SECRET_LENGTH = 4

#: Environment variables whose values are credentials (the ones botocore, gcsfs and adlfs read).
SECRET_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_CLIENT_SECRET",
)
#: Storage options whose values are credentials (s3fs's key/secret/token, botocore's aws_*_key..., passwords).
SECRET_OPTION = re.compile(r"key|secret|token|password|credential|sas|connection_string", re.IGNORECASE)
#: Credentials recognisable in text whatever their source (a profile, an instance role): AWS access key ids,
#: SigV4's Credential= scope and Signature=, and security-token headers as botocore's debug log prints them
#: (a canonical request's ``x-amz-security-token:...`` line, a header dict's ``'X-Amz-Security-Token': b'...'``).
_PATTERNS = (
    re.compile(r"\b(?:AKIA|ASIA|AIDA|AROA|AGPA|ANPA|ANVA|AIPA)[A-Z0-9]{12,}\b"),
    re.compile(r"(?i)(Credential=)[^/\s,'\"]+"),
    re.compile(r"(?i)(Signature=)[0-9a-f]+"),
    re.compile(r"(?i)(x-amz-security-token['\"]?\s*[:=]\s*b?['\"]?)[^\s'\",}]+"),
)
#: Libraries whose debug logs print every request (headers included), and whose INFO lines ("Found credentials
#: in environment variables.") mean nothing to a user: WARNING by default, INFO under -v, DEBUG under -vv.
STORAGE_CLIENT_LOGGERS = ("botocore", "aiobotocore", "s3fs", "fsspec", "urllib3", "aiohttp", "gcsfs", "adlfs", "azure")


def secrets_in(environ: Mapping[str, str], storage_options: Mapping[str, Any] | None = None) -> set[str]:
    """The credential values known up front: from the environment and from secret-looking storage options."""
    found = {environ[name] for name in SECRET_VARIABLES if name in environ}

    def walk(options: Mapping[str, Any]) -> None:
        for key, value in options.items():
            if isinstance(value, Mapping):
                walk(value)
            elif isinstance(value, str) and SECRET_OPTION.search(str(key)):
                found.add(value)

    walk(storage_options or {})
    return {value for value in found if len(value) >= MIN_SECRET_LENGTH}


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every known secret value and every recognisable credential masked."""
    for secret in sorted(secrets, key=len, reverse=True):  # longest first: one secret may contain another
        text = text.replace(secret, MASK)
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + MASK, text)
    return text


class RedactingFormatter(logging.Formatter):
    """Formats a record as usual, then masks credentials in the whole text (message, arguments, traceback)."""

    def __init__(self, fmt: str, secrets: Iterable[str]) -> None:
        super().__init__(fmt)
        self.secrets = set(secrets)

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record), self.secrets)


def install(verbosity: int, secrets: Iterable[str]) -> None:
    """Log to stderr through a redacting formatter. Quiet by default: the product's INFO lines and every
    library's warnings. ``-v``: the product's DEBUG details and the libraries' INFO lines; ``-vv``: DEBUG for
    everything, the storage clients' request dumps included (still masked). Uncaught tracebacks are masked the
    same way."""
    root = logging.getLogger()
    for previous in [h for h in root.handlers if isinstance(h.formatter, RedactingFormatter)]:
        root.removeHandler(previous)  # installed by an earlier call in this process
    handler = logging.StreamHandler()
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s", secrets))
    root.addHandler(handler)
    root.setLevel({0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG))
    logging.getLogger("compaction").setLevel(logging.DEBUG if verbosity else logging.INFO)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    for name in STORAGE_CLIENT_LOGGERS:
        logging.getLogger(name).setLevel({0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG))
    known = set(secrets)

    def excepthook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        sys.stderr.write(redact("".join(traceback.format_exception(kind, value, tb)), known))

    sys.excepthook = excepthook
