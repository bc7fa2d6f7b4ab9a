"""A pasted log, rebuilt into the lines its programs printed, before any rule reads it.

Terminals, launchers and issue trackers reshape what a program printed: a word wrapped at the
terminal's edge ("Segment" / "ation fault"), torch's ``Caught ValueError in DataLoader worker
process 0`` split in two with another process's lines between, a traceback pasted as one escaped
string (``\\r\\n``), quotes turned typographic, a Ctrl-C echoed as ``^C`` on a line of its own,
two spawned children printing the same traceback line by line. Stacks come from tools as well as
from Python: py-spy's ``dump``, gdb's ``py-bt``, faulthandler, each innermost frame first. And a
``kubectl describe`` prints a container's end as a record over several lines.

``rebuild`` undoes each of these, streaming, and hands on ``Line``s: the text as the program
printed it, the number of the paste's line it came from (so an answer points at the user's own
line), and the process it came from where a launcher's prefix says (``[rank1]:``, mpirun's
``[1,0]<stderr>:``, Ray's ``(pid=123)``), so that interleaved processes are read apart. A stack
from a tool becomes a ``Stack dump`` in Python's order (outermost first), which
forensics/log_messages.py reads as a traceback with no error: a live stack, not a crash.

Everything here is bounded: one held line, a split head and the ``HOLD_FOR`` lines after it, one
block of at most ``MAX_BLOCK`` frames, one record of a few fields.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import NamedTuple

MAX_BLOCK = 256  # lines of one tool's stack held to be reversed; the rest pass through as text
HOLD_FOR = 3  # lines a split head waits for its ": ..." continuation
DUMP_HEADER = "Stack dump (most recent call last):"

# A launcher's per-process prefix, as forensics/log_messages.py strips it; group 1 names the
# process. Timestamps are no process and are left to the splitter.
PROCESS = re.compile(
    r"^\s*(?:\[(?:rank)?(\d+(?:,\d+)?)\]:?(?:<std(?:out|err)>:?)?|\((?:[\w.]+ )?pid=(\d+)"
    r"(?:, ip=[\d.]+)?\)|([\w.-]+/\d+) \[\d+\]:)"
)
ESCAPED_NEWLINE = re.compile(r"(?<!\\)(?:\\r\\n|\\n)")  # not an escaped backslash's n
# A traceback pasted as a string literal: Python's own lines joined by escaped newlines. (A
# Windows path holds `\n` too: `C:\new\nets`, so the escape must sit where Python's lines meet.)
ESCAPED_TRACEBACK = re.compile(r'Traceback \(most recent call last\):\\r?\\n|\\r?\\n {2}File "')
TYPOGRAPHIC = str.maketrans({"“": '"', "”": '"', "„": '"', "‘": "'", "’": "'", "′": "'"})
TRACEBACK_LINE = re.compile(r"^\s*Traceback \(most recent call last\):\s*$")
CTRL_C = re.compile(r"\^C\s*$")  # the echo of Ctrl-C at a line's end
# A head that lost its tail to a line break: an exception's type alone, or torch's wrapper
# without its worker's number. Its continuation starts with ": ".
SPLIT_HEAD = re.compile(
    r"^\s*(?:[A-Za-z_][\w.]*(?:Error|Exception)|.*\bCaught \w+ in DataLoader worker process)\s*$"
)
WRAPPED_WORD = re.compile(r"([A-Za-z]{2,}) {2,}([a-z]{2,})")
TAIL_WORD = re.compile(r"([A-Za-z]{2,})$")
HEAD_WORD = re.compile(r"^([a-z]{2,})")

# Tools' stack lines, innermost frame first.
PY_SPY_THREAD = re.compile(r'^\s*Thread (?:0x)?[\da-fA-F]+ \((?:idle|active)[^)]*\): "([^"]*)"')
PY_SPY_FRAME = re.compile(r"^\s+(?P<func>[\w<>.]+) \((?P<path>[^()]+?):(?P<line>\d+)\)\s*$")
FIRST_CALL = re.compile(r"^\s*(?:Current thread|Thread) 0x[\da-fA-F]+ \(most recent call first\):")
GDB_FIRST = re.compile(r"^\s*Traceback \(most recent call first\):\s*$")
FAULTHANDLER_FRAME = re.compile(
    r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+),? in (?P<func>\S+)'
)
GDB_FRAME = re.compile(
    r"^#\d+ Frame 0x[\da-f]+, for file (?P<path>[^,]+), line (?P<line>\d+), in (?P<func>[\w<>]+)"
)
BUILTIN = re.compile(r"^\s*<built-in (?:method|function) ")
# `kubectl describe pod`: a container's end, one field a line.
K8S_STATE = re.compile(r"^\s*(?:Last )?State:\s+Terminated\s*$")
K8S_FIELD = re.compile(r"^\s+([A-Z][\w ]*):\s+(.*?)\s*$")
K8S_KEPT = ("Reason", "Exit Code", "Signal", "Message")


class Line(NamedTuple):  # a tuple: one is made per line of a 100 MB log
    number: int  # the paste's line this text starts on (1-based)
    text: str
    process: str = ""  # the launcher's name for the process that printed it ("" if none)


def words_from(patterns: Iterable[str]) -> frozenset[str]:
    """The long words of the rules' patterns: a word wrapped in two is rejoined only into one."""
    return frozenset(
        word.lower() for pattern in patterns for word in re.findall(r"[A-Za-z]{5,}", pattern)
    )


