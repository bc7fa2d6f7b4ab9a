"""What ``loaderdoctor run`` and the processes of its command say to each other.

The one place for the names and formats both sides use: the environment the parent hands its
command, the files each process writes under ``DIR/.incidents/``, and the record of the run the
parent leaves there. Torch-free and nearly import-free: every Python process of the command
imports it at start-up (most of them never import torch, and must not pay for it).

    DIR/report.json                   the report (the parent's, or a child's if the parent died)
    DIR/.run.lock                     locked (flock) by the live ``run`` writing into DIR
    DIR/.incidents/run.json           the parent's journal: pid, command, start time, and the
                                      command's exit status as soon as it ended
    DIR/.incidents/<pid>.jsonl        one line per incident, appended as it happens
    DIR/.incidents/<pid>-<n>.state.json
                                      one process image's loaders, delivered counts, quarantine
                                      (``n`` counts the images of one pid: ``os.execv`` keeps the
                                      pid, and the counts before the exec must not be overwritten)
    DIR/.incidents/<pid>.live.json    where this process's live flight-recorder tables are and
                                      which loader each serves (``loaderdoctor top`` reads it;
                                      kept current while the process runs, removed at its exit)
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not ``typing``: imported by every Python process of the command
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

# --- the environment the parent hands its command (read again by every child process) --------
RUN_DIR_ENV = "LOADERDOCTOR_RUN_DIR"
HANG_TIMEOUT_ENV = "LOADERDOCTOR_RUN_HANG_TIMEOUT"
HEAL_ENV = "LOADERDOCTOR_RUN_HEAL"
MAX_SKIPPED_ENV = "LOADERDOCTOR_RUN_MAX_SKIPPED"  # --max-skipped as given; unset: the default
# --max-deaths-in-a-row as given; unset: the default
MAX_DEATHS_ENV = "LOADERDOCTOR_RUN_MAX_DEATHS_IN_A_ROW"
# The pid of the ``loaderdoctor run`` process: its direct child watches it (``lifeline``), and
# a ``loaderdoctor run`` started under it sees that it is already supervised.
SUPERVISOR_ENV = "LOADERDOCTOR_RUN_SUPERVISOR"
# --strict: wrong data delivered without an error raises (``supervise.detectors`` reads it)
STRICT_DATA_ENV = "LOADERDOCTOR_STRICT_DATA"
# Ray's own variable: the function its driver's ``ray.init`` hands the job's runtime environment
# to (``runner.ray_hook``); a user's own, which run's replaces, is kept in the second and run first.
RAY_ENV_HOOK_ENV = "RAY_RUNTIME_ENV_HOOK"
RAY_ENV_HOOK = "loaderdoctor.runner.ray_hook.runtime_env"  # as Ray's load_class reads it
RAY_USER_ENV_HOOK_ENV = "LOADERDOCTOR_RAY_USER_ENV_HOOK"
# Set by the job's runtime environment in each Ray worker of the command's job; its value says
# how its DataLoaders were reached: "ray-hook" (Ray's worker setup hook installed the bootstrap: a
# worker of a cluster started before run) or "run" (the bootstrap came with the environment the
# worker inherited: a Ray that the command itself started).
RAY_WORKER_ENV = "LOADERDOCTOR_RAY_WORKER"


def numeric_order(value: Any) -> tuple[int, Any]:
    """Sort key of an index list as people read it: 2 before 10, then anything else by text."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (0, value)
    return (1, repr(value))


# --- the files ----------------------------------------------------------------------------------
REPORT_NAME = "report.json"
LOCK_NAME = ".run.lock"  # held (flock) by the one ``run`` writing into the folder
INCIDENTS_DIRNAME = ".incidents"
RUN_RECORD_NAME = "run.json"
INCIDENTS_SUFFIX = ".jsonl"
STATE_SUFFIX = ".state.json"
LIVE_SUFFIX = ".live.json"
LIVE_SCHEMA = 1
BOOT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_boot")


def incidents_dir(report_dir: str | os.PathLike[str]) -> str:
    return os.path.join(report_dir, INCIDENTS_DIRNAME)


def incidents_path(directory: str, pid: int) -> str:
    return os.path.join(directory, f"{pid}{INCIDENTS_SUFFIX}")


