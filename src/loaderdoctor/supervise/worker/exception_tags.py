"""Facts (index, stage, worker) tagged onto a worker's exception, and read back in the parent.

The tag is an exception note, so it travels inside the traceback text torch ships to the main
process.
"""

from __future__ import annotations

import json
import traceback
from typing import Any

from loaderdoctor import boundary
from loaderdoctor.supervise.exception_facts import exception_facts

MARKER = boundary.TAG_MARKER


def tag_exception(error: BaseException, worker: int | None, **facts: Any) -> None:
    """Attach the facts (index, stage, ``worker``: its id, None in-process) as a note; the note
    travels in torch's traceback."""
    facts["worker"] = worker
    facts.update(exception_facts(error))
    try:
        note = MARKER + json.dumps(facts, default=repr)
    except (TypeError, ValueError):  # pragma: no cover - default=repr handles every object
        note = MARKER + json.dumps({k: repr(v) for k, v in facts.items()})
    if any(n.startswith(MARKER) for n in getattr(error, "__notes__", ())):
        return  # the innermost wrapper knows best
    error.add_note(note)


def record_exit(stack_log: Any, exiting: SystemExit) -> None:
    """A ``sys.exit()`` in the Dataset ends the worker with no exception torch could ship (its
    worker loop catches ``Exception`` only): leave its traceback, whose innermost frame called
    exit, in the worker's stack log (``boundary.EXIT_HEADER``) for the parent's verdict."""
    if stack_log is None:
        return
    try:
        stack_log.write(f"{boundary.EXIT_HEADER}\n{''.join(traceback.format_exception(exiting))}")
        stack_log.flush()
    except (OSError, ValueError):
        pass


def read_tags(text: str) -> dict[str, Any]:
    """The facts of the last tag in a formatted traceback (``{}`` when there is none)."""
    for line in reversed(text.splitlines()):
        if line.startswith(MARKER):
            try:
                facts = json.loads(line[len(MARKER) :])
            except ValueError:
                return {}
            return facts if isinstance(facts, dict) else {}
    return {}


def strip_tags(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith(MARKER))
