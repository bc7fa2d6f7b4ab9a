"""``loaderdoctor explain``'s core: a log in, the likely causes out, with the lines behind each.

Scoring follows three rules. One message counts once: within a message (a traceback, or one
line) a cause takes the weight of its strongest row only, and a row counts once however many
messages repeat it (eight workers printing one traceback are one piece of evidence). Different
rows pointing at one cause combine as independent evidence (1 - prod(1 - w)). torch's catch-all
``exited unexpectedly`` is explained away when another row names a cause at EXPLAINED_AT or more.
Causes the log cannot tell apart (within AMBIGUITY_MARGIN of the best) are ordered by PRIORS and
reported as ambiguous, with the one check that decides between them.

Two more facts come back beside the causes. A failure that is not the DataLoader's (a GPU
out-of-memory error, a device-side assert: forensics/elsewhere.py) is named, so that a log with
no DataLoader cause says what it shows instead. A log whose last traceback stops before its
error line (a paste cut short, a Ctrl-C echoed as ``^C``) is marked partial: its causes are what
the surviving lines support, and the answer names the line after which the rest would settle it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from loaderdoctor.forensics.catalog import CAUSES
from loaderdoctor.forensics.elsewhere import ELSEWHERE, Elsewhere
from loaderdoctor.forensics.log_messages import LIBRARY_PATH, Message, MessageSplitter
from loaderdoctor.forensics.paste import Line, PasteReader, words_from
from loaderdoctor.forensics.symptoms import (
    CATCH_ALLS,
    CHILD_RUNS_SCRIPT,
    CTRL_C,
    FRAME_TAGS,
    NEXT_CHECKS,
    PRIORS,
    RERUN,
    SCRIPT,
    STALLED,
    SYMPTOMS,
    TELLS,
    UNKNOWN_SCRIPT,
    Symptom,
)

AMBIGUITY_MARGIN = 0.05
EXPLAINED_AT = 0.8
# Below this the best cause is a candidate, not an answer: the log supports several (a bare
# "exited unexpectedly with exit code 1"), and the answer lists those within UNDECIDED_SPAN of it
# with the one check that decides.
DECIDED_AT = 0.6
UNDECIDED_SPAN = 0.4
MAX_PROCESSES = 64  # processes read apart by their launcher's prefix; the rest share one reader
MAX_LINES_PER_CAUSE = 20  # matched lines kept per cause; the rest are counted
FLAGS = re.IGNORECASE | re.MULTILINE


@dataclass
class MatchedLine:
    line_number: int
    line: str
    symptom: str  # the row of forensics/symptoms.py that matched
    note: str


@dataclass
class CauseGuess:
    cause: str
    title: str
    likelihood: float  # 0..1, combined over the rows that point at the cause
    prior: float  # how common the cause is in public reports: orders causes the log cannot
    lines: list[MatchedLine]  # the first MAX_LINES_PER_CAUSE lines that point at it
    lines_matched: int  # all of them
    checks: list[str]
    docs: str


@dataclass
class Tie:
    cause: str
    command: str  # run it
    sign: str  # what it shows when this cause is the one


@dataclass
class OtherFailure:
    """A failure the log shows that is not a DataLoader failure (forensics/elsewhere.py)."""

    kind: str
    title: str
    line_number: int
    line: str
    note: str


@dataclass
class Partial:
    """The log stops inside a traceback, before the error line that would end it."""

    line_number: int  # the last line of the cut traceback
    line: str
    settle: str  # what to paste to decide


@dataclass
class Explanation:
    causes: list[CauseGuess] = field(default_factory=list)
    ambiguous: list[Tie] = field(default_factory=list)  # 2+ causes the log cannot tell apart
    deciding_check: str = ""  # the one command to run first when ambiguous or undecided
    # The best cause is below DECIDED_AT: ``ambiguous`` lists the candidates, not a tie.
    undecided: bool = False
    script: str = ""  # the user's script, where the log names it
    lines_read: int = 0
    elsewhere: list[OtherFailure] = field(default_factory=list)  # failures not the loader's
    partial: Partial | None = None  # set when the log is cut short inside a traceback


@dataclass(frozen=True)
class _Row:
    symptom: Symptom
    regex: re.Pattern[str]


class _Evidence:
    """What the messages have shown so far: per cause, the strongest weight of each row."""

    def __init__(self) -> None:
        self.weights: dict[str, dict[str, float]] = {}
        self.lines: dict[str, list[MatchedLine]] = {}
        self.counts: dict[str, int] = {}

    def add(self, cause: str, symptom: Symptom, weight: float | None, line: MatchedLine) -> None:
        if weight is not None:
            rows = self.weights.setdefault(cause, {})
            rows[symptom.id] = max(weight, rows.get(symptom.id, 0.0))
        kept = self.lines.setdefault(cause, [])
        self.counts[cause] = self.counts.get(cause, 0) + 1
        if len(kept) < MAX_LINES_PER_CAUSE and line not in kept:
            kept.append(line)


ROWS = tuple(_Row(symptom, re.compile(symptom.pattern, FLAGS)) for symptom in SYMPTOMS)
SUPPORTING = frozenset(symptom.id for symptom in SYMPTOMS if symptom.supporting)
TAGS = tuple((tag, re.compile(tag.pattern, FLAGS)) for tag in FRAME_TAGS)
OTHERS = tuple((other, re.compile(other.pattern, FLAGS)) for other in ELSEWHERE)
# A log line that no "text" row can match is dropped before any regex runs: a 100 MB log of
# progress lines costs one word split and one set lookup per line.
WORD = re.compile(r"[a-z]+")
TRIGGERS = frozenset(
    [word for row in ROWS for word in row.symptom.words]
    + [word for other in ELSEWHERE for word in other.words]
)


WORDS = words_from([row.symptom.pattern for row in ROWS] + [other.pattern for other in ELSEWHERE])


def _keep_all(line: str) -> bool:
    return True


def may_match(line: str) -> bool:
    return not line.isascii() or not TRIGGERS.isdisjoint(WORD.findall(line.lower()))


def explain_text(text: str) -> Explanation:
    return explain_lines(text.splitlines())


def explain_lines(lines: Iterable[str], prefilter: bool = True) -> Explanation:
    """Every cause the log points at, ranked, with the lines that point at it (streaming).

    The paste is rebuilt first (forensics/paste.py); each process a launcher's prefix names is
    split into messages apart, so that two ranks' interleaved tracebacks stay two."""
    evidence = _Evidence()
    keep = may_match if prefilter else _keep_all
    reader = PasteReader(WORDS)
    splitters: dict[str, MessageSplitter] = {"": MessageSplitter(keep_line=keep)}
    others: dict[str, OtherFailure] = {}
    last_traceback: Message | None = None

    def read(message: Message) -> None:
        nonlocal last_traceback
        _score(message, evidence)
        _note_elsewhere(message, others)
        if message.frames and not message.dump:
            last_traceback = message

    def route(line: Line) -> None:
        splitter = splitters.get(line.process)
        if splitter is None:
            if len(splitters) < MAX_PROCESSES:
                splitter = splitters[line.process] = MessageSplitter(keep_line=keep)
            else:
                splitter = splitters[""]
        if not splitter.idle_skips(line.text):
            for message in splitter.feed(line.number, line.text):
                read(message)

    plain = splitters[""]
    number = 0
    for number, raw in enumerate(lines, start=1):
        text = raw.rstrip("\r\n")
        if plain.idle_skips(text) and reader.passes(text):
            continue  # the reader would hand it on as it is, and the splitter skip it
        for line in reader.feed(number, text):
            route(line)
    reader.lines_read = number
    for line in reader.close():
        route(line)
    for splitter in splitters.values():
        for message in splitter.close():
            read(message)
    script = next((s.script for s in splitters.values() if s.script), "") or next(
        (s.command_script for s in splitters.values() if s.command_script), ""
    )
    explanation = Explanation(script=script, lines_read=reader.lines_read)
    explanation.causes = _rank(evidence, script or UNKNOWN_SCRIPT)
    _mark_ties(explanation, script or UNKNOWN_SCRIPT)
    explanation.elsewhere = list(others.values())
    if last_traceback is not None and not last_traceback.error:
        explanation.partial = _partial(last_traceback)
    return explanation


