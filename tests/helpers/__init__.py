"""What the tests share: builders of records, batches and settings, the one CLI runner, the servers they start on
127.0.0.1, and the clean pass's stages run in this process."""

from pathlib import Path

#: The checkout: conf/, scripts/, dags/ and the package the tests run.
ROOT = Path(__file__).resolve().parents[2]
