"""Plain-text rendering of a Diagnosis. The text lives in ``forensics.verdict_text`` because the
supervised loader puts it into the exceptions it raises (and the core never imports renderers).
"""

from __future__ import annotations

from loaderdoctor.forensics.verdict_text import (
    MAX_STACK_LINES,
    crashing_thread_first,
    format_death_headline,
    format_subject,
    format_verdict,
)

__all__ = [
    "MAX_STACK_LINES",
    "crashing_thread_first",
    "format_death_headline",
    "format_subject",
    "format_verdict",
]
