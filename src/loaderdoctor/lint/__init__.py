"""Static checks of training scripts for DataLoader multiprocessing pitfalls (no torch import).

``check_source`` lints one module's text; ``check_paths`` lints files and folders (``.py`` and
the code cells of ``.ipynb``); ``RULES`` is the catalog every code comes from.
"""

from __future__ import annotations

from loaderdoctor.lint.catalog import RULES, Rule
from loaderdoctor.lint.engine import check_paths, check_source
from loaderdoctor.lint.findings import FixRecord, LintFinding, LintReport

__all__ = [
    "RULES",
    "FixRecord",
    "LintFinding",
    "LintReport",
    "Rule",
    "check_paths",
    "check_source",
]