def _note_elsewhere(message: Message, others: dict[str, OtherFailure]) -> None:
    for other, regex in OTHERS:
        if other.id in others:
            continue
        for number, text in message.texts():
            if regex.search(text):
                others[other.id] = _other_failure(other, number, text)
                break


def _other_failure(other: Elsewhere, number: int, text: str) -> OtherFailure:
    return OtherFailure(other.id, other.title, number, text[:300], other.note)


def _partial(message: Message) -> Partial:
    number, text = message.last
    return Partial(
        number,
        text[:300],
        f"paste the lines after line {number} (`{text[:80]}`): the error line that ends this "
        "traceback decides",
    )


def _frame_tags(message: Message) -> tuple[set[str], str]:
    """The tags of the message's frames, and its innermost DataLoader stage ("" if none)."""
    tags: set[str] = {CTRL_C} if message.interrupted else set()
    stage = fallback = ""
    worker = message.worker_side or any(frame.func == "_worker_loop" for frame in message.frames)
    for frame in message.frames:
        text = frame.text()
        for tag, regex in TAGS:
            if (worker or not tag.worker_fallback) and regex.search(text):
                tags.add(tag.tag)
                if tag.worker_fallback:
                    fallback = tag.tag
                elif tag.stage:
                    stage = tag.tag
    if message.dump and "waiting" in tags:
        tags.add(STALLED)
    if _child_runs_script(message):
        tags.add(CHILD_RUNS_SCRIPT)
    return tags, stage or fallback


