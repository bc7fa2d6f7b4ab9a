"""Facts (index, stage, worker) tagged onto a worker's exception, and read back in the parent.

The tag is an exception note, so it travels inside the traceback text torch ships to the main
process.
"""

from __future__ import annotations

import json
from typing import Any

from loaderdoctor.supervise.worker_state import STATE

MARKER = "[loaderdoctor] "


def tag_exception(error: BaseException, **facts: Any) -> None:
    """Attach the facts (index, stage, worker) as a note; the note travels in torch's traceback."""
    facts["worker"] = STATE.worker_id
    facts.update(exception_facts(error))
    try:
        note = MARKER + json.dumps(facts, default=repr)
    except (TypeError, ValueError):  # pragma: no cover - default=repr handles every object
        note = MARKER + json.dumps({k: repr(v) for k, v in facts.items()})
    if any(n.startswith(MARKER) for n in getattr(error, "__notes__", ())):
        return  # the innermost wrapper knows best
    error.add_note(note)


def exception_facts(error: BaseException) -> dict[str, Any]:
    """What an exception says about itself beyond its message: the root of a chain (MONAI raises
    ``RuntimeError`` from ``OSError: image file is truncated``), and the record a WebDataset
    ``DecodingError`` names by ``key`` and ``url`` (its message is empty)."""
    facts: dict[str, Any] = {}
    chain = [error]
    while len(chain) < 32:
        cause = chain[-1].__cause__
        if cause is None and not chain[-1].__suppress_context__:
            cause = chain[-1].__context__
        if cause is None or cause in chain:
            break
        chain.append(cause)
    if len(chain) > 1:
        root = chain[-1]
        text = str(root).strip().splitlines()
        facts["root"] = f"{type(root).__name__}: {text[0]}" if text else type(root).__name__
    for link in chain:
        key, url = getattr(link, "key", None), getattr(link, "url", None)
        if isinstance(key, str) and isinstance(url, str):
            facts["record_key"], facts["record_url"] = key, url
            break
    return facts


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
