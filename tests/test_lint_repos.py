"""Recall and precision of lint on shapes taken from public training repositories.

Each folder of ``lint_corpus/repos`` rewrites, in a few lines, the files of one public repository
that decide what lint should say (its README names the repository, commit, files and licence).
A line that must get a finding ends with ``# want: CODE``; a line that must not, where a reader
might expect one, ends with ``# deny: CODE``. Every finding at the default severity that no
``want`` asks for counts against precision.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from loaderdoctor.lint import check_paths

REPOS = Path(__file__).parent / "lint_corpus" / "repos"
CASES = sorted(path for path in REPOS.iterdir() if path.is_dir())
_LABEL = re.compile(r"#\s*(want|deny):\s*(LD\d{3}(?:[ ,]+LD\d{3})*)")

Key = tuple[str, int, str]  # (path in the case, line, code)


@dataclass
class Labels:
    want: set[Key] = field(default_factory=set)
    deny: set[Key] = field(default_factory=set)


def labels_of(case: Path) -> Labels:
    labels = Labels()
    for path in sorted(case.rglob("*.py")):
        relative = path.relative_to(case).as_posix()
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            for kind, codes in _LABEL.findall(line):
                for code in re.split(r"[ ,]+", codes):
                    getattr(labels, kind).add((relative, number, code))
    return labels


def found_in(case: Path) -> set[Key]:
    report = check_paths([case])
    return {(Path(f.path).relative_to(case).as_posix(), f.line, f.code) for f in report.findings}


@dataclass
class Score:
    hits: int = 0
    misses: list[Key] = field(default_factory=list)
    false_alarms: list[Key] = field(default_factory=list)


def score(cases: list[Path]) -> dict[str, Score]:
    scores = {}
    for case in cases:
        labels, found = labels_of(case), found_in(case)
        scores[case.name] = Score(
            len(labels.want & found), sorted(labels.want - found), sorted(found - labels.want)
        )
    return scores


def test_the_corpus_spans_the_fields_and_cites_its_sources() -> None:
    fields = {case.name.split("-")[0] for case in CASES}
    assert len(CASES) >= 30
    assert {
        "detection",
        "segmentation",
        "speech",
        "nlp",
        "diffusion",
        "rl",
        "medical",
        "pointcloud",
        "video",
        "selfsup",
    } <= fields
    for case in CASES:
        readme = (case / "README.md").read_text()
        assert re.search(r"github\.com/[\w.-]+/[\w.-]+/tree/[0-9a-f]{40}", readme), case.name
        assert "Licence:" in readme, case.name


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_no_denied_finding(case: Path) -> None:
    labels = labels_of(case)
    assert labels.want or labels.deny, f"{case.name} labels nothing"
    assert sorted(labels.deny & found_in(case)) == []


def test_recall_and_precision_over_the_corpus() -> None:
    scores = score(CASES)
    hits = sum(s.hits for s in scores.values())
    misses = [(name, m) for name, s in scores.items() for m in s.misses]
    false_alarms = [(name, f) for name, s in scores.items() for f in s.false_alarms]
    recall = hits / (hits + len(misses))
    precision = hits / (hits + len(false_alarms))
    detail = f"recall {recall:.3f} precision {precision:.3f}\nmissed {misses}\nfalse {false_alarms}"
    assert recall >= 0.90, detail
    assert precision >= 0.95, detail
