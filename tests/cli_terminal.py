"""The real CLI through a pseudo-terminal of a given size, as a user at a terminal sees it.

``run_python`` (conftest) gives a command pipes, which is what ``| tee``, nohup and Slurm logs
give it; this gives it a terminal, ``isatty()`` true on stdin, stdout and stderr alike.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

import pytest

from conftest import default_sigint

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def plain(text: str) -> str:
    """What a terminal shows, without its colour and cursor codes."""
    return ANSI.sub("", text)


def run_in_pty(
    args: list[str],
    *,
    columns: int = 80,
    timeout: float = 120,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` on a fresh terminal ``columns`` wide; stdout holds everything it showed
    (stdout and stderr share the terminal), with the terminal's CRLF line ends made LF."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    command = [sys.executable, *args]
    environment = {**os.environ, **(env or {})}
    environment.pop("COLUMNS", None)  # the terminal's size, not pytest's
    environment.setdefault("TERM", "xterm-256color")
    process = subprocess.Popen(
        command,
        stdin=follower,
        stdout=follower,
        stderr=follower,
        # a terminal's new session: SIGINT at its default, even where this run's own was
        # started in the background with it ignored (which exec would pass on)
        preexec_fn=default_sigint,
        start_new_session=True,
        env=environment,
        cwd=cwd,
    )
    os.close(follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"timed out after {timeout} s: {command}")
            ready, _, _ = select.select([leader], [], [], min(left, 1.0))
            if not ready:
                continue
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: every holder of the terminal has closed it
                break
            if not chunk:
                break
            chunks.append(chunk)
        returncode = process.wait(timeout=max(deadline - time.monotonic(), 1))
    finally:
        try:
            os.killpg(process.pid, 9)
        except ProcessLookupError:
            pass
        process.wait(timeout=30)
        os.close(leader)
    output = b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")
    return subprocess.CompletedProcess(command, returncode, output, "")
