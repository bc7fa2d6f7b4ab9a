"""lint's modules form layers with no cycle, counting `if TYPE_CHECKING:` imports too.

The package-wide contracts in pyproject.toml skip type-only imports (other packages use them to
name types across layers), which hid a cycle in lint: the module model pointed back at the project
that owns it. This contract runs as a second import-linter configuration, scoped to lint.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

use_cases = pytest.importorskip("importlinter.application.use_cases")
pytest.importorskip("importlinter.configuration").configure()

LINT_CONTRACTS = """
[tool.importlinter]
root_packages = ["{root}"]
exclude_type_checking_imports = false

[[tool.importlinter.contracts]]
name = "lint: no import cycle, type-only imports counted"
type = "acyclic_siblings"
ancestors = ["{root}.lint"]

[[tool.importlinter.contracts]]
name = "lint: rules ask the project; the project and its call graph never import a rule"
type = "layers"
containers = ["{root}.lint"]
layers = [
    "fix",
    "engine",
    "rules_memory",
    "rules_dataset | rules_guard | rules_loader | rules_seed",
    "held",
    "project",
    "calls",
    "model",
    "scope | catalog | findings",
]
"""


def _broken(tmp_path: Path, root: str) -> list[str]:
    """The names of the contracts the package ``root`` breaks."""
    config = tmp_path / "contracts.toml"
    config.write_text(LINT_CONTRACTS.format(root=root))
    use_cases._register_built_in_contract_types()
    report = use_cases.create_report(use_cases.read_user_options(str(config)), cache_dir=None)
    return [
        contract.name for contract, check in report.get_contracts_and_checks() if not check.kept
    ]


def test_lint_has_no_import_cycle_counting_type_only_imports(tmp_path: Path) -> None:
    assert _broken(tmp_path, "loaderdoctor") == []


def test_the_contract_catches_a_cycle_made_only_of_type_only_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "src" / "cyclepkg"
    lint = package / "lint"
    lint.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (lint / "__init__.py").write_text("")
    for name in ("fix", "engine", "rules_memory", "rules_dataset", "rules_guard"):
        (lint / f"{name}.py").write_text("")
    for name in ("rules_loader", "rules_seed", "held", "calls", "scope", "catalog", "findings"):
        (lint / f"{name}.py").write_text("")
    (lint / "project.py").write_text("from cyclepkg.lint import model\n")
    (lint / "model.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
        "    from cyclepkg.lint.project import Project\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    monkeypatch.delitem(sys.modules, "cyclepkg", raising=False)
    assert _broken(tmp_path, "cyclepkg") == [
        "lint: no import cycle, type-only imports counted",
        "lint: rules ask the project; the project and its call graph never import a rule",
    ]
