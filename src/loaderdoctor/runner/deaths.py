"""Deaths in the command's process tree that no supervised DataLoader reports.

A pool we do not supervise (torchdata.nodes' process workers, a ``multiprocessing`` pool, a
library's helper process) whose worker is killed by a signal may never look at it again: its
parent waits on a queue for ever, and the job hangs without a word. The dead worker stays a
zombie until its parent collects it, and a zombie's exit status is readable from outside
(``system.zombie``). ``run``'s sampler walks the tree every tick and hands each process here:

* a live process's command line is read on each tick (an exec changes it; a zombie's is gone);
* a zombie that died by a signal or with a failing exit code, seen uncollected on two ticks
  (a parent that watches its children collects them at once: torch, our own re-tries alone, a
  ``ProcessPoolExecutor``), is a death to report, with the kernel's lines that name it;
* one uncollected for ``say_after_s`` is said at once on stderr: the command runs on, and whoever
  watches a run that stopped moving learns why without waiting for its end.

torch's DataLoader workers (``pt_data_worker``) are left out: their deaths are our incidents, or
torch's own error. Deaths whose pid an incident names are dropped when the report is merged.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from loaderdoctor.runner.model import ProcessDeath
from loaderdoctor.system import kmsg
from loaderdoctor.system.zombie import process_stat
from loaderdoctor.units import shortened

WORKER_NAME = "pt_data_worker"  # torch names its worker processes so (worker.py, _worker_loop)
SAY_AFTER_S = 10.0
MAX_COMMANDS = 4096  # command lines kept, a bound against a command that starts a crowd
MAX_DEATHS = 64


def say_on_stderr(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


@dataclass
class DeathWatch:
    """Told of every process of the tree on every tick (``saw``); ``deaths()`` at the end. A
    process is its pid and start time: a pid used again is another process."""

    say_after_s: float = SAY_AFTER_S
    say: Callable[[str], None] = say_on_stderr
    _commands: dict[int, tuple[int, str]] = field(default_factory=dict)  # pid: (start, command)
    _dead: dict[tuple[int, int], ProcessDeath] = field(default_factory=dict)
    _passed: set[tuple[int, int]] = field(default_factory=set)  # dead, not a death to report
    _said: set[tuple[int, int]] = field(default_factory=set)

    def saw(self, pid: int, now: float) -> None:
        """``pid`` is in the tree at ``now`` (seconds since the command started)."""
        stat = process_stat(pid)
        if stat is None:
            return
        key = (pid, stat.start_ticks)
        if not stat.zombie:  # its command line now (an exec changes it): a zombie's is gone
            if pid in self._commands or len(self._commands) < MAX_COMMANDS:
                self._commands[pid] = (stat.start_ticks, _command_line(pid))
            return
        death = self._dead.get(key)
        if death is not None:
            death.uncollected_s = round(now - death.seen_s, 3)
            if death.uncollected_s >= self.say_after_s and key not in self._said:
                self._said.add(key)
                self.say(_live_line(death))
            return
        if key in self._passed:
            return
        failed = stat.signal is not None or stat.exit_code not in (0, None)
        if not failed or stat.name == WORKER_NAME or len(self._dead) >= MAX_DEATHS:
            self._passed.add(key)
            return
        self._dead[key] = ProcessDeath(
            pid=pid,
            parent_pid=stat.parent_pid,
            name=stat.name,
            command=self._command_of(pid, stat.start_ticks),
            parent_command=self._command_of(stat.parent_pid),
            signal=stat.signal,
            exit_code=stat.exit_code,
            seen_s=now,
            uncollected_s=0.0,
            kernel_log=_kernel_lines(pid),
        )

    def deaths(self) -> list[ProcessDeath]:
        """The deaths seen uncollected on two ticks or more, in the order they were seen."""
        return [death for death in self._dead.values() if death.uncollected_s > 0]

    def _command_of(self, pid: int, start_ticks: int | None = None) -> str:
        """The command line read while ``pid`` lived; a living parent's is read now."""
        known = self._commands.get(pid)
        if known is not None and (start_ticks is None or known[0] == start_ticks):
            return known[1]
        return _command_line(pid) if start_ticks is None else ""


def _command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            raw = handle.read(4096)
    except OSError:
        return ""
    return " ".join(part.decode("utf-8", "replace") for part in raw.split(b"\0") if part)


def _kernel_lines(pid: int) -> list[str]:
    """What the kernel said of ``pid`` (a segfault's line, an OOM kill's), where it can be read."""
    log = kmsg.read_kernel_log()
    return kmsg.lines_for_pid(log.lines, pid)[-3:] if log.readable else []


def _live_line(death: ProcessDeath) -> str:
    parent = f"pid {death.parent_pid}" + (
        f" ({shortened(death.parent_command, 80)})" if death.parent_command else ""
    )
    return (
        f"loaderdoctor run: pid {death.pid} ({death.name}), started by {parent}, was "
        f"{death.ended} {death.uncollected_s:.0f} s ago and its parent has not collected it: "
        "a pool that waits for it waits for ever. The command runs on (Ctrl-C ends it); the "
        "report names this death."
    )


__all__ = ["SAY_AFTER_S", "DeathWatch", "say_on_stderr"]
