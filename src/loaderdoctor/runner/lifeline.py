"""When ``loaderdoctor run`` dies before its command: the command writes the report and stops.

The contract is torchrun's (its agent takes its workers down with it): the command does not
outlive its supervisor. ``run`` starts its command with a parent-death signal (SIGTERM, from the
kernel, which even a ``kill -9`` of ``run`` cannot skip), so a command that is not Python (a
shell, a binary) is stopped by the kernel. A Python command takes that job over here, in its
own process, so that it can first write what it knows: a daemon thread waits for ``run`` to exit
(a pidfd, or its parent pid changing), then writes its own delivered counts and
``DIR/report.json`` from every process's files, and sends SIGTERM to its own process (the user's
handlers run; torchrun's agent stops its ranks), and SIGKILL after ``GRACE_S``.

``run`` itself ends only after its command has: so when this thread wakes, ``run`` died.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time

from loaderdoctor.runner.pdeathsig import PR_SET_PDEATHSIG, libc_prctl

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

# torchrun's agent, and Kubernetes, give a process 30 s between SIGTERM and SIGKILL.
GRACE_S = 30.0
POLL_S = 0.5

# Called (in this order) before the report is written: ``patch`` flushes its delivered counts.
BEFORE_REPORT: list[Callable[[], None]] = []
_armed: list[threading.Thread] = []


def arm() -> None:
    """Watch the parent (``loaderdoctor run``) from a daemon thread of this process, once."""
    if _armed:
        return
    supervisor = os.getppid()
    # From here on this thread, not the kernel's SIGTERM, stops the process: report first.
    prctl = libc_prctl()
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0)
    thread = threading.Thread(
        target=_watch, args=(supervisor,), name="loaderdoctor-run-lifeline", daemon=True
    )
    _armed.append(thread)
    thread.start()


def _watch(supervisor: int) -> None:
    wait_for_exit(supervisor)
    try:
        write_report_without_supervisor(supervisor)
    except Exception as error:  # the process must stop all the same
        sys.stderr.write(f"loaderdoctor run: report not written after run's death: {error!r}\n")
    finally:
        stop_this_process()


def wait_for_exit(parent: int) -> None:
    """Return once ``parent`` (this process's parent) has exited."""
    descriptor = None
    try:
        descriptor = os.pidfd_open(parent)
    except (AttributeError, OSError):  # Python < 3.9, Linux < 5.3, or the parent is gone
        pass
    try:
        # Opened while it was still our parent: the descriptor is that process, not a reuse
        # of its pid, and becomes readable when it exits.
        if descriptor is not None and os.getppid() == parent:
            # poll, not select: select() refuses descriptors numbered 1024 or more.
            exited = select.poll()
            exited.register(descriptor, select.POLLIN)
            exited.poll()
            return
    finally:
        if descriptor is not None:
            os.close(descriptor)
    while os.getppid() == parent:  # reparented once the parent exits
        time.sleep(POLL_S)


def write_report_without_supervisor(supervisor: int) -> None:
    from loaderdoctor.runner.core import report_after_supervisor_death, write_report
    from loaderdoctor.runner.protocol import RUN_DIR_ENV

    for flush in BEFORE_REPORT:
        flush()
    report = report_after_supervisor_death(os.environ[RUN_DIR_ENV], supervisor, os.getpid())
    if report is not None:
        write_report(report, report.report_dir)
        sys.stderr.write(
            f"loaderdoctor run: the supervisor (pid {supervisor}) died; report written to "
            f"{report.report_dir}; stopping the command (SIGTERM)\n"
        )


def stop_this_process() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(GRACE_S)
    os.kill(os.getpid(), signal.SIGKILL)