def rebuild(lines: Iterable[str], words: frozenset[str]) -> Iterator[Line]:
    """The paste's lines as their programs printed them (see the module's docstring)."""
    return PasteReader(words).read(lines)


class PasteReader:
    """Rebuilds one paste, streaming; ``lines_read`` counts the paste's own lines."""

    def __init__(self, words: frozenset[str]) -> None:
        self.words = words  # see words_from
        self.lines_read = 0
        self.held: Line | None = None  # the last line, until the next shows it is not split
        self.split_head: Line | None = None  # a head waiting for its ": ..." continuation
        self.between: list[Line] = []  # the lines after it, until the continuation comes
        self.block: _Block | None = None  # a tool's stack being read
        self.record: list[tuple[int, str]] = []  # a kubectl record being read
        self.record_indent = 0  # its fields sit deeper than its State line

    def read(self, lines: Iterable[str]) -> Iterator[Line]:
        for number, raw in enumerate(lines, start=1):
            self.lines_read = number
            yield from self.feed(number, raw.rstrip("\r\n"))
        yield from self.close()

    def passes(self, text: str) -> bool:
        """Whether ``text`` (no line end) would leave as it came, alone, from no named process,
        given a line with no word of a traceback or an error in it (no "Error", "Traceback",
        "File", " in "...: a reader of messages skips such a line unless a rule's word is in
        it). Most lines of a long log are such lines: the checks run once a line, cheapest
        first. A word a terminal wrapped on such a line is looked for only where it can matter
        alone: in a signal's "fault"; elsewhere the line's other words keep it."""
        return (
            self.held is None
            and self.block is None
            and self.split_head is None
            and not self.record
            and text.isascii()
            and not text[-1:].isalpha()
            and text[:1] not in " \t[("
            and "/" not in text[:40]
            and "Thread" not in text
            and "Terminated" not in text
            and "call first" not in text
            and "fault" not in text
            and not text.endswith("^C")
        )

    def feed(self, number: int, text: str) -> Iterator[Line]:
        found = PROCESS.match(text) if text[:1] in " [(" or "/" in text[:40] else None
        process = _process(found) if found else ""
        if not text.isascii():
            text = text.translate(TYPOGRAPHIC)
        if "\\n" in text and ESCAPED_TRACEBACK.search(text):
            quoted = text.strip()
            if quoted[:1] in "'\"" and quoted[-1:] == quoted[:1]:
                quoted = quoted[1:-1]
            for part in ESCAPED_NEWLINE.split(quoted):
                yield from self._line(Line(number, _unescape(part), process))
            return
        yield from self._line(Line(number, text, process))

    def close(self) -> Iterator[Line]:
        yield from self._end_block()
        yield from self._end_record()
        yield from self._release_split()
        if self.held is not None:
            yield self.held
            self.held = None

    # One line at a time: stacks and records first, then splits and wraps.
    def _line(self, line: Line) -> Iterator[Line]:
        if self.block is not None:
            if self.block.takes(line):
                return
            yield from self._end_block()
        if self.record:
            field = K8S_FIELD.match(line.text)
            if field and _indent(line.text) > self.record_indent:
                if field[1] in K8S_KEPT and len(self.record) <= len(K8S_KEPT):
                    self.record.append((line.number, f"{field[1]} {field[2]}"))
                return
            yield from self._end_record()
        block = _Block.start(line) if _may_start_stack(line.text) else None
        if block is not None:
            yield from self._flush_held()
            self.block = block
            return
        if "Terminated" in line.text and K8S_STATE.match(line.text):
            yield from self._flush_held()
            self.record = [(line.number, "")]
            self.record_indent = _indent(line.text)
            return
        yield from self._text(line)

    def _text(self, line: Line) -> Iterator[Line]:
        if "  " in line.text:
            line = Line(line.number, WRAPPED_WORD.sub(self._rejoin, line.text), line.process)
        head = self.split_head
        if head is None:
            yield from self._plain(line)
            return
        stripped = line.text.lstrip()
        if stripped.startswith(":") and line.process == head.process:
            # The head's own tail: the lines between were another process's, printed first.
            glue = " " if head.text.rstrip().endswith("process") else ": "
            joined = Line(
                head.number, head.text.rstrip() + glue + stripped[1:].lstrip(), head.process
            )
            self.split_head, between, self.between = None, self.between, []
            for other in between:
                yield from self._plain(other)
            yield from self._plain(joined)
            return
        self.between.append(line)
        if len(self.between) > HOLD_FOR or TRACEBACK_LINE.match(line.text):
            yield from self._release_split()

    def _plain(self, line: Line) -> Iterator[Line]:
        text = line.text
        held = self.held
        if held is not None:
            joined = self._joined(held, line)
            if joined is not None:
                self.held = joined
                return
            if held.text.rstrip().endswith("^C") and TRACEBACK_LINE.match(text):
                # Ctrl-C echoed on a line of its own: the traceback after it is the interrupt's.
                before = CTRL_C.sub("", held.text)
                if before.strip():
                    yield Line(held.number, before, held.process)
                self.held = Line(line.number, "^C" + text.lstrip(), line.process)
                return
            if _same_stack_line(held.text, text):
                return  # two processes printing one traceback in step: the line once
            yield held
            self.held = None
        if ("Caught" in text or "Error" in text or "Exception" in text) and SPLIT_HEAD.match(text):
            self.split_head = line
            return
        if _may_continue(text):
            self.held = line
        else:
            yield line

    def _joined(self, held: Line, line: Line) -> Line | None:
        """``held`` and ``line`` as one line, when a terminal wrapped one word over the two."""
        if not line.text[:1].islower() or not held.text[-1:].isalpha():
            return None
        if held.process != line.process:
            return None
        tail, head = TAIL_WORD.search(held.text), HEAD_WORD.match(line.text)
        if tail is None or head is None or (tail[1] + head[1]).lower() not in self.words:
            return None
        return Line(held.number, held.text + line.text, held.process)

    def _rejoin(self, found: re.Match[str]) -> str:
        joined = found[1] + found[2]
        return joined if joined.lower() in self.words else found[0]

    def _flush_held(self) -> Iterator[Line]:
        if self.held is not None:
            yield self.held
            self.held = None

    def _release_split(self) -> Iterator[Line]:
        """No continuation came: the head and the lines after it, in their order."""
        head, between = self.split_head, self.between
        self.split_head, self.between = None, []
        if head is not None:
            yield from self._flush_held()
            yield head
            for line in between:
                yield from self._text(line)

    def _end_block(self) -> Iterator[Line]:
        block, self.block = self.block, None
        if block is not None:
            yield from block.lines()

    def _end_record(self) -> Iterator[Line]:
        record, self.record = self.record, []
        if record:
            fields = ", ".join(text for _, text in record[1:])
            yield Line(record[0][0], f"container terminated ({fields})")


