"""make mutation's verdict: the share of mutants the unit tests killed, and the survivors not argued equivalent.

Reads mutmut's summary (``mutmut export-cicd-stats``) and its results, prints the score, and fails when the score
is below the floor or when a surviving mutant is neither killed by a test nor listed, with why, in equivalent.md
beside this script.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

EQUIVALENT = Path(__file__).with_name("equivalent.md")
#: A mutant as equivalent.md names it, in backquotes: ``compaction.rules.x_classify__mutmut_12``.
NAME = re.compile(r"`(compaction\.[\w.]+__mutmut_\d+)`")


def survivors(mutmut: str) -> list[str]:
    """The mutants mutmut's last run left alive (``mutmut results`` lists those not killed)."""
    listed = subprocess.run([mutmut, "results"], capture_output=True, text=True, check=True).stdout
    return [
        name
        for name, status in re.findall(r"^\s*([\w.]+__mutmut_\d+): (\w[\w ]*)$", listed, re.MULTILINE)
        if status == "survived"
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("stats", type=Path, help="mutants/mutmut-cicd-stats.json")
    parser.add_argument("--floor", type=float, default=0.9, help="the least share of mutants killed")
    parser.add_argument("--mutmut", default=str(Path(sys.executable).with_name("mutmut")))
    args = parser.parse_args()
    stats = json.loads(args.stats.read_text())
    killed = stats["killed"] + stats["timeout"]  # a mutant that makes the tests hang is caught too
    score = killed / stats["total"] if stats["total"] else 0.0
    print(
        f"mutation score: {killed} of {stats['total']} mutants killed ({score:.1%}); survived {stats['survived']}, "
        f"no tests {stats['no_tests']}, skipped {stats['skipped']}, suspicious {stats['suspicious']}"
    )
    equivalent = set(NAME.findall(EQUIVALENT.read_text()))
    alive = survivors(args.mutmut)
    unexplained = [name for name in alive if name not in equivalent]
    print(f"{len(alive)} surviving, {len(alive) - len(unexplained)} of them argued equivalent in {EQUIVALENT.name}")
    for name in unexplained:
        print(f"  survived, not killed by a test nor argued equivalent: {name} (mutmut show {name})")
    if score < args.floor:
        print(f"below the floor of {args.floor:.0%}")
    return 1 if score < args.floor or unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
