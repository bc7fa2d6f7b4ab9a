"""From evidence to verdict: the cause catalog, the rules, and the Diagnosis they produce."""

from __future__ import annotations

from loaderdoctor.forensics.catalog import CAUSES, Cause, get_cause
from loaderdoctor.forensics.evidence import Diagnosis, Evidence
from loaderdoctor.forensics.rules import RULES, diagnose

__all__ = ["CAUSES", "RULES", "Cause", "Diagnosis", "Evidence", "diagnose", "get_cause"]
