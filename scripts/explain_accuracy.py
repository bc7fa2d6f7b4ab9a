"""Top-1 and top-3 accuracy of ``loaderdoctor explain`` on its corpus of public log shapes.

Run: ``python scripts/explain_accuracy.py [--misses]``. Reads tests/fixtures/explain/corpus (one
file per case: a header of ``# key: value`` lines up to ``# ---``, naming the source thread (or
the stock-torch run that printed it), the established cause and whether the case was held out
while the rules were written) and prints the accuracy for the held-out cases, the others, and
all of them. A control (``cause: none``, ``control: KIND``) is a log that shows no DataLoader
failure: it is right when explain names no cause and names KIND as what failed instead
(forensics/elsewhere.py), or, for ``control: nothing``, nothing at all (a run that did not fail);
controls count in top-1 and top-3 as well. ``--corpus DIR`` scores another folder of cases in
the same format: a new round of public logs is gathered there and scored before any rule is
changed for it, then joins the corpus. A case's ``round: N`` names the round of rules it
was gathered for (its score before that round is in the corpus's README.md); ``undecided: yes``
marks a log that cannot decide (explain lists its cause as a candidate, not first).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from loaderdoctor.forensics.explain import explain_text

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "explain" / "corpus"
NO_CAUSE = "none"
NO_FAILURE = "nothing"  # a control whose log shows no failure at all


BINS = (0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 1.01)  # edges of the calibration table's bins


@dataclass(frozen=True)
class Scored:
    name: str
    meta: dict[str, str]
    causes: list[str]  # as explain ranks them
    elsewhere: list[str]  # the kinds of failure it names that are not the DataLoader's
    stated: float = 0.0  # the likelihood explain gives its first cause (0 when it names none)

    @property
    def control(self) -> bool:
        return self.meta["cause"] == NO_CAUSE

    def right_within(self, rank: int) -> bool:
        if self.control:
            named = self.elsewhere[:1] or [NO_FAILURE]
            return not self.causes and named == [self.meta["control"]]
        return self.meta["cause"] in self.causes[:rank]


def load_corpus(folder: Path = CORPUS) -> list[tuple[str, dict[str, str], str]]:
    cases = []
    for path in sorted(folder.glob("*.log")):
        head, body = path.read_text(encoding="utf-8").split("# ---\n", 1)
        meta = dict(line[2:].split(": ", 1) for line in head.splitlines())
        cases.append((path.stem, meta, body))
    return cases


def score_corpus(folder: Path = CORPUS) -> list[Scored]:
    scored = []
    for name, meta, body in load_corpus(folder):
        explanation = explain_text(body)
        causes = [guess.cause for guess in explanation.causes]
        stated = explanation.causes[0].likelihood if explanation.causes else 0.0
        elsewhere = [o.kind for o in explanation.elsewhere]
        scored.append(Scored(name, meta, causes, elsewhere, stated))
    return scored


def calibration(scored: list[Scored]) -> list[tuple[float, float, int, float, float]]:
    """Per bin of stated likelihood: its edges, the answers in it, their mean stated likelihood
    and the share of them that were right. An answer is explain's first cause, on the cases that
    are not controls; a confidence means what it says when the two columns agree."""
    rows = []
    answers = [case for case in scored if not case.control and case.causes]
    for low, high in pairwise(BINS):
        inside = [case for case in answers if low <= case.stated < high]
        if inside:
            mean = sum(case.stated for case in inside) / len(inside)
            rows.append((low, min(high, 1.0), len(inside), mean, _share(inside, 1)))
    return rows


def rates(scored: list[Scored]) -> dict[str, float]:
    """Top-1, top-3 and the control hit rate, each 0..1 (1.0 for an empty set)."""
    controls = [case for case in scored if case.control]
    return {
        "top1": _share(scored, 1),
        "top3": _share(scored, 3),
        "controls": _share(controls, 1),
    }


def _share(cases: list[Scored], rank: int) -> float:
    return sum(case.right_within(rank) for case in cases) / len(cases) if cases else 1.0


def _count(cases: list[Scored], rank: int, label: str) -> str:
    right = sum(case.right_within(rank) for case in cases)
    return f"{label} {right}/{len(cases)} ({_share(cases, rank):.0%})"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--misses", action="store_true", help="list the cases not named first")
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="folder of cases to score")
    options = parser.parse_args()
    scored = score_corpus(options.corpus)
    groups: list[tuple[str, list[Scored]]] = [
        ("held out", [case for case in scored if case.meta["held-out"] == "yes"]),
        ("written with the rules", [case for case in scored if case.meta["held-out"] == "no"]),
    ]
    for round_ in sorted({case.meta["round"] for case in scored if "round" in case.meta}):
        fresh = [case for case in scored if case.meta.get("round") == round_]
        groups.append((f"gathered for round {round_}", fresh))
    groups.append(("all", scored))
    for label, cases in groups:
        print(
            f"{label:>24}: {len(cases):3} cases, {_count(cases, 1, 'top-1')}, {_count(cases, 3, 'top-3')}"
        )
    controls = [case for case in scored if case.control]
    print(
        f"{'controls':>24}: {len(controls):3} cases, "
        f"{_count(controls, 1, 'named as not a DataLoader failure')}"
    )
    print("calibration (first cause, controls left out):")
    print("    stated      answers  mean stated  right")
    for low, high, count, mean, right in calibration(scored):
        print(f"    {low:.1f}-{high:.1f}  {count:9}  {mean:11.2f}  {right:5.0%}")
    if options.misses:
        for case in scored:
            if not case.right_within(1):
                expected = case.meta.get("control", case.meta["cause"])
                print(
                    f"  miss: {case.name}: expected {expected}, got {case.causes[:3] or case.elsewhere}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
