"""How a dead process that its parent has not collected yet (a zombie) ended.

Linux keeps a zombie's exit status in ``/proc/PID/stat`` (field 52, ``exit_code``, since 3.5) in
``waitpid``'s form, readable without being the process's parent. It is how ``loaderdoctor run``
learns how a process of the command died when the process that started it never looked: a pool
that waits on its queue for a worker that is gone waits for ever, and says nothing.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

# Fields of /proc/PID/stat, in proc(5)'s numbering (from 1)
_STATE, _PARENT, _START_TIME, _EXIT_CODE = 3, 4, 22, 52


@dataclass(frozen=True)
class ProcessStat:
    pid: int
    parent_pid: int
    name: str  # the kernel's name of it (comm): its program, or what it set (prctl)
    start_ticks: int  # when it started, in clock ticks since boot: with the pid, one process
    zombie: bool
    # How a zombie ended: the signal ("SIGSEGV") or its own exit code
    signal: str | None = None
    exit_code: int | None = None


def signal_name(number: int) -> str:
    """``11`` -> ``"SIGSEGV"``; a number this Python does not name, ``"signal 77"``."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def process_stat(pid: int, proc: str = "/proc") -> ProcessStat | None:
    """``pid``'s line of ``/proc``; None where there is none (gone, not Linux, not ours)."""
    try:
        with open(os.path.join(proc, str(pid), "stat"), encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    return parse_stat(pid, text)


def parse_stat(pid: int, text: str) -> ProcessStat | None:
    """``/proc/PID/stat``'s text; None where it cannot be read. The name sits in parentheses
    and may hold spaces and parentheses itself: the fields follow the last ')'."""
    opening, closing = text.find("("), text.rfind(")")
    if opening < 0 or closing < opening:
        return None
    fields = text[closing + 1 :].split()  # fields[0] is field 3, the state

    def number(field: int) -> int | None:
        try:
            return int(fields[field - _STATE])
        except (IndexError, ValueError):
            return None

    parent_pid, start_ticks = number(_PARENT), number(_START_TIME)
    if not fields or parent_pid is None or start_ticks is None:
        return None
    name = text[opening + 1 : closing]
    found = ProcessStat(pid, parent_pid, name, start_ticks, zombie=fields[0] == "Z")
    status = number(_EXIT_CODE) if found.zombie else None
    if status is None:  # alive, or a kernel before 3.5
        return found
    if os.WIFSIGNALED(status):
        named = signal_name(os.WTERMSIG(status))
        return ProcessStat(pid, parent_pid, name, start_ticks, True, signal=named)
    if os.WIFEXITED(status):
        return ProcessStat(
            pid, parent_pid, name, start_ticks, True, exit_code=os.WEXITSTATUS(status)
        )
    return found


__all__ = ["ProcessStat", "parse_stat", "process_stat", "signal_name"]
