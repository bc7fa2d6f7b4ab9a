"""Multi-file projects linted as one: base classes across modules, worker counts, setup modules."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from loaderdoctor.lint import check_paths

PROJECTS = Path(__file__).parent / "lint_corpus" / "projects"


def findings_of(root: Path, *paths: str, severity: str = "warning") -> list[str]:
    old = Path.cwd()
    os.chdir(root)
    try:
        report = check_paths(list(paths) or ["."], min_severity=severity)
    finally:
        os.chdir(old)
    return [f"{f.path}:{f.line}:{f.col} {f.code} {f.severity}" for f in report.findings]


@pytest.mark.parametrize(
    "name",
    [
        "detection",
        "segmentation",
        "opencv_chain",
        "imported_fit",
        "records_flow",
        "coco_helpers",
        "cuda_helper",
        "handle_helper",
    ],
)
def test_project_gives_exactly_the_expected_findings(name: str) -> None:
    root = PROJECTS / name
    expected = (root / "EXPECTED.txt").read_text().splitlines()
    assert findings_of(root) == expected


def test_cv2_threads_set_in_a_setup_module_count_only_when_it_is_linted() -> None:
    root = PROJECTS / "detection"
    assert findings_of(root, "datasets") == [
        "datasets/base.py:12:28 LD107 warning",
        "datasets/base.py:27:17 LD108 warning",
        "datasets/coco.py:11:25 LD106 error",
    ]
    assert findings_of(root, "datasets", "setup_env.py") == [
        "datasets/base.py:12:28 LD107 warning",
        "datasets/coco.py:11:25 LD106 error",
    ]


def test_base_class_from_another_module_is_a_dataset() -> None:
    # coco.py alone cannot see BaseDetection (datasets/base.py): CocoBoxes is not a Dataset
    # then, and its h5py handle is not judged; with the package it is.
    root = PROJECTS / "detection"
    assert findings_of(root, "datasets/coco.py") == []
    assert "datasets/coco.py:11:25 LD106 error" in findings_of(root, "datasets")


def test_dataset_used_only_with_zero_workers_is_not_judged() -> None:
    root = PROJECTS / "segmentation"
    # debug.py opens a file in __init__; eval.py gives it only to a num_workers=0 DataLoader.
    assert findings_of(root, "seg/data/debug.py") == ["seg/data/debug.py:8:21 LD106 error"]
    assert findings_of(root, "seg/data/debug.py", "tools/eval.py") == []


def test_every_file_is_counted_even_when_the_text_scan_skips_it() -> None:
    report = check_paths([PROJECTS / "detection"])
    assert report.files_checked == 6  # augment.py mentions nothing a rule looks at
    assert report.lines_checked == sum(
        path.read_text().count("\n") + 1 for path in (PROJECTS / "detection").rglob("*.py")
    )


def test_cyclic_and_shadowing_imports_do_not_crash(tmp_path: Path) -> None:
    # errors.Error derives from other.Error, which derives from errors.Error (as in the stdlib's
    # test suite); both modules are read only on demand, to resolve the base of Items.
    (tmp_path / "errors.py").write_text("import other\n\n\nclass Error(other.Error):\n    pass\n")
    (tmp_path / "other.py").write_text("import errors\n\n\nclass Error(errors.Error):\n    pass\n")
    (tmp_path / "data.py").write_text(
        "from errors import Error\n\n\nclass Items(Error):\n"
        "    def __getitem__(self, index):\n        return index\n"
    )
    report = check_paths([tmp_path])
    assert (report.files_checked, report.findings) == (3, [])