def _child_runs_script(message: Message) -> bool:
    """A spawned child's stack running the user's script from its top level past its imports:
    multiprocessing re-runs the main module in each child (``_fixup_main_from_path``), and a
    script without a main guard starts its work again there."""
    frames = message.frames
    fixup = next(
        (
            i
            for i, frame in enumerate(frames)
            if frame.func.startswith("_fixup_main_from_") or "_fixup_main_from_" in frame.source
        ),
        None,
    )
    if fixup is None:
        return False
    for index in range(fixup + 1, len(frames)):
        frame = frames[index]
        if frame.func != "<module>" or LIBRARY_PATH.search(frame.path):
            continue
        source = frame.source
        if source.startswith(("import ", "from ")):
            return False
        return bool(source) or index < len(frames) - 1
    return False


def _score(message: Message, evidence: _Evidence) -> None:
    tags, stage = _frame_tags(message) if message.frames else (set(), "")
    strongest: dict[str, float] = {}
    hits: list[tuple[str, Symptom, float, MatchedLine]] = []
    for row in ROWS:
        symptom = row.symptom
        if symptom.needs and not _has_tag(symptom.needs, tags, stage):
            continue
        if symptom.stageless and stage:
            continue
        matched = _match(row, message)
        if matched is None:
            continue
        for cause, weight in symptom.causes:
            if not symptom.independent:
                strongest[cause] = max(weight, strongest.get(cause, 0.0))
            hits.append((cause, symptom, weight, matched))
    for cause, symptom, weight, line in hits:
        # One message counts once per cause: its strongest row; the others add lines only.
        counts = symptom.independent or weight == strongest[cause]
        evidence.add(cause, symptom, weight if counts else None, line)
        if counts and not symptom.independent:
            strongest[cause] = 2.0  # a later row of the same weight adds lines, not weight


def _has_tag(needed: str, tags: set[str], stage: str) -> bool:
    is_stage = any(tag.tag == needed and tag.stage for tag, _ in TAGS)
    return stage == needed if is_stage else needed in tags


