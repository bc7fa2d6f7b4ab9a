from __future__ import annotations

import contextlib
import multiprocessing.process
import os
import signal
import subprocess
import sys
import time
import uuid
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
FAULTS = FIXTURES / "faults"


def default_sigint() -> None:
    """``preexec_fn`` of a child that a test interrupts: SIGINT back to its default action.

    A shell starts a background job (``.ci/run &``, nohup) with SIGINT ignored, exec keeps an
    ignored signal, and Python then never installs its own handler: the child would not see the
    test's Ctrl-C at all.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


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


def assert_torch_exit_line(message: str, exit_code: int) -> None:
    """A worker's exit verdict starts with torch's own line, word for word."""
    assert message.startswith("DataLoader worker (pid ")
    assert message.splitlines()[0].endswith(
        f"exited unexpectedly with exit code {exit_code}. Details are lost due to "
        "multiprocessing. Rerunning with num_workers=0 may give better error trace."
    )


def ledger_settings(examples: int) -> Any:
    """Hypothesis settings of the exactly-once ledgers (heal, streams): ``examples`` by default,
    ``LOADERDOCTOR_LEDGER_EXAMPLES`` for a deeper local run; each example starts real workers."""
    from hypothesis import HealthCheck, settings

    return settings(
        max_examples=int(os.environ.get("LOADERDOCTOR_LEDGER_EXAMPLES", str(examples))),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


def own_memory_cgroup_v1() -> Path:
    """This process's cgroup v1 memory directory; skips the test where there is none."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create a memory cgroup")
    base = Path("/sys/fs/cgroup/memory")
    if not (base / "memory.limit_in_bytes").exists():
        pytest.skip("no cgroup v1 memory controller at /sys/fs/cgroup/memory")
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            own = base / path.lstrip("/")
            if own.is_dir():
                return own
    pytest.skip("this process has no cgroup v1 memory path")


@contextlib.contextmanager
def memory_cgroup(limit_bytes: int) -> Iterator[Path]:
    """A child memory cgroup with a limit; everything left in it is killed and it is removed."""
    parent = own_memory_cgroup_v1()
    group = parent / f"loaderdoctor-test-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
    except OSError as error:
        pytest.skip(f"cannot create a memory cgroup under {parent}: {error}")
    try:
        (group / "memory.limit_in_bytes").write_text(str(limit_bytes))
        yield group
    finally:
        remove_cgroup(group)


def remove_cgroup(group: Path, timeout: float = 10.0) -> None:
    """Kill what is left in a (v1) cgroup the test made, then remove it; bounded by ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        for pid in (group / "cgroup.procs").read_text().split():
            try:
                os.kill(int(pid), 9)
            except ProcessLookupError:
                pass
        try:
            group.rmdir()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def in_cgroup(group: Path) -> list[str]:
    """A command prefix that moves the command into ``group`` before it starts."""
    return ["sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$@"', "sh"]


def charged_baseline(*modules: str, path: Sequence[str | os.PathLike[str]] = ()) -> int:
    """Bytes a fresh Python holds, in the memory a cgroup cannot reclaim (``RssAnon + RssShmem``),
    once it has imported ``modules``: the floor to size a test's memory cgroup from.

    Measured, never assumed: with the CUDA build of torch, ``import torch`` alone holds about
    509 MiB, and a cgroup sized for the CPU build then fails for the wrong reason.
    """
    code = "\n".join(
        [
            "import sys",
            f"sys.path[:0] = {[os.fspath(p) for p in path]!r}",
            *(f"import {module}" for module in modules),
            "rows = dict(line.split(':', 1) for line in open('/proc/self/status'))",
            "print(sum(int(rows[k].split()[0]) * 1024 for k in ('RssAnon', 'RssShmem')))",
        ]
    )
    result = run_python(["-c", code], timeout=120)
    assert result.returncode == 0, result.stderr
    return int(result.stdout)


@pytest.fixture(autouse=True)
def _workers_of_a_test_stop_with_it(request: pytest.FixtureRequest) -> Iterator[None]:
    """The worker pools a slow test started are shut down when it ends, not at a random later test.

    An iterator whose failure was raised sits in a reference cycle (the traceback holds its
    frames): the cyclic collector frees it during some later test, and torch's ``__del__`` then
    joins each of its live workers for 5 s (MP_STATUS_CHECK_INTERVAL), which an explicit
    shutdown does not: seen as 5 to 10 s added to 11 tests of the supervised loader's files.
    """
    if request.node.get_closest_marker("slow") is None:
        yield
        return
    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter as TorchIter

    started: weakref.WeakSet[Any] = weakref.WeakSet()
    real_init = TorchIter.__init__

    def init(iterator: Any, *args: Any, **kwargs: Any) -> None:
        started.add(iterator)
        real_init(iterator, *args, **kwargs)

    TorchIter.__init__ = init  # type: ignore[method-assign]
    try:
        yield
    finally:
        TorchIter.__init__ = real_init  # type: ignore[method-assign]
        for iterator in list(started):
            # What the test left running; a failure here is no verdict on the test, which
            # has finished (torch's __del__ would have ignored it in the same way).
            with contextlib.suppress(Exception):
                iterator._shutdown_workers()


@pytest.fixture(autouse=True)
def _processes_need_the_slow_marker(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that starts a real process (a worker, a CLI subprocess) must be marked slow.

    ``-m "not slow"`` is the quick tier: it must start no process, so the marker stays honest.
    """
    if request.node.get_closest_marker("slow") is not None:
        yield
        return
    started: list[str] = []
    real_start = multiprocessing.process.BaseProcess.start
    real_popen_init = subprocess.Popen.__init__

    def start(process: multiprocessing.process.BaseProcess) -> None:
        started.append(f"multiprocessing {process.name}")
        real_start(process)

    def popen_init(popen: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        started.append(f"subprocess {args!r}"[:120])
        real_popen_init(popen, args, *rest, **kwargs)

    multiprocessing.process.BaseProcess.start = start  # type: ignore[method-assign]
    subprocess.Popen.__init__ = popen_init  # type: ignore[method-assign]
    try:
        yield
    finally:
        multiprocessing.process.BaseProcess.start = real_start  # type: ignore[method-assign]
        subprocess.Popen.__init__ = real_popen_init  # type: ignore[method-assign]
    if started:
        pytest.fail(
            f"{request.node.nodeid} starts real processes but is not marked slow: {started[0]}",
            pytrace=False,
        )


EXTENDED = os.environ.get("LOADERDOCTOR_EXTENDED") == "1"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that start processes first, the quick ones last (a stable sort: file order
    within each): the two xdist workers steal from each other's queue (``--dist worksteal``), so
    the run ends on quick tests, and neither worker waits alone on a long one at the end.

    The extended tier (another start method, fault kind or seed of a case the suite already
    runs) is skipped, with the command that runs it, unless ``LOADERDOCTOR_EXTENDED=1``: it
    keeps CI within its time budget on two cores."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    if EXTENDED:
        return
    skip = pytest.mark.skip(reason="extended tier: bash scripts/extended_tests.sh runs it")
    for item in items:
        if item.get_closest_marker("extended") is not None:
            item.add_marker(skip)
