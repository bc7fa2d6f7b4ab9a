"""Renderers for ``Explanation`` (``loaderdoctor explain``): plain text and JSON."""

from __future__ import annotations

import dataclasses
import json

from loaderdoctor.forensics.symptoms import Explanation
from loaderdoctor.report.output import UNDECODABLE_NOTE, printable_with_note

MAX_CAUSES = 4


def format_text(explanation: Explanation) -> str:
    return printable_with_note(_text(explanation) + "\n", f"note: {UNDECODABLE_NOTE}")


def _text(explanation: Explanation) -> str:
    if not explanation.causes:
        return (
            "loaderdoctor explain: no known DataLoader failure in this text.\n"
            "  Rerun the command under `loaderdoctor run -- COMMAND` to catch the next failure."
        )
    lines = ["loaderdoctor explain: most likely causes, from the message alone"]
    for rank, guess in enumerate(explanation.causes[:MAX_CAUSES], start=1):
        lines.append(f"{rank}. {guess.cause} ({guess.likelihood:.0%}): {guess.title}")
        for index in guess.matches[:3]:
            match = explanation.matches[index]
            lines.append(f"   line {match.line_number}: {match.line}")
            lines.append(f"     {match.note}")
        lines.append("   next checks:")
        lines.extend(
            f"     $ {check}" if _is_command(check) else f"     - {check}" for check in guess.checks
        )
        if guess.docs:
            lines.append(f"   more: {guess.docs}")
    others = explanation.causes[MAX_CAUSES:]
    if others:
        lines.append(
            "also possible: " + ", ".join(f"{g.cause} ({g.likelihood:.0%})" for g in others)
        )
    return "\n".join(lines)


def _is_command(check: str) -> bool:
    return check.split(" ", 1)[0] in {
        "dmesg",
        "cat",
        "free",
        "df",
        "docker",
        "python",
        "ulimit",
        "ls",
        "py-spy",
        "loaderdoctor",
        "grep",
    }


def format_json(explanation: Explanation) -> str:
    return json.dumps(dataclasses.asdict(explanation), indent=2) + "\n"
