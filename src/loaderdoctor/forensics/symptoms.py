"""From the text of a failed run to the likely causes: the symptom table of ``loaderdoctor explain``.

Stock PyTorch tells a user only what it saw in the main process (``DataLoader worker (pid 4242)
is killed by signal: Killed.``); the cause is elsewhere. The table below is data: each row is a
pattern of the message, the causes it points at with a weight, and the next checks that tell them
apart. The catalog's own ``symptoms`` strings are matched too, so a cause added to the catalog is
found by ``explain`` without a row here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from loaderdoctor.forensics.catalog import CAUSES

RERUN = "Rerun it under `loaderdoctor run -- COMMAND`: the report names the cause and the sample."
CATALOG_WEIGHT = 0.5


@dataclass(frozen=True)
class Symptom:
    id: str
    pattern: str  # a regular expression, searched case-insensitively in each line
    causes: tuple[tuple[str, float], ...]  # (cause id, weight 0..1)
    note: str


SYMPTOMS: tuple[Symptom, ...] = (
    Symptom(
        "killed-signal-killed",
        r"killed by signal: Killed",
        (("oom-killed", 0.7), ("killed-by-signal", 0.35)),
        "SIGKILL: almost always the kernel's OOM killer; otherwise a scheduler or a person.",
    ),
    Symptom(
        "kernel-oom",
        r"Out of memory: Kill|oom-kill|OOMKilled|Memory cgroup out of memory",
        (("oom-killed", 0.95),),
        "The kernel's OOM killer logged a kill.",
    ),
    Symptom(
        "shell-killed",
        r"^\s*Killed\s*$",
        (("oom-killed", 0.6), ("killed-by-signal", 0.35)),
        "The shell reports the main process killed by SIGKILL.",
    ),
    Symptom(
        "bus-error",
        r"Bus error|bus error encountered in worker|insufficient shared memory|SIGBUS",
        (("shm-exhausted", 0.9), ("native-crash", 0.15)),
        "SIGBUS in a worker: a write to a /dev/shm mapping that had no space behind it.",
    ),
    Symptom(
        "shm-enospc",
        r"unable to (allocate shared memory|write to file).*|No space left on device \(28\)",
        (("shm-exhausted", 0.9),),
        "torch could not allocate the shared memory of a batch.",
    ),
    Symptom(
        "segfault",
        r"killed by signal: Segmentation fault|segmentation fault encountered in worker|SIGSEGV",
        (("native-crash", 0.85),),
        "A crash in native code (a decoder, an extension, a library not fork-safe).",
    ),
    Symptom(
        "abort",
        r"killed by signal: Aborted|SIGABRT|SIGILL|SIGFPE|Illegal instruction|Floating point",
        (("native-crash", 0.8),),
        "An abort or an illegal instruction in native code.",
    ),
    Symptom(
        "terminated",
        r"killed by signal: Terminated|SIGTERM",
        (("killed-by-signal", 0.8),),
        "SIGTERM: someone or something (a scheduler, a time limit) stopped the worker.",
    ),
    Symptom(
        "exited-unexpectedly",
        r"DataLoader worker \(pid\(s\)? [\d, ]+\) exited unexpectedly",
        (
            ("native-crash", 0.3),
            ("oom-killed", 0.3),
            ("shm-exhausted", 0.25),
            ("worker-exit", 0.25),
        ),
        "torch's catch-all: a worker is gone. The lines above it often say why.",
    ),
    Symptom(
        "exit-code",
        r"exited unexpectedly with exit code \d+|worker.*exit(ed)? (with )?code [1-9]",
        (("worker-exit", 0.8),),
        "The worker ended itself with a non-zero exit code.",
    ),
    Symptom(
        "emfile",
        r"Too many open files|EMFILE|received \d+ items of ancdata",
        (("fd-exhausted", 0.9),),
        "The process ran out of file descriptors (the file_descriptor sharing strategy).",
    ),
    Symptom(
        "caught-in-worker",
        r"Caught \w+ in DataLoader worker process \d+",
        (("sample-error", 0.7),),
        "A Python exception in a worker: the 'Original Traceback' below it has the line.",
    ),
    Symptom(
        "collate",
        r"stack expects each tensor to be equal size|default_collate|in collate|collate_fn",
        (("collate-error", 0.85),),
        "The samples of one batch could not be merged.",
    ),
    Symptom(
        "timeout",
        r"DataLoader timed out after \d+ seconds",
        (("worker-hang", 0.8),),
        "A worker did not deliver within the DataLoader's timeout.",
    ),
    Symptom(
        "notebook-main",
        r"Can't get attribute .* on <module '__main__' \(built-in\)>",
        (("unpicklable", 0.95),),
        "A class or function defined in a notebook cell: spawned workers cannot import it.",
    ),
    Symptom(
        "pickling",
        r"Can't pickle|cannot pickle|PicklingError|Can't get attribute .* on <module '__main__'",
        (("unpicklable", 0.85),),
        "spawn/forkserver must pickle the dataset, collate_fn and worker_init_fn.",
    ),
    Symptom(
        "bootstrapping",
        r"An attempt has been made to start a new process before|finished its bootstrapping phase"
        r"|freeze_support\(\)",
        (("main-guard-missing", 0.95),),
        "The script's top level ran again in a spawned worker: no main guard.",
    ),
    Symptom(
        "broken-pipe",
        r"BrokenPipeError: \[Errno 32\] Broken pipe",
        (("main-guard-missing", 0.5), ("unpicklable", 0.4)),
        "Windows/macOS (spawn): the worker died while the parent sent it the dataset; the "
        "worker's own error (bootstrapping, or a pickling error in the parent) says which.",
    ),
    Symptom(
        "ran-out-of-input",
        r"EOFError: Ran out of input",
        (("unpicklable", 0.6), ("main-guard-missing", 0.3)),
        "A spawned worker read a truncated pickle: the parent failed while pickling for it.",
    ),
    Symptom(
        "paging-file",
        r"WinError 1455|paging file is too small",
        (("paging-file-too-small", 0.95),),
        "Windows ran out of commit space (RAM + paging file) while a worker loaded torch.",
    ),
    Symptom(
        "objc-fork",
        r"objc\[\d+\]: .*may have been in progress in another thread when fork\(\) was called"
        r"|_share_filename_: only available on CPU",
        (("mps-in-worker", 0.85),),
        "macOS: MPS or Objective-C state in a forked worker, or an MPS tensor returned by one.",
    ),
    Symptom(
        "cuda-fork",
        r"Cannot re-initialize CUDA in forked subprocess",
        (("cuda-in-worker", 0.95),),
        "CUDA was used in a forked worker.",
    ),
)

NEXT_CHECKS: dict[str, tuple[str, ...]] = {
    "oom-killed": (
        "dmesg -T | grep -i -E 'killed process|out of memory'",
        "cat /sys/fs/cgroup/memory.events 2>/dev/null || cat /sys/fs/cgroup/memory/memory.oom_control",
        "free -h",
    ),
    "killed-by-signal": (
        "dmesg -T | grep -i killed   (no OOM record: look at the scheduler's or the container's logs)",
    ),
    "shm-exhausted": (
        "df -h /dev/shm",
        "docker inspect --format '{{.HostConfig.ShmSize}}' CONTAINER   (in Docker: --shm-size 8g)",
    ),
    "native-crash": (
        "python -X faulthandler train.py   (prints the Python stack of the crash)",
        "rerun with num_workers=0: the crash moves to the main process, with its stack",
    ),
    "worker-exit": ("grep -n -E 'sys.exit|os._exit|exit\\(' on the Dataset and its transforms",),
    "fd-exhausted": (
        "ulimit -n",
        "ls /proc/PID/fd | wc -l   (PID of a worker)",
    ),
    "sample-error": ("read the 'Original Traceback' in the log; then `dataset[INDEX]` in a shell",),
    "collate-error": ("print the shape of each sample of the failing batch",),
    "worker-hang": ("py-spy dump --pid PID   (PID of the stuck worker)",),
    "unpicklable": ("python -c 'import pickle; pickle.dumps(DATASET)'",),
    "main-guard-missing": ("loaderdoctor lint train.py",),
    "cuda-in-worker": ("loaderdoctor lint train.py",),
    "paging-file-too-small": (
        'systeminfo | findstr /C:"Virtual Memory"   (the commit limit and what is in use)',
        "loaderdoctor lint --platform windows train.py",
    ),
    "mps-in-worker": ("loaderdoctor lint --platform macos train.py",),
}


@dataclass
class SymptomMatch:
    symptom: str  # a row id of SYMPTOMS, or "catalog:<cause>"
    line_number: int
    line: str
    note: str


@dataclass
class CauseGuess:
    cause: str
    title: str
    likelihood: float  # 0..1, combined over every match that points at the cause
    matches: list[int]  # indices into Explanation.matches
    checks: list[str]
    docs: str


@dataclass
class Explanation:
    matches: list[SymptomMatch] = field(default_factory=list)
    causes: list[CauseGuess] = field(default_factory=list)


def catalog_pattern(symptom: str) -> str:
    """A catalog symptom as a loose regex: placeholders (N, <...>) and '...' match anything."""
    pattern = re.escape(symptom.strip().rstrip("."))
    pattern = pattern.replace(r"\.\.\.", ".*")
    pattern = re.sub(r"<[^>]*>", ".*", pattern)
    pattern = re.sub(r"\bN\b", r"[\\d, ]+", pattern)
    return pattern


def _rows() -> list[tuple[str, re.Pattern[str], tuple[tuple[str, float], ...], str]]:
    rows = [(s.id, re.compile(s.pattern, re.IGNORECASE), s.causes, s.note) for s in SYMPTOMS]
    for cause in CAUSES.values():
        for text in cause.symptoms:
            if len(text) < 12:  # "Terminated" alone would match too much
                continue
            rows.append(
                (
                    f"catalog:{cause.id}",
                    re.compile(catalog_pattern(text), re.IGNORECASE),
                    ((cause.id, CATALOG_WEIGHT),),
                    f"listed as a symptom of {cause.id}",
                )
            )
    return rows


def explain_text(text: str) -> Explanation:
    """Every matched line, and the causes ranked by how much the matches point at them."""
    explanation = Explanation()
    support: dict[str, list[tuple[int, float]]] = {}
    rows = _rows()
    for number, line in enumerate(text.splitlines(), start=1):
        seen_here: set[str] = set()
        for row_id, regex, causes, note in rows:
            if not regex.search(line):
                continue
            # A catalog row adds nothing where a table row already named the same cause.
            fresh = [(c, w) for c, w in causes if c not in seen_here]
            if not fresh:
                continue
            explanation.matches.append(SymptomMatch(row_id, number, line.strip()[:300], note))
            for cause, weight in fresh:
                seen_here.add(cause)
                support.setdefault(cause, []).append((len(explanation.matches) - 1, weight))
    for cause_id, hits in support.items():
        miss = 1.0
        for _, weight in hits:
            miss *= 1 - weight
        entry = CAUSES.get(cause_id)
        explanation.causes.append(
            CauseGuess(
                cause=cause_id,
                title=entry.title if entry else cause_id,
                likelihood=round(1 - miss, 3),
                matches=sorted({index for index, _ in hits}),
                checks=[*NEXT_CHECKS.get(cause_id, ()), RERUN],
                docs=entry.docs_url if entry else "",
            )
        )
    explanation.causes.sort(key=lambda g: (-g.likelihood, g.cause))
    return explanation
