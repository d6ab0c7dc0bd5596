"""The ``compaction`` command line, laid out as PyIceberg's: a thin layer over the library, and the only place
that reads the clock.

- :mod:`.console`: the entry (``main``, the console script; ``check_run`` for ``jobs/compact.py --check``), the
  parser and the exit codes each error gives;
- a module per group of commands: :mod:`.store` (generate, append, status, verify, gc), :mod:`.clean` (plan,
  run), :mod:`.read` (read, files, history, snapshot, publish), :mod:`.kafka` (import, export) and :mod:`.erasure`
  (forget, erasure, attest); each command reads its arguments, calls the Python API and prints what it returns;
- :mod:`.common` (what the commands share: exit codes, the clock, common arguments), :mod:`.types` (argument
  types) and :mod:`.output` (lines, tables and JSON, for every command).
"""

from compaction.cli.console import build_parser, check_run, main
from compaction.errors import EXIT_FAILED, EXIT_INVALID, EXIT_OK, EXIT_PARTIAL, EXIT_USAGE

__all__ = ["EXIT_FAILED", "EXIT_INVALID", "EXIT_OK", "EXIT_PARTIAL", "EXIT_USAGE", "build_parser", "check_run", "main"]
