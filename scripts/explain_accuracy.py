"""Top-1 and top-3 accuracy of ``loaderdoctor explain`` on its corpus of public log shapes.

Run: ``python scripts/explain_accuracy.py [--misses]``. Reads tests/fixtures/explain/corpus (one
file per case: a header of ``# key: value`` lines up to ``# ---``, naming the source thread, the
established cause and whether the case was held out while the rules were written) and prints the
accuracy for the held-out cases, the others, and all of them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from loaderdoctor.forensics.explain import explain_text

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "explain" / "corpus"


def load_corpus() -> list[tuple[str, dict[str, str], str]]:
    cases = []
    for path in sorted(CORPUS.glob("*.log")):
        head, body = path.read_text(encoding="utf-8").split("# ---\n", 1)
        meta = dict(line[2:].split(": ", 1) for line in head.splitlines())
        cases.append((path.stem, meta, body))
    return cases


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--misses", action="store_true", help="list the cases not named first")
    options = parser.parse_args()
    ranked = [
        (name, meta, [g.cause for g in explain_text(body).causes])
        for name, meta, body in load_corpus()
    ]
    for label, held in (
        ("held out", {"yes"}),
        ("written with the rules", {"no"}),
        ("all", {"yes", "no"}),
    ):
        cases = [(meta["cause"], causes) for _, meta, causes in ranked if meta["held-out"] in held]
        top1 = sum(causes[:1] == [cause] for cause, causes in cases)
        top3 = sum(cause in causes[:3] for cause, causes in cases)
        print(
            f"{label:>24}: {len(cases):3} cases, top-1 {top1}/{len(cases)}, top-3 {top3}/{len(cases)}"
        )
    if options.misses:
        for name, meta, causes in ranked:
            if causes[:1] != [meta["cause"]]:
                print(f"  miss: {name}: expected {meta['cause']}, got {causes[:3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
