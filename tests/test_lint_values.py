"""What an expression can be, followed the way a reader would across a project.

Each project under ``lint_corpus/projects`` here is a realistic training layout hiding one
pitfall behind one more hop than a direct call:

- ``loader_calls``: the training function called through a module attribute
  (``import pipeline.steps as pipe; pipe.fit()``) and the method of an object built at top
  level (``framework = Trainer(...); framework.train()``), the DataLoader coming from a
  project factory whose ``num_workers`` defaults to 8; the same calls under the main guard
  are fine.
- ``handed_values``: a lambda reached through a package ``__init__`` that star-imports its
  module, handed over as ``DataLoader(dataset=splits["train"])``; a ``defaultdict(lambda)``
  kept by a Dataset, filled with one tuple key per record (OGB's count table); a lambda a DataLoader subclass passes to its own ``super().__init__``;
  OpenCV behind a transform object, behind a dict of functions, behind objects built by
  ``getattr(module, name)`` and held in a list, and behind an imgaug augmenter that a subclass
  sets for the ``__call__`` it inherits; ``cv2.imdecode`` alone starts no thread.
- ``branch_bindings``: one name bound to two Datasets in the two branches of an ``if``,
  each handed to its own DataLoader (only the one with workers is judged), and a Dataset
  built with a lambda in one branch only.
- ``handles_records``: a zip handle opened in ``__init__`` and reopened only ``if self.archive
  is None`` (its ``close()`` clears it, but nothing calls that before the workers start; the
  subclass that does is fine); a ``multiprocessing.Manager`` held by the Dataset (spawn cannot
  pickle it); per-record objects built by helper functions (CSV rows, JSON items), a list of
  per-row numpy views, per-line label lists appended by a helper method, one tensor of parsed
  boxes per line of a list file, and a vocabulary unpickled by the training script and handed
  to the Dataset through a ``get_loader`` factory.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from loaderdoctor.lint import check_paths
from loaderdoctor.report.lint import format_text

PROJECTS = Path(__file__).parent / "lint_corpus" / "projects"


def findings_of(root: Path) -> list[str]:
    old = Path.cwd()
    os.chdir(root)
    try:
        report = check_paths(["."])
    finally:
        os.chdir(old)
    return [f"{f.path}:{f.line}:{f.col} {f.code} {f.severity}" for f in report.findings]


@pytest.mark.parametrize(
    "name", ["loader_calls", "handed_values", "branch_bindings", "handles_records"]
)
def test_project_gives_exactly_the_expected_findings(name: str) -> None:
    root = PROJECTS / name
    expected = (root / "EXPECTED.txt").read_text().splitlines()
    assert findings_of(root) == expected


def messages_of(root: Path, code: str) -> list[str]:
    old = Path.cwd()
    os.chdir(root)
    try:
        report = check_paths(["."], select=[code])
    finally:
        os.chdir(old)
    return [f"{f.path}:{f.line} {f.message}" for f in report.findings]


def test_a_lambda_through_a_star_import_names_where_it_is_defined() -> None:
    found = messages_of(PROJECTS / "handed_values", "LD102")
    assert found[1].startswith(
        "train.py:13 `scale_to_unit`, a lambda (augment/ops.py:4), passed to `Frames(...)` is "
        "kept by the Dataset, which is pickled into every worker"
    )


def test_a_call_through_a_module_attribute_names_the_factory_default() -> None:
    found = messages_of(PROJECTS / "loader_calls", "LD101")
    assert found[1].startswith(
        "run_module_attribute.py:3 `pipe.fit()` runs at import time and iterates a DataLoader "
        "with num_workers=num_workers (a parameter of `build_loader()`: possibly > 0) (line 18 "
        "of pipeline/data.py)"
    )


def test_a_package_linted_from_inside_resolves_its_absolute_imports(tmp_path: Path) -> None:
    # `from detector.utils.data import Frames` while the folder given is detector/ itself:
    # its modules are named utils.data, train, as seen from inside.
    package = tmp_path / "detector"
    (package / "utils").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "utils" / "__init__.py").write_text("")
    (package / "utils" / "data.py").write_text(
        "from torch.utils.data import Dataset\n\n\n"
        "class Frames(Dataset):\n"
        "    def __init__(self, paths, transform):\n"
        "        self.paths, self.transform = paths, transform\n\n"
        "    def __len__(self):\n"
        "        return len(self.paths)\n\n"
        "    def __getitem__(self, index):\n"
        "        return self.transform(self.paths[index])\n"
    )
    (package / "train.py").write_text(
        "from torch.utils.data import DataLoader\n\n"
        "from detector.utils.data import Frames\n\n"
        "if __name__ == '__main__':\n"
        "    frames = Frames(['a'], transform=lambda path: path.upper())\n"
        "    for batch in DataLoader(frames, num_workers=2):\n"
        "        print(batch)\n"
    )
    report = check_paths([package])
    assert [(Path(f.path).name, f.line, f.code) for f in report.findings] == [
        ("train.py", 6, "LD102")
    ]


def test_a_folder_run_names_each_file_it_could_not_parse(tmp_path: Path) -> None:
    (tmp_path / "legacy.py").write_text('print "python 2"\n')
    (tmp_path / "broken.py").write_text("def train(:\n    pass\n")
    (tmp_path / "fine.py").write_text("value = 1\n")
    report = check_paths([tmp_path])
    report.seconds = 0.0
    assert format_text(report) == (
        f"not parsed {tmp_path / 'broken.py'}:1: invalid syntax\n"
        f"not parsed {tmp_path / 'legacy.py'}:1: Missing parentheses in call to 'print'. "
        "Did you mean print(...)?\n"
        "0 findings in 3 files, 7 lines, 0.00 s\n"
    )
    assert [item.to_dict() for item in report.unparsed] == [
        {"path": str(tmp_path / "broken.py"), "line": 1, "message": "invalid syntax"},
        {
            "path": str(tmp_path / "legacy.py"),
            "line": 1,
            "message": "Missing parentheses in call to 'print'. Did you mean print(...)?",
        },
    ]
