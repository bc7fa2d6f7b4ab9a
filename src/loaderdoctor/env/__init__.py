"""``loaderdoctor env``: the machine (and optionally a dataset) against a catalog of checks.

``run_env_checks`` measures; ``CATALOG`` is every check there is, one data row each; the result
is an ``EnvReport`` that ``report.env`` renders. No torch import unless a target is given.
"""

from __future__ import annotations

from loaderdoctor.env.catalog import CATALOG, EnvCheckSpec
from loaderdoctor.env.core import CHECKS, run_env_checks
from loaderdoctor.env.findings import EnvCheck, EnvReport

__all__ = ["CATALOG", "CHECKS", "EnvCheck", "EnvCheckSpec", "EnvReport", "run_env_checks"]