def _match(row: _Row, message: Message) -> MatchedLine | None:
    symptom = row.symptom
    if symptom.where == "cut":
        cut = not message.error and bool(message.frames)
        if not cut or not row.regex.search(message.frames[-1].text()):
            return None
        number, text = message.last
        return MatchedLine(number, text[:300], symptom.id, symptom.note)
    if symptom.where == "stack":
        if not message.frames:
            return None
        number, text = message.last
        return MatchedLine(number, text[:300], symptom.id, symptom.note)
    if symptom.where == "error":
        if not message.error:
            return None
        found = row.regex.search(message.error_text)
        if found is None:
            return None
        number, text = _line_at(message, found.start())
        return MatchedLine(number, text[:300], symptom.id, symptom.note)
    for number, text in message.texts():
        found = row.regex.search(text)
        if found and (not symptom.pid_below or _all_pids_below(found, symptom.pid_below)):
            return MatchedLine(number, text[:300], symptom.id, symptom.note)
    return None


def _line_at(message: Message, offset: int) -> tuple[int, str]:
    for number, text in message.error:
        if offset <= len(text):
            return number, text
        offset -= len(text) + 1
    return message.error[-1]


def _all_pids_below(found: re.Match[str], limit: int) -> bool:
    pids = [int(pid) for pid in re.findall(r"\d+", found.group(1))]
    return bool(pids) and all(pid < limit for pid in pids)


def _likelihoods(evidence: _Evidence) -> dict[str, float]:
    explained = any(
        weight >= EXPLAINED_AT
        for rows in evidence.weights.values()
        for row, weight in rows.items()
        if row not in CATCH_ALLS
    )
    likelihoods = {}
    for cause, rows in evidence.weights.items():
        # A warning (torch's "might ... freeze") supports a cause the failure names; it is no
        # failure itself, and a run that only warned did not fail.
        if all(row in SUPPORTING for row in rows):
            continue
        miss = 1.0
        for row, weight in rows.items():
            if not (explained and row in CATCH_ALLS):
                miss *= 1 - weight
        if miss < 1.0:
            likelihoods[cause] = round(1 - miss, 3)
    return likelihoods


def _rank(evidence: _Evidence, script: str) -> list[CauseGuess]:
    guesses = []
    for cause_id, likelihood in _likelihoods(evidence).items():
        entry = CAUSES.get(cause_id)
        checks = [check.replace(SCRIPT, script) for check in NEXT_CHECKS.get(cause_id, ())]
        guesses.append(
            CauseGuess(
                cause=cause_id,
                title=entry.title if entry else cause_id,
                likelihood=likelihood,
                prior=PRIORS.get(cause_id, 0.0),
                lines=evidence.lines[cause_id],
                lines_matched=evidence.counts[cause_id],
                checks=[*checks, RERUN],
                docs=entry.docs_url if entry else "",
            )
        )
    guesses.sort(key=lambda g: (-round(g.likelihood, 2), -g.prior, g.cause))
    return guesses


def _mark_ties(explanation: Explanation, script: str) -> None:
    causes = explanation.causes
    if len(causes) < 2:
        return
    tied = [g for g in causes if causes[0].likelihood - g.likelihood <= AMBIGUITY_MARGIN]
    if len(tied) < 2 and causes[0].likelihood < DECIDED_AT:
        tied = [g for g in causes if causes[0].likelihood - g.likelihood <= UNDECIDED_SPAN]
        explanation.undecided = len(tied) >= 2
    if len(tied) < 2:
        return
    for guess in tied:
        tell = TELLS.get(guess.cause)
        if tell is not None:
            command = tell.command.replace(SCRIPT, script)
            explanation.ambiguous.append(Tie(guess.cause, command, tell.sign))
    if explanation.ambiguous:
        explanation.deciding_check = explanation.ambiguous[0].command
