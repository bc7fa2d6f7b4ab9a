"""A pasted log, split into messages: a traceback (its frames and its error) or one line of text.

``explain`` scores messages, not lines: the seven lines of Python's bootstrapping error are one
message, and a pattern is matched against the part of a message it is about (an error's text, a
log line, a frame) so that ``collate_fn`` in a path or an attribute name is not mistaken for a
collate failure. The split is streaming and bounded: a message keeps at most ``MAX_FRAMES``
frames and ``MAX_ERROR_LINES`` lines of error text, so a 100 MB log is read in constant memory.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

MAX_LINE = 64 * 1024  # a longer line (a progress bar without newlines) is read in pieces
MAX_FRAMES = 64  # the outermost 8 and the innermost 56 of a deep traceback
MAX_ERROR_LINES = 24
MAX_TEXT = 2000  # characters of one line kept for matching

ANSI = re.compile(r"\x1b\[[\d;]*[A-Za-z]")
# What launchers and pasting put in front of each line: timestamps, `[rank0]:`, mpirun's
# `[1,0]<stderr>:`, torchx's `name/0 [1]:`, markdown quotes, pytest's `E   `.
PREFIX = re.compile(
    r"^(?:(?:\d{4}-\d\d-\d\d[T ][\d:.,]+Z?:?|\[(?:rank)?\d+(?:,\d+)?\]:?|<std(?:out|err)>:?"
    r"|[\w.-]+/\d+ \[\d+\]:|>(?= |$)|E(?=   ))[ ]?)+"
)
TRACEBACK = re.compile(
    r"^\s*(?:\^C)?(?:Original )?Traceback \(most recent call last\):\s*$"
    r'|^Stack dump(?: of "[^"]*")? \(most recent call last\):$'  # a tool's stack (forensics/paste.py)
)
ERROR = re.compile(
    r"^\s*(?:(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning|Bomb\w*"
    r"|Iteration)|_?queue\.(?:Empty|Full))(?::|\s*$)"
    r"|^\s*(?:[A-Za-z_]\w*\.)+error:"  # struct.error, socket.error
)
FRAMES = (
    re.compile(r'^\s*File "(?P<path>[^"]+)", line \d+, in (?P<func>\S+)'),  # CPython
    re.compile(r"^\s*File (?P<path>\S+\.py):\d+, in (?P<func>[\w<>]+)"),  # IPython 8
    re.compile(r"^(?P<path>(?:~|/|[A-Za-z]:\\|<ipython)\S*) in (?P<func>[\w<>]+)\("),  # IPython 7
    re.compile(r"^\s*│\s*(?P<path>\S+\.py):\d+\s+in\s+(?P<func>[\w<>]+)"),  # rich
)
BOX_ART = re.compile(r"^\s*[│╭╰─]")
CARETS = re.compile(r"^\s*[\^~]+\s*$")
IPYTHON_SOURCE = re.compile(r"^\s*(?:-+>\s*)?\d+\s")


@dataclass
class Frame:
    path: str
    func: str
    source: str = ""

    def text(self) -> str:
        return f"{self.path} :: {self.func} :: {self.source}"


@dataclass
class Message:
    """One traceback or one line: what a rule is matched against, with the lines it came from."""

    first_line: int
    frames: list[Frame] = field(default_factory=list)
    frames_dropped: int = 0
    error: list[tuple[int, str]] = field(default_factory=list)  # (line number, text)
    lines: list[tuple[int, str]] = field(default_factory=list)  # a line that is not a traceback
    header: list[tuple[int, str]] = field(default_factory=list)  # "Caught X in DataLoader ..."
    interrupted: bool = False  # the traceback starts with `^C`: the user pressed Ctrl-C
    last: tuple[int, str] = (0, "")  # the traceback's last frame or source line kept
    worker_side: bool = False  # a worker's own traceback: torch's "Original Traceback"
    dump: bool = False  # a live stack printed by a tool (py-spy, gdb, faulthandler): no error

    @property
    def error_text(self) -> str:
        return "\n".join(text for _, text in self.error)

    def texts(self) -> Iterator[tuple[int, str]]:
        """The lines a text pattern may match: the error, a caught-wrapper line, a log line."""
        yield from self.header
        yield from self.error
        yield from self.lines

    def add_frame(self, frame: Frame) -> None:
        if len(self.frames) >= MAX_FRAMES:
            del self.frames[8]
            self.frames_dropped += 1
        self.frames.append(frame)


def clean(line: str) -> str:
    line = ANSI.sub("", line.rstrip("\r\n"))[:MAX_TEXT]
    return PREFIX.sub("", line, count=1)


def parse_frame(line: str) -> Frame | None:
    for pattern in FRAMES:
        found = pattern.match(line)
        if found:
            return Frame(found["path"], found["func"])
    return None


class MessageSplitter:
    """Feeds lines in, hands finished messages out; holds one message (bounded) at a time."""

    def __init__(self, keep_line: Callable[[str], bool] = lambda line: True) -> None:
        self.keep_line = keep_line  # a plain line it rejects is dropped, not made a message
        self.current: Message | None = None
        self.in_traceback = False
        self.in_error = False
        self.blank_in_error = False
        self.base_indent = 0
        self.pending_caught: list[tuple[int, str]] = []
        self.script = ""  # the user's script, from the first `<module>` frame outside libraries
        self.command_script = ""  # or from the command line the log shows (`python x.py ...`)
        self.lines_read = 0

    def idle_skips(self, raw: str) -> bool:
        """True for a line that can start nothing and match nothing: most lines of a long log."""
        idle = self.current is None and not self.pending_caught
        return idle and not _may_be_structural(raw) and not self.keep_line(raw)

    def feed(self, number: int, raw: str) -> Iterator[Message]:
        line = clean(raw)
        if TRACEBACK.match(line) or _is_old_torch_wrapper(line):
            yield from self._start_traceback(number, line)
            return
        yield from self.flush_caught()
        if self.in_error:
            yield from self._error_line(number, line)
        elif self.in_traceback:
            yield from self._traceback_line(number, line)
        else:
            yield from self._plain_line(number, line)

    def _start_traceback(self, number: int, line: str) -> Iterator[Message]:
        carried, self.pending_caught = self.pending_caught, []
        current = self.current
        if current is not None and CAUGHT.search(current.error_text):
            # torch's wrapper and the worker's own traceback are one message: the worker's error.
            carried += current.error
            self.current = None
        yield from self.flush()
        self.current = Message(number, header=carried)
        if not TRACEBACK.match(line):
            self.current.header.append((number, line.strip()))
        opening = line.lstrip()
        self.current.interrupted = opening.startswith("^C")
        self.current.dump = opening.startswith("Stack dump")
        self.current.worker_side = bool(carried) or opening.startswith("Original Traceback")
        self.in_traceback = True
        self.base_indent = _indent(line)

    def _traceback_line(self, number: int, line: str) -> Iterator[Message]:
        assert self.current is not None
        frame = parse_frame(line)
        if frame:
            self.current.add_frame(frame)
            self.current.last = (number, line.strip())
            self._note_script(frame)
        elif ERROR.match(line) and _indent(line) <= self.base_indent:
            self._start_error(number, line)
        elif CARETS.match(line) or BOX_ART.match(line) or not line.strip():
            return
        elif _indent(line) > self.base_indent or IPYTHON_SOURCE.match(line):
            self._add_source(line)
            self.current.last = (number, line.strip())
        else:  # an unindented line that is no error: the traceback was cut off
            yield from self.flush()
            yield from self._plain_line(number, line)

    def _note_script(self, frame: Frame) -> None:
        if self.script or frame.func != "<module>" or LIBRARY_PATH.search(frame.path):
            return
        self.script = re.split(r"[\\/]", frame.path)[-1]

    def _add_source(self, line: str) -> None:
        assert self.current is not None
        if self.current.frames and not self.current.frames[-1].source:
            self.current.frames[-1].source = line.strip()

    def _start_error(self, number: int, line: str) -> None:
        assert self.current is not None
        self.current.error.append((number, line.strip()))
        self.in_error = True
        self.blank_in_error = False

    def _error_line(self, number: int, line: str) -> Iterator[Message]:
        assert self.current is not None
        if not line.strip():
            self.blank_in_error = True
            return
        indented = _indent(line) > self.base_indent
        continues = indented or (not self.blank_in_error and not ERROR.match(line))
        full = len(self.current.error) >= MAX_ERROR_LINES
        if full or parse_frame(line) or BOX_ART.match(line) or not continues:
            yield from self.flush()
            yield from self._plain_line(number, line)
            return
        self.current.error.append((number, line.strip()))

    def _plain_line(self, number: int, line: str) -> Iterator[Message]:
        if not line.strip() or BOX_ART.match(line) or CARETS.match(line):
            return
        frame = parse_frame(line) if "File" in line or " in " in line else None
        if not frame and not self.command_script:
            command = COMMAND.search(line)
            if command:
                self.command_script = re.split(r"[\\/]", command.group(1))[-1]
        if frame:  # a traceback pasted without its first line
            self.current = Message(number, last=(number, line.strip()))
            self.in_traceback = True
            self.base_indent = max(0, _indent(line) - 2)
            self.current.add_frame(frame)
            self._note_script(frame)
            return
        if ERROR.match(line):
            if CAUGHT.search(line):  # torch's wrapper: the worker's traceback may follow
                self.pending_caught.append((number, line.strip()))
                return
            self.current = Message(number)
            self.base_indent = _indent(line)
            self._start_error(number, line)
            return
        if self.keep_line(line):
            yield Message(number, lines=[(number, line.strip())])

    def flush_caught(self) -> Iterator[Message]:
        if self.pending_caught:
            caught, self.pending_caught = self.pending_caught, []
            yield Message(caught[0][0], error=caught)

    def flush(self) -> Iterator[Message]:
        if self.current is not None:
            yield self.current
        self.current = None
        self.in_traceback = self.in_error = False
        self.base_indent = 0

    def close(self) -> Iterator[Message]:
        yield from self.flush_caught()
        yield from self.flush()


COMMAND = re.compile(
    r"(?:^|[\s$!>])(?:python[\d.]*|torchrun|accelerate launch|deepspeed)\s[^\n]*?"
    r"([\w./\\:-]+\.py)\b"
)
LIBRARY_PATH = re.compile(
    r"site-packages|dist-packages|[\\/]lib[\\/]python\d|[\\/]Lib[\\/]|^<|runpy\.py|multiprocessing"
)


def _may_be_structural(raw: str) -> bool:
    """False when ``raw`` is surely no traceback header, frame or error line (cheap checks)."""
    return (
        "Error" in raw
        or "error" in raw
        or "Exception" in raw
        or "Exit" in raw
        or "Interrupt" in raw
        or "Warning" in raw
        or "Bomb" in raw
        or "File" in raw
        or "Traceback" in raw
        or " in " in raw
        or ".py" in raw
        or "│" in raw
        or "Stack dump" in raw
    )


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


CAUGHT = re.compile(r"Caught \w+ in DataLoader worker process \d+")


def _is_old_torch_wrapper(line: str) -> bool:
    # torch before 1.2 put the worker's traceback in the message: `RuntimeError: Traceback (...`
    return bool(ERROR.match(line)) and line.rstrip().endswith("Traceback (most recent call last):")


def split_messages(lines: Iterable[str], splitter: MessageSplitter) -> Iterator[Message]:
    """Every message of the log, in order; ``splitter`` keeps the count of lines and the script."""
    number = 0
    for number, line in enumerate(lines, start=1):
        if not splitter.idle_skips(line):  # checked here: no generator per skipped line
            yield from splitter.feed(number, line)
    splitter.lines_read = number
    yield from splitter.close()


def read_log_lines(stream: BinaryIO) -> Iterator[str]:
    """Decode a log as it streams in: UTF-16 when it starts with a byte-order mark (PowerShell's
    `>` writes UTF-16), UTF-8 otherwise; undecodable bytes become U+FFFD, never an error."""
    start = stream.read(4)
    if start.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    else:
        encoding = "utf-8-sig"
    decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
    pending = decoder.decode(start)
    while True:
        chunk = stream.read(MAX_LINE)
        pending += decoder.decode(chunk, final=not chunk)
        parts = pending.splitlines(keepends=True)
        ends_open = bool(parts) and not parts[-1].endswith(("\n", "\r"))
        keep = parts.pop() if ends_open and chunk else ""
        if len(keep) > MAX_LINE:  # one endless line: hand it over in pieces
            parts.append(keep)
            keep = ""
        yield from parts
        pending = keep
        if not chunk:
            if pending:
                yield pending
            return
