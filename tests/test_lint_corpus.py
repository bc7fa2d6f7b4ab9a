"""Every corpus file declares the codes it must produce (`# expect: ...`); compare exactly."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from loaderdoctor.lint import check_paths

CORPUS = Path(__file__).parent / "lint_corpus"
BAD = sorted((CORPUS / "bad").glob("*.py")) + sorted((CORPUS / "bad").glob("*.ipynb"))
CLEAN = sorted((CORPUS / "clean").glob("*.py"))


def expected_codes(path: Path) -> Counter[str]:
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        first = next(cell for cell in cells if cell["cell_type"] == "code")
        line = "".join(first["source"]).splitlines()[0]
    else:
        line = path.read_text().splitlines()[0]
    assert line.startswith("# expect:"), f"{path.name} must start with '# expect: CODES'"
    return Counter(line.removeprefix("# expect:").split())


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_bad_corpus_gives_exactly_the_declared_codes(path: Path) -> None:
    report = check_paths([path])
    assert Counter(f.code for f in report.findings) == expected_codes(path), "\n".join(
        f"{f.line}:{f.col} {f.code} {f.message}" for f in report.findings
    )


@pytest.mark.parametrize("path", CLEAN, ids=lambda p: p.name)
def test_clean_training_scripts_give_no_findings(path: Path) -> None:
    assert expected_codes(path) == Counter()
    report = check_paths([path])
    assert report.findings == []


def test_every_rule_is_exercised_by_the_bad_corpus() -> None:
    from loaderdoctor.lint import RULES

    seen = Counter[str]()
    for path in BAD:
        seen += expected_codes(path)
    assert {code for code in RULES if code != "LD000"} <= set(seen)


def test_folder_walk_finds_py_and_notebooks_and_sorts() -> None:
    report = check_paths([CORPUS])
    projects = list((CORPUS / "projects").rglob("*.py")) + list((CORPUS / "repos").rglob("*.py"))
    assert report.files_checked == len(BAD) + len(CLEAN) + len(projects)
    keys = [(f.path, f.cell or 0, f.line, f.col, f.code) for f in report.findings]
    assert keys == sorted(keys)
    assert all("clean" not in Path(f.path).parent.name for f in report.findings)
    assert all(not f.path.endswith(".ipynb") or f.cell for f in report.findings)