class _Block:
    """One tool's stack, innermost frame first, read until a line that is not part of it."""

    def __init__(self, number: int, kind: str, thread: str) -> None:
        self.number = number
        self.kind = kind  # "py-spy", "gdb" (py-bt's Frame lines), "first" (File lines)
        self.thread = thread
        self.frames: list[tuple[int, str, str, str]] = []  # (number, path, line, func)
        self.sources: dict[int, str] = {}  # frame index -> its source line
        self.dropped = 0

    @classmethod
    def start(cls, line: Line) -> _Block | None:
        text = line.text
        found = PY_SPY_THREAD.match(text)
        if found:
            return cls(line.number, "py-spy", found[1])
        if FIRST_CALL.match(text) or GDB_FIRST.match(text):
            return cls(line.number, "first", "")
        frame = GDB_FRAME.match(text)
        if frame:
            block = cls(line.number, "gdb", "")
            block.takes(line)
            return block
        return None

    def takes(self, line: Line) -> bool:
        """Whether ``line`` belongs to this stack (then it is kept, or dropped past the cap)."""
        text = line.text
        pattern = {"py-spy": PY_SPY_FRAME, "gdb": GDB_FRAME, "first": FAULTHANDLER_FRAME}
        found = pattern[self.kind].match(text)
        if found:
            if len(self.frames) >= MAX_BLOCK:
                self.dropped += 1
                return True
            self.frames.append((line.number, found["path"], found["line"], found["func"]))
            return True
        if BUILTIN.match(text) and self.kind != "py-spy":
            return True
        indented = text[:1] in " \t" and text.strip()
        if indented and self.frames and self.kind != "py-spy":
            self.sources.setdefault(len(self.frames) - 1, text.strip())
            return True
        # py-spy's `--locals` sections sit deeper than its frames.
        return bool(self.kind == "py-spy" and text.startswith("        ") and self.frames)

    def lines(self) -> Iterator[Line]:
        header = (
            DUMP_HEADER
            if not self.thread
            else f'Stack dump of "{self.thread}" ' + ("(most recent call last):")
        )
        yield Line(self.number, header)
        for index in range(len(self.frames) - 1, -1, -1):
            number, path, line_number, func = self.frames[index]
            yield Line(number, f'  File "{path}", line {line_number}, in {func}')
            source = self.sources.get(index)
            if source:
                yield Line(number, f"    {source}")


def _process(found: re.Match[str]) -> str:
    return found.group(1) or found.group(2) or found.group(3) or ""


def _may_continue(text: str) -> bool:
    """Whether the next line may belong to this one: a wrapped word's first half, a Ctrl-C's
    echo, or a traceback's line a second process may print again."""
    return text[-1:].isalpha() or text.endswith("^C") or text[:1] in " \t" or "Traceback" in text


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip())


def _may_start_stack(text: str) -> bool:
    return text.startswith("#") or "Thread" in text or "call first" in text


def _unescape(part: str) -> str:
    return part.replace("\\\\", "\\").replace("\\'", "'").replace('\\"', '"')


def _same_stack_line(before: str, text: str) -> bool:
    # Only a traceback's own lines: a log line printed twice is two events.
    return text == before and (
        text.startswith((" ", "\t")) or TRACEBACK_LINE.match(text) is not None
    )
