"""The terminal every text renderer prints to: rich, fed only text the stream can take.

User data (file names, exception messages, a dataset's ``repr``) goes into rich as ``Text`` or
``escape``d, never as markup: ``[bold]`` in a file name is a file name. Lone surrogates (bytes
that are not UTF-8) are escaped on the way out and a note says so (see ``report.output``).
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, TypeVar, cast

from loaderdoctor.report.output import UNDECODABLE_NOTE, EscapingStream

if TYPE_CHECKING:
    from rich.console import Console

Report = TypeVar("Report")
# The width a table may take where output is not a terminal (a log, ``| tee``): its natural width,
# file names whole, since nothing folds a log's lines but its reader's viewer.
LOG_WIDTH = 1000


def width_for(file: IO[str] | None) -> int | None:
    """``None`` (the terminal's own width) on a terminal, ``LOG_WIDTH`` elsewhere: for renderers
    whose tables hold file names and paths (and no panel or rule that would fill the width)."""
    stream = file if file is not None else sys.stdout
    return None if stream.isatty() else LOG_WIDTH


@contextlib.contextmanager
def terminal(
    file: IO[str] | None = None,
    *,
    width: int | None = None,
    plain: bool = False,
    soft_wrap: bool = False,
) -> Iterator[Console]:
    """A rich console on ``file`` (stdout by default); ``plain``: no colour, not a terminal;
    ``soft_wrap``: long lines of text are not folded at the width (tables still are).

    Output that is not a terminal (``| tee``, a log file, nohup) is never folded: a log is read
    by copying file names and paths out of it, and there is no screen edge to fold at.
    """
    from rich.console import Console
    from rich.text import Text

    stream = EscapingStream(file if file is not None else sys.stdout)
    if not plain and not stream.isatty():
        soft_wrap = True
    out = cast("IO[str]", stream)  # a TextIOBase: what rich calls on a file, it has
    if plain:
        console = Console(
            file=out,
            width=width,
            color_system=None,
            force_terminal=False,
            highlight=False,
            emoji=False,
            soft_wrap=soft_wrap,
        )
    else:
        console = Console(file=out, width=width, highlight=False, emoji=False, soft_wrap=soft_wrap)
    yield console
    if stream.escaped:
        console.print(Text(f"note: {UNDECODABLE_NOTE}", style="dim"), soft_wrap=True)


def render_plain(
    printer: Callable[[Report, Console], None],
    report: Report,
    width: int = 100,
    *,
    strip: bool = True,
    soft_wrap: bool = False,
) -> str:
    """What ``printer`` prints, without colour at a fixed width: what tests and logs compare."""
    buffer = io.StringIO()
    with terminal(buffer, width=width, plain=True, soft_wrap=soft_wrap) as console:
        printer(report, console)
    text = buffer.getvalue()
    if not strip:
        return text
    return "".join(line.rstrip() + "\n" for line in text.splitlines())
