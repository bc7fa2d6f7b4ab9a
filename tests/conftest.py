from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
FAULTS = FIXTURES / "faults"


def run_python(
    args: list[str],
    *,
    timeout: float = 120,
    preexec_fn=None,
    wrapper: list[str] | None = None,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``python ARGS`` in a new session; on timeout kill the whole process group."""
    command = [*(wrapper or []), sys.executable, *args]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec_fn,
        start_new_session=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        process.communicate(timeout=30)
        pytest.fail(f"timed out after {timeout} s: {command}")
    finally:
        try:
            os.killpg(process.pid, 9)  # reap any worker left behind by a failed run
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
