"""What leaves a renderer: text any terminal or file takes, written all or nothing.

Linux file names are bytes, and Python hands the ones that are not UTF-8 over as lone surrogates
(PEP 383, ``os.fsdecode(b"bad\\xff.jpg") == "bad\\udcff.jpg"``); exception messages quote them.
Such a ``str`` cannot be encoded to UTF-8, so a page or a terminal that receives one raises
``UnicodeEncodeError``. Every renderer's output goes through ``printable``: each undecodable byte
becomes ``\\xNN`` (the spelling ``ls --quoting-style=c`` and Python's ``backslashreplace`` use),
any other lone surrogate ``\\udNNN``, and the report says so once (``UNDECODABLE_NOTE``).
"""

from __future__ import annotations

import io
import re
from typing import IO

_SURROGATE = re.compile("[\ud800-\udfff]")
UNDECODABLE_NOTE = (
    "some names or messages held bytes that are not UTF-8 (a file name, say); "
    "they are shown as \\xNN escapes"
)


def _escape_surrogate(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # a byte that os.fsdecode could not decode
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}"


def printable(text: str) -> tuple[str, int]:
    """``text`` with every lone surrogate escaped, and how many there were."""
    return _SURROGATE.subn(_escape_surrogate, text)


def has_undecodable(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def printable_with_note(text: str, note: str) -> str:
    """``printable(text)``, with ``note`` (one line saying what was escaped) after it if any was."""
    clean, escaped = printable(text)
    if not escaped:
        return clean
    return clean + ("" if clean.endswith("\n") or not clean else "\n") + note + "\n"


class EscapingStream(io.TextIOBase):
    """A text stream for rich's ``Console(file=...)`` that escapes lone surrogates on the way out.

    A terminal (``sys.stdout``, strict UTF-8 in a UTF-8 locale) would raise on them mid-table.
    ``escaped`` counts them so the caller can say so once, after the output.
    """

    def __init__(self, target: IO[str]) -> None:
        super().__init__()
        self.target = target
        self.escaped = 0

    def write(self, text: str) -> int:
        clean, count = printable(text)
        self.escaped += count
        self.target.write(clean)
        return len(text)

    def flush(self) -> None:
        self.target.flush()

    def isatty(self) -> bool:
        return self.target.isatty()

    def fileno(self) -> int:
        return self.target.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.target, "encoding", None) or "utf-8"
