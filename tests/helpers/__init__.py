"""What the tests share: builders of records, batches and settings, the one CLI runner, the servers they start on
127.0.0.1, and the clean pass's stages run in this process."""

import re
from pathlib import Path

#: The checkout: conf/, scripts/, dags/ and the package the tests run.
ROOT = Path(__file__).resolve().parents[2]
#: What a user must not see on stderr after a successful run (SPEC §5): a Spark or JVM ERROR/WARN line, a Java or
#: Python stack trace, a JVM log line.
SPARK_NOISE = re.compile(r"\b(?:ERROR|WARN|WARNING|FATAL)\b|^\s+at [\w$.]+\(|Exception|Traceback|\[warning\]",
                         re.MULTILINE)