def state_path(directory: str, pid: int, image: int) -> str:
    return os.path.join(directory, f"{pid}-{image}{STATE_SUFFIX}")


def live_path(directory: str, pid: int) -> str:
    return os.path.join(directory, f"{pid}{LIVE_SUFFIX}")


def read_live_indexes(directory: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every running process's live index (``live_path``), in pid order."""
    found = [read_json(os.path.join(directory, n)) for n in _names(directory, LIVE_SUFFIX)]
    indexes = [d for d in found if d is not None and d.get("schema") == LIVE_SCHEMA]
    return sorted(indexes, key=lambda d: int(d.get("pid", 0)))


def next_image_number(directory: str, pid: int) -> int:
    """The number of this process image: one more than any state file this pid left before."""
    prefix, numbers = f"{pid}-", [0]
    try:
        names = os.listdir(directory)
    except OSError:
        return 1
    for name in names:
        if name.startswith(prefix) and name.endswith(STATE_SUFFIX):
            middle = name[len(prefix) : -len(STATE_SUFFIX)]
            if middle.isdigit():
                numbers.append(int(middle))
    return max(numbers) + 1


# --- the formats ---------------------------------------------------------------------------------
def incident_line(record: dict[str, Any]) -> str:
    """``{"time", "pid", "rank", "incident": Incident.to_dict()}`` as one line of JSON."""
    import json

    return json.dumps(record, default=repr) + "\n"


def append_incident(directory: str, pid: int, record: dict[str, Any]) -> None:
    # One write of one line in append mode: lines of concurrent writers never interleave.
    with open(incidents_path(directory, pid), "a") as handle:
        handle.write(incident_line(record))


def write_json(path: str, document: dict[str, Any]) -> None:
    """Replace ``path`` (temporary file, then rename): a reader never sees half a file."""
    from loaderdoctor.atomic import write_json_atomically

    write_json_atomically(path, document)


def read_json(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    from loaderdoctor.inputfile import load_json

    try:
        document = load_json(path)
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None


# The key of a line that links what was learnt later to an incident written before (its "id")
FOLLOW_UP = "follow_up"


def read_incident_records(directory: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Every incident line of every process, file by file (and the follow-ups to them, under
    ``FOLLOW_UP``); a line cut short is skipped."""
    import json

    for name in sorted(_names(directory, INCIDENTS_SUFFIX)):
        try:
            with open(os.path.join(directory, name), errors="replace") as handle:
                lines = handle.readlines()
        except OSError:
            continue
        for line in lines:
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):  # a line cut short by a hard kill, or damaged
                continue
            if isinstance(record, dict):
                yield record


STATE_INTS = ("pid", "image", "created", "loaders", "unsupervised", "batches", "samples")


def plausible_state(state: dict[str, Any]) -> bool:
    """A state file as a process of ours writes it: a damaged one (a disk error, a hand edit)
    is left out of the report rather than crash its merge."""

    def whole(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    return (
        all(whole(state[key]) for key in STATE_INTS if key in state)
        and (state.get("rank") is None or whole(state["rank"]))
        and isinstance(state.get("started", 0.0), (int, float))
        and isinstance(state.get("worker_pids", []), list)
        and all(whole(pid) for pid in state.get("worker_pids", []))
        and isinstance(state.get("quarantine", []), list)
    )


def read_states(directory: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every process image's state, in the order the images ran."""
    states = [read_json(os.path.join(directory, n)) for n in _names(directory, STATE_SUFFIX)]
    found = [s for s in states if s is not None and plausible_state(s)]
    return sorted(found, key=lambda s: (s.get("started", 0.0), s.get("pid", 0)))


def _names(directory: str | os.PathLike[str], suffix: str) -> list[str]:
    try:
        return [n for n in os.listdir(directory) if n.endswith(suffix)]
    except OSError:
        return []


def weakest_protection(lines: list[tuple[str, str]]) -> str | None:
    """One ``oom_protection`` line for several (who, line): the one line all say, else the first
    that says "off", naming whose it is (the protection is only as good as its weakest)."""
    distinct = list(dict.fromkeys(line for _, line in lines))
    if not distinct:
        return None
    if len(distinct) == 1:
        return distinct[0]
    who, line = next((pair for pair in lines if pair[1].startswith("off")), lines[0])
    return f"{who}: {line}" if who else line
