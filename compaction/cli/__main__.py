"""``python -m compaction.cli``: the ``compaction`` command."""

import sys

from compaction.cli.console import main

sys.exit(main())
