"""The kernel log: the only place that says a worker was OOM-killed by the kernel, and why.

``/dev/kmsg`` is read non-blocking (each ``read`` returns one record, ``EAGAIN`` at the end), so
the probe costs a few milliseconds and never waits for new messages; ``dmesg`` is the fallback.
"""

from __future__ import annotations

import errno
import os
import re
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_MAX_RECORDS = 200_000  # the ring buffer holds far fewer; a bound against a flooding kernel
_MAX_SECONDS = 1.0
_DMESG_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class KernelLog:
    lines: list[str]  # "[seconds.micros] message", the same shape as dmesg prints
    readable: bool
    note: str | None = None
    source: str | None = None  # "/dev/kmsg" or "dmesg"


@dataclass(frozen=True)
class OomKill:
    pid: int
    comm: str | None
    memcg: str | None  # the cgroup whose limit was hit (task_memcg / oom_memcg); None: host OOM
    line: str


def parse_kmsg_record(record: str) -> str | None:
    """One ``/dev/kmsg`` record (``prio,seq,usec,flags;message``) -> ``[seconds] message``."""
    header, separator, body = record.partition(";")
    if not separator:
        return None
    fields = header.split(",")
    # continuation lines (" SUBSYSTEM=...", " DEVICE=...") carry metadata only
    message = body.split("\n", 1)[0]
    # the kernel escapes non-printable bytes as \xNN; a real newline inside a message is \x0a
    message = message.replace("\\x0a", " ")
    try:
        micros = int(fields[2])
    except (IndexError, ValueError):
        return message
    return f"[{micros // 1_000_000:5d}.{micros % 1_000_000:06d}] {message}"


def read_kernel_log(device: str = "/dev/kmsg") -> KernelLog:
    from loaderdoctor.system.platform import kernel_log

    available = kernel_log()
    if not available:
        return KernelLog([], False, available.why_not, None)
    lines, kmsg_error = _read_kmsg(device)
    if lines is not None:
        return KernelLog(lines, True, None, device)
    lines, dmesg_error = _read_dmesg()
    if lines is not None:
        return KernelLog(lines, True, f"{kmsg_error}; read dmesg instead", "dmesg")
    return KernelLog([], False, f"{kmsg_error}; {dmesg_error}", None)


def _read_kmsg(device: str) -> tuple[list[str] | None, str | None]:
    try:
        descriptor = os.open(device, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None, f"{device} does not exist"
    except PermissionError:
        return None, f"{device} is not readable (needs root or CAP_SYSLOG)"
    except OSError as error:
        return None, f"cannot open {device}: {error.strerror or error}"
    lines: list[str] = []
    deadline = time.monotonic() + _MAX_SECONDS
    try:
        while len(lines) < _MAX_RECORDS and time.monotonic() < deadline:
            try:
                record = os.read(descriptor, 8192)
            except BlockingIOError:
                break  # EAGAIN: no more records
            except OSError as error:
                if error.errno == errno.EPIPE:
                    continue  # records were overwritten while we read; the next read resyncs
                if error.errno == errno.EPERM and not lines:
                    return None, f"{device}: reading is not permitted (kernel.dmesg_restrict=1?)"
                break
            if not record:
                break
            line = parse_kmsg_record(record.decode("utf-8", errors="replace"))
            if line is not None:
                lines.append(line)
    finally:
        os.close(descriptor)
    return lines, None


def _read_dmesg() -> tuple[list[str] | None, str | None]:
    try:
        completed = subprocess.run(
            ["dmesg"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=_DMESG_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError:
        return None, "dmesg is not installed"
    except subprocess.TimeoutExpired:
        return None, f"dmesg did not answer within {_DMESG_TIMEOUT_S:.0f} s"
    except OSError as error:
        return None, f"cannot run dmesg: {error}"
    if completed.returncode != 0:
        reason = completed.stderr.strip().splitlines()[-1:] or [f"exit {completed.returncode}"]
        return None, f"dmesg failed: {reason[0]}"
    return completed.stdout.splitlines(), None


# "Out of memory: Killed process 123 (python3) total-vm:...", the cgroup flavour
# "Memory cgroup out of memory: Killed process 4242 (python) ...", and the pre-4.19 wording
# "Out of memory: Kill process 123 (python3) score 900 or sacrifice child".
_KILLED = re.compile(r"\bKill(?:ed)? process (?P<pid>\d+) \((?P<comm>[^)]*)\)")
_MEMCG_KILLED = re.compile(r"Memory cgroup out of memory")
# "oom-kill:constraint=CONSTRAINT_MEMCG,...,oom_memcg=/x,task_memcg=/x/y,task=python,pid=4242,uid=0"
_OOM_KILL_SUMMARY = re.compile(r"oom-kill:(?P<fields>\S+)")


def oom_kills(lines: Iterable[str]) -> list[OomKill]:
    """Every OOM kill in the log; the ``oom-kill:`` summary and its ``Killed process`` line merge."""
    kills: list[OomKill] = []
    for line in lines:
        kill = _parse_oom_line(line)
        if kill is None:
            continue
        previous = kills[-1] if kills else None
        if previous is not None and previous.pid == kill.pid:
            kills[-1] = OomKill(
                pid=kill.pid,
                comm=previous.comm or kill.comm,
                memcg=previous.memcg or kill.memcg,
                line=previous.line if "oom-kill:" in kill.line else kill.line,
            )
            continue
        kills.append(kill)
    return kills


def _parse_oom_line(line: str) -> OomKill | None:
    summary = _OOM_KILL_SUMMARY.search(line)
    if summary is not None:
        fields = dict(
            item.split("=", 1) for item in summary.group("fields").split(",") if "=" in item
        )
        try:
            pid = int(fields.get("pid", ""))
        except ValueError:
            return None
        memcg = fields.get("task_memcg") or fields.get("oom_memcg")
        if fields.get("constraint") != "CONSTRAINT_MEMCG":
            memcg = None
        return OomKill(pid, fields.get("task"), memcg, line)
    killed = _KILLED.search(line)
    if killed is None:
        return None
    memcg = "?" if _MEMCG_KILLED.search(line) else None  # a cgroup OOM; the path is elsewhere
    return OomKill(int(killed.group("pid")), killed.group("comm"), memcg, line)


_TIMESTAMP = re.compile(r"^\[\s*\d+\.\d+\]\s?")
_SECONDS = re.compile(r"^\[\s*(\d+\.\d+)\]")


def seconds_of(line: str) -> float | None:
    """A kernel log line's time, in seconds since boot (``[  123.456789] ...``)."""
    found = _SECONDS.match(line)
    return float(found.group(1)) if found else None


def uptime_s() -> float | None:
    """Seconds since boot (``/proc/uptime``), the clock the kernel log's times are on; None
    where it cannot be read."""
    try:
        with open("/proc/uptime", encoding="ascii") as file:
            return float(file.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def lines_for_pid(lines: Sequence[str], pid: int) -> list[str]:
    """Lines that name ``pid``: ``process 4242``, ``pid=4242``, ``python[4242]:``, ``[ 4242]``."""
    pattern = re.compile(rf"(?:\bprocess |\bpid[=: ]\s*|\[\s*|\bpid\s+){pid}(?!\d)")
    return [line for line in lines if pattern.search(_TIMESTAMP.sub("", line))]
