"""The verdict of ``make mutation`` and of CI's sample of it: the share of mutants the unit tests killed, and the
survivors not argued equivalent.

    python tests/mutation/score.py [--floor 0.95] [--only NAMES]
    python tests/mutation/score.py --pick FRACTION --seed SEED > NAMES

Reads mutmut's verdicts from ``mutants/`` (each mutated module's ``.meta``, mutmut's own exit-code reading), prints
the score, and fails when it is below the floor or when a surviving mutant is neither killed by a test nor listed,
with why, in equivalent.md beside this script. ``--only`` judges the mutants a file names, one per line (CI's
sample): the floor is the whole run's, so a sample fails only on a survivor nobody argued or a mutant it did not run.

``--pick`` prints that sample: each mutant mutmut generated is in it with probability FRACTION, by a hash of SEED
and its name (CI's seed is the commit), so a commit always draws the same mutants and the commits between two full
runs draw different ones.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections import Counter
from pathlib import Path

from mutmut.stats import status_by_exit_code

EQUIVALENT = Path(__file__).with_name("equivalent.md")
#: A mutant as equivalent.md names it, in backquotes: ``compaction.rules.x_classify__mutmut_12``.
NAME = re.compile(r"`(compaction\.[\w.]+__mutmut_\d+)`")
#: A mutant that makes the tests hang is caught too.
CAUGHT = {"killed", "timeout"}


def verdicts(mutants: Path) -> dict[str, str]:
    """Every generated mutant's status, ``not checked`` for one no run has tried."""
    found: dict[str, str] = {}
    for meta in sorted(mutants.rglob("*.py.meta")):
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            found[name] = "not checked" if code is None else status_by_exit_code[code]
    if not found:
        raise SystemExit(f"{mutants} holds no mutmut results (.py.meta files): run mutmut first")
    return found


def pick(names: list[str], fraction: float, seed: str) -> list[str]:
    cut = fraction * 2**64
    return [n for n in names if int.from_bytes(hashlib.sha256(f"{seed}:{n}".encode()).digest()[:8], "big") < cut]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mutants", type=Path, default=Path("mutants"), help="mutmut's folder (default: mutants)")
    parser.add_argument("--floor", type=float, default=0.95, help="the least share of mutants killed (a whole run)")
    parser.add_argument("--only", type=Path, help="judge only the mutants this file names, one per line")
    parser.add_argument("--pick", type=float, metavar="FRACTION", help="print a sample of the mutants instead")
    parser.add_argument("--seed", default="0", help="the sample's seed (with --pick)")
    args = parser.parse_args()
    found = verdicts(args.mutants)
    if args.pick is not None:
        if not 0 < args.pick <= 1:
            parser.error(f"--pick {args.pick}: expected a fraction in (0, 1]")
        print("\n".join(pick(sorted(found), args.pick, args.seed)))
        return 0
    if args.only is not None:
        wanted = args.only.read_text().split()
        unknown = [n for n in wanted if n not in found]
        if unknown:
            raise SystemExit(f"{args.only} names mutants mutmut did not generate: {', '.join(unknown[:5])}")
        found = {n: found[n] for n in wanted}
    counts = Counter(found.values())
    caught = sum(counts[s] for s in CAUGHT)
    score = caught / len(found) if found else 0.0
    kind = f"sample of {len(found)}" if args.only else f"{len(found)} mutants"
    print(
        f"mutation score ({kind}): {caught} killed ({score:.1%}); " + ", ".join(f"{s} {n}" for s, n in counts.items())
    )
    equivalent = set(NAME.findall(EQUIVALENT.read_text()))
    alive = sorted(n for n, s in found.items() if s == "survived")
    unexplained = [n for n in alive if n not in equivalent]
    print(f"{len(alive)} surviving, {len(alive) - len(unexplained)} of them argued equivalent in {EQUIVALENT.name}")
    for name in unexplained:
        print(f"  survived, not killed by a test nor argued equivalent: {name} (mutmut show {name})")
    unrun = sorted(n for n, s in found.items() if s == "not checked")
    for name in unrun[:10]:
        print(f"  not run: {name}")
    failed = bool(unexplained or unrun)
    if args.only is None and score < args.floor:
        print(f"below the floor of {args.floor:.0%}")
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
