"""Renderers for ``Explanation`` (``loaderdoctor explain``): plain text and JSON."""

from __future__ import annotations

import dataclasses
import json

from loaderdoctor.forensics.catalog import page_command
from loaderdoctor.forensics.explain import DECIDED_AT, CauseGuess, Explanation
from loaderdoctor.report.output import UNDECODABLE_NOTE, printable_with_note

MAX_CAUSES = 4
LINES_SHOWN = 3
COMMANDS = {
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
    "systeminfo",
}


def format_text(explanation: Explanation) -> str:
    return printable_with_note(_text(explanation) + "\n", f"note: {UNDECODABLE_NOTE}")


def _text(explanation: Explanation) -> str:
    if not explanation.causes:
        return "\n".join(_nothing(explanation) + _partial(explanation))
    lines = _ambiguity(explanation)
    if not lines:
        lines = ["loaderdoctor explain: most likely causes, from the message alone"]
    if explanation.partial is not None:
        lines[0] += " (partial: the log is cut short)"
    for rank, guess in enumerate(explanation.causes[:MAX_CAUSES], start=1):
        lines.extend(_cause(rank, guess))
    others = explanation.causes[MAX_CAUSES:]
    if others:
        lines.append(
            "also possible: " + ", ".join(f"{g.cause} ({g.likelihood:.0%})" for g in others)
        )
    lines.extend(
        f"also in the log, not a DataLoader failure: {other.title} (line {other.line_number})"
        for other in explanation.elsewhere
    )
    return "\n".join(lines + _partial(explanation))


def _nothing(explanation: Explanation) -> list[str]:
    if explanation.elsewhere:
        lines = []
        for other in explanation.elsewhere:
            lines.append(f"loaderdoctor explain: not a DataLoader failure: {other.title}.")
            lines.append(f"  line {other.line_number}: {other.line}")
            lines.append(f"  {other.note}")
        return lines
    count = explanation.lines_read
    return [
        f"loaderdoctor explain: no known DataLoader failure in "
        f"{'this line' if count == 1 else f'these {count} lines'}.",
        "  Rerun the command under `loaderdoctor run -- COMMAND` to catch the next failure.",
    ]


def _partial(explanation: Explanation) -> list[str]:
    partial = explanation.partial
    if partial is None:
        return []
    return [
        f"partial: the log stops inside a traceback at line {partial.line_number}, before its "
        "error line: the answer above is what the lines before it support.",
        f"  to settle it: {partial.settle}",
    ]


def _ambiguity(explanation: Explanation) -> list[str]:
    ties = explanation.ambiguous
    if not ties:
        return []
    if explanation.undecided:
        return _undecided(explanation)
    lines = [
        f"loaderdoctor explain: ambiguous: these {len(ties)} causes fit the log equally well; "
        "here is how to tell them apart:"
    ]
    lines.extend(f"  {tie.cause}: `{tie.command}` shows {tie.sign}" for tie in ties)
    lines.append(
        f"  decide first with: $ {explanation.deciding_check}   "
        f"({ties[0].cause} is the most common cause of this message in public reports)"
    )
    lines.append("ranked, from the message alone:")
    return lines


def _undecided(explanation: Explanation) -> list[str]:
    likelihood = {guess.cause: guess.likelihood for guess in explanation.causes}
    ties = explanation.ambiguous
    lines = [
        f"loaderdoctor explain: undecided: the log supports {len(ties)} causes, none at "
        f"{DECIDED_AT:.0%} or more; how likely each is from the message alone, and how to tell:"
    ]
    lines.extend(
        f"  {tie.cause} ({likelihood[tie.cause]:.0%}): `{tie.command}` shows {tie.sign}"
        for tie in ties
    )
    lines.append(f"  decide first with: $ {explanation.deciding_check}   (the most likely first)")
    lines.append("ranked, from the message alone:")
    return lines


def _cause(rank: int, guess: CauseGuess) -> list[str]:
    lines = [f"{rank}. {guess.cause} ({guess.likelihood:.0%}): {guess.title}"]
    shown = guess.lines[:LINES_SHOWN]
    for index, match in enumerate(shown):
        if index == 0 or shown[index - 1].line_number != match.line_number:
            lines.append(f"   line {match.line_number}: {match.line}")
        lines.append(f"     {match.note}")  # two rows on one line: the line once, both notes
    hidden = guess.lines_matched - len(shown)
    if hidden > 0:
        lines.append(f"   (and {hidden} more matching lines)")
    lines.append("   next checks:")
    lines.extend(
        f"     $ {check}" if check.split(" ", 1)[0] in COMMANDS else f"     - {check}"
        for check in guess.checks
    )
    if guess.docs:
        lines.append(f"   more: {page_command(guess.cause)}")
    return lines


def format_json(explanation: Explanation) -> str:
    return json.dumps(dataclasses.asdict(explanation), indent=2) + "\n"
