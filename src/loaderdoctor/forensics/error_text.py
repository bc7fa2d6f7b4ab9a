"""The error's own words in a traceback: its messages, without the source lines it quotes.

A traceback quotes a line of source under each frame, comments included. Hugging Face
``datasets`` decodes an image with ``image.load()  # to avoid "Too many open files" errors``: a
truncated JPEG's traceback holds those words, and a cue matched against them blamed the open-file
limit. Cues are matched against what this module keeps: the error lines (the exception's and those
of the exceptions it was chained to) and any prose around them, never a frame or its source.
"""

from __future__ import annotations

import re

# `  File "/path.py", line 12, in load` (also a torch worker's "Original Traceback" inside a
# message, and a frame of an exception group, behind its `|` margin)
_FRAME = re.compile(r'^[\s|+-]*File "[^"]*", line \d+')


def error_text(text: str) -> str:
    """``text`` without the frames of its tracebacks and the source lines quoted under them."""
    kept: list[str] = []
    in_frame = False
    for line in text.splitlines():
        if _FRAME.match(line):
            in_frame = True
            continue
        # the quoted source and its caret line are indented under their frame
        if in_frame and line[:1].isspace():
            continue
        in_frame = False
        kept.append(line)
    return "\n".join(kept)


__all__ = ["error_text"]
