"""The long differential fuzzing run of our HTTP/1.1 parser against h11 and llhttp.

    .venv/bin/python scripts/fuzz_http1.py --examples 200000 [--seed 1]

Generates requests with ``tests/support/differential.py``'s strategies (hypothesis, no
shrinking, no example database), reads each with the three parsers and prints how many cases
ran, how many each known difference explained, and every unexplained disagreement grouped by
its kind (the parser, both verdicts, the first attribute that differs) with the shortest input
of each kind. Exits 1 when there is any. ``make test`` runs the short, fixed-seed form
(``tests/test_http1_differential.py``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

from tests.support.differential import (  # noqa: E402
    REQUESTS,
    Reading,
    classify,
    describe,
    explained_by,
)

FIELDS = ("method", "target", "version", "headers", "body", "consumed")


def kind(parser: str, ours: Reading, theirs: Reading) -> str:
    """A disagreement's kind: e.g. ``llhttp: ours request, llhttp refused`` or
    ``h11: both request, consumed differs``."""
    if ours.verdict != theirs.verdict:
        return f"{parser}: ours {ours.verdict}, {parser} {theirs.verdict}"
    differs = next(name for name in FIELDS if getattr(ours, name) != getattr(theirs, name))
    return f"{parser}: both request, {differs} differs"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=20000, help="cases to run")
    parser.add_argument("--seed", type=int, default=int(time.time()), help="hypothesis seed")
    args = parser.parse_args()
    ran = 0
    explained: Counter[str] = Counter()
    found: dict[str, bytes] = {}
    counts: Counter[str] = Counter()

    @seed(args.seed)
    @settings(max_examples=args.examples, deadline=None, database=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(REQUESTS)
    def run(data: bytes) -> None:
        nonlocal ran
        ran += 1
        ours, theirs, findings = classify(data)
        for name, reading in theirs.items():
            if reading != ours and name not in findings:
                explained.update(explained_by(name, data, ours, reading))
        for name in findings:
            key = kind(name, ours, theirs[name])
            counts[key] += 1
            if key not in found or len(data) < len(found[key]):
                found[key] = data

    started = time.monotonic()
    run()
    elapsed = time.monotonic() - started
    print(f"{ran} cases in {elapsed:.0f} s (seed {args.seed}); "
          f"{sum(counts.values())} unexplained disagreements of {len(counts)} kinds")
    for name, count in sorted(explained.items()):
        print(f"  known difference {name}: {count}")
    for key, count in counts.most_common():
        data = found[key]
        ours, theirs, _ = classify(data)
        parser_name = key.split(":")[0]
        print(f"\n{key} ({count} cases); shortest input:\n  {data!r}")
        print(f"  ours:   {describe(ours)}\n  {parser_name}: {describe(theirs[parser_name])}")
    return 1 if counts else 0


if __name__ == "__main__":
    sys.exit(main())
