"""A worker's resource sharer out of descriptors ends the worker with a record, not a hang.

Under the file_descriptor strategy the main process fetches each tensor's descriptor from the
worker's resource-sharer thread; at the worker's RLIMIT_NOFILE that thread's accept() fails and
the standard library accepts again, failing again, while the main process waits for ever.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from multiprocessing import connection
from pathlib import Path

import pytest

from conftest import FAULTS, run_python
from loaderdoctor.supervise.worker import sharer_guard

pytestmark = pytest.mark.slow

# A process with a resource sharer and no descriptor left: it starts the sharer, prints its
# address and authkey, and lowers its open-file limit to its lowest free descriptor. A
# connection that asks for a key it does not hold is served without a new descriptor (the sharer's
# accept() may hold one in reserve while it waits); the sharer then accepts again, with none left.
SHARER = textwrap.dedent(
    """
    import os, resource, sys, time
    from multiprocessing import process, resource_sharer
    from loaderdoctor.supervise.worker import sharer_guard

    record = open(sys.argv[1], "w")
    if sys.argv[2] == "guard":
        def on_exhausted(error):
            record.write(f"exhausted {error.errno}\\n")
            record.flush()
        sharer_guard.install(on_exhausted)
    resource_sharer.DupFd(os.open(os.devnull, os.O_RDONLY))  # starts the sharer's thread
    address = resource_sharer._resource_sharer._address
    print(address, process.current_process().authkey.hex(), flush=True)
    lowest_free = os.open(os.devnull, os.O_RDONLY)
    os.close(lowest_free)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
    print("limited", flush=True)  # a guarded sharer may end the process before this line
    time.sleep(120)
    """
)


def ask_sharer(mode: str, tmp_path: Path, wait_s: float) -> tuple[int | None, str, str]:
    """Start the sharer process, ask it for a key it does not hold, and wait up to ``wait_s``
    for it to end: its exit code (None: it was still running, and is killed), its record, and
    its stderr."""
    record = tmp_path / "record.txt"
    child = subprocess.Popen(
        [sys.executable, "-c", SHARER, str(record), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        address, authkey = child.stdout.readline().split()
        child.stdout.readline()  # "limited", or nothing: the process already ended

        def ask() -> None:
            try:
                with connection.Client(address, authkey=bytes.fromhex(authkey)) as conn:
                    conn.send(("no-such-key", 0))
                    conn.recv()
            except (OSError, EOFError):
                pass  # the sharer closed or reset the connection

        threading.Thread(target=ask, daemon=True).start()
        try:
            code: int | None = child.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            code = None
    finally:
        if child.poll() is None:
            child.kill()
        _out, err = child.communicate(timeout=30)
    return code, record.read_text(), err


def test_accept_out_of_descriptors_records_and_ends_the_process(tmp_path: Path) -> None:
    code, record, _err = ask_sharer("guard", tmp_path, wait_s=60)
    assert code == sharer_guard.EXIT_CODE
    assert record == "exhausted 24\n"


def test_without_the_guard_the_sharer_fails_for_ever(tmp_path: Path) -> None:
    """Stock behaviour, the reason for the guard: the sharer's accept() fails, it prints the
    error and accepts again, so the process lives on and serves nothing."""
    code, record, err = ask_sharer("stock", tmp_path, wait_s=5)
    assert code is None
    assert record == ""
    assert "OSError: [Errno 24] Too many open files" in err


def test_a_worker_at_its_descriptor_limit_while_a_batch_is_fetched(tmp_path: Path) -> None:
    """End to end under the supervised loader: whichever of the sharer's steps runs out of
    descriptors (accept(), or duplicating the tensor's descriptor once accepted: a sharer
    already waiting in accept() holds a descriptor in reserve, one that enters it later has
    none), the main process gets a verdict, not a wait."""
    result = run_python(
        [str(FAULTS / "sharer_emfile.py"), "fork", str(tmp_path / "marker")],
        timeout=240,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no verdict\nstdout:\n{result.stdout}\nstderr:\n{result.stderr[-3000:]}"
    out = json.loads(lines[-1])
    assert out["cause"] == "fd-exhausted", out
    assert out["evidence"][0] == "errno EMFILE (24): too many open files"
