"""Windows and macOS: the spawn-only platforms get the same verdicts.

On Linux every subprocess here runs with ``tests/fixtures/portable`` on PYTHONPATH, whose
sitecustomize takes away what those platforms lack (real-time signals, faulthandler.register,
``resource``, ``/proc/self``, ``/dev/shm``, cgroups, the kernel log). On macOS and Windows (the
``portable`` CI workflow) the platform itself lacks them, and the harness is not needed.
This module is self-contained (no conftest helper that needs POSIX process groups).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import psutil
import pytest

from conftest import assert_torch_exit_line

pytestmark = pytest.mark.portable

FIXTURES = Path(__file__).parent / "fixtures"
FAULTY = str(FIXTURES / "faults" / "faulty.py")
HEALING = str(FIXTURES / "faults" / "healing.py")
HARNESS = str(FIXTURES / "portable")
MACOS_HARNESS = str(FIXTURES / "portable_macos")  # the harness with what macOS has put back
LINUX = sys.platform.startswith("linux")
WINDOWS = sys.platform == "win32"
# Where the stuck worker's stack comes from its own faulthandler timer, not from a signal:
# Windows (no faulthandler.register) and the harness (which removes it too).
TIMER_DUMP = LINUX or WINDOWS


def run_portable(
    args: list[str], timeout: float = 120, harness: str = HARNESS
) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` with the harness on Linux; on timeout or failure the whole tree is killed."""
    env = dict(os.environ)
    if LINUX:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (harness, env.get("PYTHONPATH")) if p)
    env["PYTHONIOENCODING"] = "utf-8"
    process = subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        env=env,
    )
    timed_out = False
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        # the tree as it was when the wait ended: which of its processes had not exited
        tree = []
        try:
            for child in [psutil.Process(process.pid), *psutil.Process(process.pid).children(True)]:
                with contextlib.suppress(psutil.Error):
                    tree.append(f"{child.pid} {child.status()} {' '.join(child.cmdline())[:120]}")
                    child.kill()
        except psutil.NoSuchProcess:
            pass
        process.kill()
        rest = process.communicate()
    if timed_out:  # what it printed before: a verdict that came, then no exit, says so
        stdout, stderr = rest
        pytest.fail(
            f"timed out after {timeout} s: {args}\nstill there:\n"
            + "\n".join(tree)
            + f"\nstdout:\n{stdout}\nstderr:\n{stderr[-3000:]}"
        )
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)


def verdict(*args: str, timeout: float = 120, harness: str = HARNESS) -> dict:
    result = run_portable(list(args), timeout=timeout, harness=harness)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no verdict\nstdout:\n{result.stdout}\nstderr:\n{result.stderr[-3000:]}"
    return json.loads(lines[-1])


# --- the probes (unit) --------------------------------------------------------------------


def test_probes_off_linux_say_why(monkeypatch: pytest.MonkeyPatch) -> None:
    from loaderdoctor.system import cgroup, kmsg, platform

    monkeypatch.setattr(sys, "platform", "darwin")
    lacking = platform.cgroups()
    assert (lacking.available, lacking.absent) == (False, True)
    assert (
        lacking.why_not == "cgroups not available here, because it is Linux-only and this is macOS"
    )
    assert cgroup.memory_cgroup().note == lacking.why_not
    assert cgroup.cpu_quota().note == lacking.why_not
    log = kmsg.read_kernel_log()
    assert (log.readable, log.note) == (
        False,
        "the kernel log (/dev/kmsg, dmesg) not available here, because it is Linux-only and "
        "this is macOS",
    )
    assert platform.proc_filesystem().absent


def test_stack_dump_uses_what_the_platform_has(monkeypatch: pytest.MonkeyPatch) -> None:
    import faulthandler

    from loaderdoctor.system import platform

    if hasattr(signal, "SIGRTMIN") and hasattr(faulthandler, "register"):
        assert platform.stack_dump().description == "SIGRTMIN+6"
        monkeypatch.delattr(signal, "SIGRTMIN")
    if hasattr(signal, "SIGUSR2") and hasattr(faulthandler, "register"):  # macOS
        assert platform.stack_dump() == platform.StackDump("signal", int(signal.SIGUSR2), "SIGUSR2")
        assert platform.stack_dump(user_owns_sigusr2=True).method == "timer"
        monkeypatch.delattr(faulthandler, "register")
    dump = platform.stack_dump()  # Windows
    assert (dump.method, dump.signal_number) == ("timer", None)
    assert dump.description.startswith("faulthandler.dump_traceback_later in the worker (")


def test_a_class_of_a_fileless_main_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from loaderdoctor.supervise.parent.collect import defined_in_fileless_main

    notebook = types.ModuleType("__main__")  # ipykernel's __main__ has no __file__
    monkeypatch.setitem(sys.modules, "__main__", notebook)
    cell_dataset = type("CellDataset", (torch.utils.data.Dataset,), {"__module__": "__main__"})

    def collate(batch):
        return batch

    collate.__module__ = "__main__"
    collate.__qualname__ = "collate"
    dataset = cell_dataset()
    dataset.big = torch.zeros(4)  # tensor contents are not copied to find the reference
    parts = [("dataset", dataset), ("collate_fn", collate), ("worker_init_fn", None)]
    assert defined_in_fileless_main(parts) == ["dataset (CellDataset)", "collate_fn (collate)"]
    notebook.__file__ = __file__  # a script's __main__: spawn re-imports it, nothing to say
    assert defined_in_fileless_main(parts) == []


def test_fileless_main_death_is_unpicklable_with_the_notebook_fix() -> None:
    from loaderdoctor.forensics import Evidence, diagnose

    ev = Evidence(kind="death", worker_id=0, pid=7, exit_code=1, start_method="spawn")
    ev.reached_worker_init = False
    ev.fileless_main_parts = ["dataset (CellDataset)"]
    diagnosis = diagnose(ev)
    assert (diagnosis.cause, diagnosis.confidence) == ("unpicklable", 0.9)
    assert diagnosis.evidence[:2] == [
        "the worker exited with code 1 while starting under spawn",
        "defined in a __main__ that has no file (a notebook cell, python -c or stdin), which a "
        "spawn worker cannot import: dataset (CellDataset)",
    ]
    assert any(fix.startswith("In a notebook (Jupyter, Colab)") for fix in diagnosis.fixes)


@pytest.mark.parametrize("code", [0xC0000005, 0xC00000FD, 0xC0000409])
def test_windows_crash_status_is_a_native_crash(code: int) -> None:
    from loaderdoctor.forensics import Evidence, diagnose

    ev = Evidence(kind="death", worker_id=0, pid=7, exit_code=code, start_method="spawn")
    ev.reached_worker_init = True
    diagnosis = diagnose(ev)
    assert diagnosis.cause == "native-crash"
    assert diagnosis.evidence[0].startswith(f"the worker ended with Windows status 0x{code:08X} (")


def _machine(cgroups: object, kernel_log_absent: bool) -> object:
    from loaderdoctor.env.facts import Inputs, Machine, Settings
    from loaderdoctor.system.cgroup import MemoryCgroup
    from loaderdoctor.system.container import ContainerInfo
    from loaderdoctor.system.cpu import CpuInfo
    from loaderdoctor.system.kmsg import KernelLog
    from loaderdoctor.system.limits import OpenFiles
    from loaderdoctor.system.memory import HostMemory
    from loaderdoctor.system.platform import Capability
    from loaderdoctor.system.shm import ShmUsage

    GiB = 1 << 30
    kernel = Capability("the kernel log (/dev/kmsg, dmesg)", False, "it is Linux-only", True)
    machine = Machine(
        ShmUsage("/dev/shm", None, None, None, "gone"),
        MemoryCgroup(None, None, None, None, None, None, None, "gone"),
        HostMemory(16 * GiB, 12 * GiB, 0, 0),
        OpenFiles(256, None, 20),
        CpuInfo(8, None, None, 8),
        ContainerInfo(None),
        KernelLog([], False, "gone"),
        (cgroups, *([kernel] if kernel_log_absent else [])),
    )
    settings = Settings(batch_size=None, num_workers=2, prefetch_factor=2)
    return Inputs(machine, settings, probe=None, requested_workers=None)


def test_env_checks_tell_a_platform_without_cgroups_from_unreadable_ones() -> None:
    from loaderdoctor.env.checks_limits import check_cpu
    from loaderdoctor.env.checks_memory import check_memory_limit
    from loaderdoctor.env.checks_runtime import check_kernel_log
    from loaderdoctor.system.platform import Capability

    macos = _machine(Capability("cgroups", False, "it is Linux-only and this is macOS", True), True)
    memory = check_memory_limit(macos)
    assert (memory.status, memory.value) == ("pass", 16 << 30)
    assert memory.message == (
        "host 16.0 GiB (12.0 GiB available); no cgroup limit: cgroups not available here, because "
        "it is Linux-only and this is macOS, so the host's memory is the limit; swap 0 B"
    )
    cpu = check_cpu(macos)
    assert (cpu.status, cpu.message) == (
        "pass",
        "8 cores, affinity None, cgroup quota none (no cgroups): 8 usable",
    )
    kernel = check_kernel_log(macos)
    assert kernel.status == "unknown"
    assert kernel.message == (
        "the kernel log (/dev/kmsg, dmesg) not available here, because it is Linux-only: a worker "
        "killed by SIGKILL cannot be told apart from an OOM kill here"
    )
    hidden = Capability("cgroups", False, "/proc/self/cgroup cannot be read (Permission denied)")
    linux = _machine(hidden, False)
    assert check_memory_limit(linux).status == "unknown"
    assert check_memory_limit(linux).message.split("; ")[1] == (
        "cgroup limit unknown: cgroups not available here, because /proc/self/cgroup cannot be "
        "read (Permission denied)"
    )
    assert check_cpu(linux).status == "unknown"
    assert check_kernel_log(linux).status == "warn"  # Linux: root or CAP_SYSLOG would read it


# --- the package with the Linux-only pieces gone (subprocesses) ---------------------------


@pytest.mark.slow
def test_import_and_what_is_missing() -> None:
    script = textwrap.dedent(
        """
        import json, loaderdoctor
        from loaderdoctor import DataLoader
        from loaderdoctor.system import platform
        print(json.dumps({c.name: c.available for c in platform.capabilities()}))
        """
    )
    result = run_portable(["-c", script], timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    available = json.loads(result.stdout.strip().splitlines()[-1])
    assert available["real-time signals"] is False
    assert available["cgroups"] is False
    assert available["/dev/shm"] is False
    if LINUX or WINDOWS:
        assert available["the resource module (getrlimit)"] is False
        assert available["faulthandler.register"] is False


@pytest.mark.slow
def test_a_supervised_spawn_loader_delivers_every_batch() -> None:
    out = verdict(FAULTY, "clean", "spawn")
    assert out == {"cause": None, "delivered": 12}


# The spawned verdicts below are test_faults' too (it runs these faults under fork only): each
# asserts what test_faults asserts of the same fault, and what these platforms change.


@pytest.mark.slow
def test_sample_error_under_spawn() -> None:
    out = verdict(FAULTY, "raise", "spawn")
    assert (out["error_type"], out["cause"], out["indices"]) == ("ValueError", "sample-error", [21])
    assert "corrupt sample 21" in out["message"]
    assert "Original Traceback" in out["message"]


@pytest.mark.slow
def test_native_crash_under_spawn_has_the_stack() -> None:
    out = verdict(FAULTY, "segv", "spawn")
    assert (out["cause"], out["indices"]) == ("native-crash", [21])
    assert "in __getitem__" in out["python_stack"] and "faulty.py" in out["python_stack"]
    assert out["error_type"] == "WorkerDiedError"


@pytest.mark.slow
def test_exit_under_spawn() -> None:
    out = verdict(FAULTY, "exit", "spawn")
    assert (out["cause"], out["indices"]) == ("worker-exit", [21])
    assert_torch_exit_line(out["message"], 3)


@pytest.mark.slow
@pytest.mark.skipif(WINDOWS, reason="Windows has no SIGKILL to send")
def test_sigkill_under_spawn_says_what_could_not_be_read() -> None:
    out = verdict(FAULTY, "sigkill", "spawn")
    assert (out["cause"], out["indices"]) == ("killed-by-signal", [21])
    assert out["evidence"][0] == (
        "neither the kernel log nor the cgroup OOM counters could be read: an OOM kill is possible"
    )
    kernel = [line for line in out["evidence"] if line.startswith("kernel log not readable: ")]
    assert len(kernel) == 1


@pytest.mark.slow
def test_hang_under_spawn_has_the_stuck_workers_stack() -> None:
    # The sample sleeps 600 s: a verdict within the run's timeout is the watchdog's cut, however
    # slow the loaded machine makes the spawned workers' start (test_faults' bound).
    out = verdict(FAULTY, "hang", "spawn", timeout=240)
    assert (out["cause"], out["indices"]) == ("worker-hang", [21])
    assert out["error_type"] == "WorkerHangError"
    # the worker's main thread comes first, as in a signal's dump
    assert "in __getitem__" in out["python_stack"].split("\n\n")[0]
    dumped_by = [line for line in out["evidence"] if line.startswith("the stuck worker's")]
    if TIMER_DUMP:
        assert len(dumped_by) == 1
        assert dumped_by[0].startswith(
            "the stuck worker's Python stack was dumped by faulthandler.dump_traceback_later"
        )
    else:
        assert dumped_by == []


@pytest.mark.slow
@pytest.mark.skipif(not LINUX, reason="the macOS harness imitates macOS on Linux")
def test_hang_on_macos_dumps_the_stack_on_sigusr2() -> None:
    out = verdict(FAULTY, "hang", "spawn", timeout=90, harness=MACOS_HARNESS)
    assert (out["cause"], out["indices"]) == ("worker-hang", [21])
    # faulthandler's dump on a signal: the thread that took it (the worker's main thread)
    assert out["python_stack"].split("Current thread ", 1)[1].count("in __getitem__") == 1
    assert [line for line in out["evidence"] if line.startswith("the stuck worker's")] == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "cause"),
    [("segv", "native-crash"), pytest.param("hang", "worker-hang", marks=pytest.mark.extended)],
)
def test_healing_under_spawn_finishes_the_epoch(mode: str, cause: str) -> None:
    out = verdict(HEALING, mode, "spawn", "21", timeout=150)
    assert sorted(out["delivered"]) == [i for i in range(48) if i != 21]
    report = out["report"]
    assert (report["status"], report["quarantine"]) == ("healed", [21])
    assert [(i["cause"], i["action"]) for i in report["incidents"]] == [(cause, "quarantined")]


NOTEBOOK_CELL = textwrap.dedent(
    """
    import json, torch
    from loaderdoctor import DataLoader

    class CellDataset(torch.utils.data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, index):
            return torch.tensor([index])

    loader = DataLoader(CellDataset(), batch_size=2, num_workers=2, multiprocessing_context="spawn")
    try:
        for _ in loader:
            pass
        print(json.dumps({"cause": None}))
    except RuntimeError as error:
        print(json.dumps({"cause": error.diagnosis.cause, "evidence": error.diagnosis.evidence}))
    """
)


@pytest.mark.slow
def test_a_dataset_defined_in_a_notebook_cell_is_unpicklable() -> None:
    out = verdict("-c", NOTEBOOK_CELL)
    assert out["cause"] == "unpicklable"
    assert out["evidence"][1].endswith("cannot import: dataset (CellDataset)")


@pytest.mark.slow
def test_env_reports_what_it_can_and_says_what_it_cannot() -> None:
    result = run_portable(["-m", "loaderdoctor", "env", "--json"], timeout=60)
    assert result.returncode in (0, 1), result.stderr[-3000:]
    checks = {check["id"]: check for check in json.loads(result.stdout)["checks"]}
    assert checks["start-method"]["status"] == "pass"
    assert checks["cpu"]["value"] >= 1
    assert checks["memory-limit"]["value"] > 0
    assert checks["shm-size"]["status"] == "unknown"
    assert "/dev/shm not available here, because" in checks["shm-size"]["message"]
    if LINUX:  # the harness hides cgroups that exist: a limit may hide there
        assert checks["memory-limit"]["status"] == "unknown"
        assert (
            "cgroup limit unknown: cgroups not available here" in checks["memory-limit"]["message"]
        )
        assert (
            checks["open-files"]["status"] == "pass"
        )  # psutil reads RLIMIT_NOFILE without resource
    else:
        assert checks["kernel-log"]["status"] == "unknown"
        assert checks["kernel-log"]["message"].startswith(
            "the kernel log (/dev/kmsg, dmesg) not available here, because it is Linux-only"
        )
    if WINDOWS:
        assert checks["open-files"]["status"] == "unknown"
        assert checks["open-files"]["message"].startswith("Windows has no RLIMIT_NOFILE")
    assert not [c["id"] for c in checks.values() if c["status"] == "unknown" and not c["message"]]


@pytest.mark.slow
def test_run_supervises_an_unmodified_command(tmp_path: Path) -> None:
    report_dir = tmp_path / "report"
    command = [sys.executable, FAULTY, "segv", "spawn"]
    result = run_portable(
        ["-m", "loaderdoctor", "run", "--report-dir", str(report_dir), "--", *command], timeout=150
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((report_dir / "report.json").read_text())
    assert report["status"] == "crashed"
    assert [(i["cause"], i["indices"]) for i in report["incidents"]] == [("native-crash", [21])]


@pytest.mark.slow
def test_lint_works(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\nfrom torch.utils.data import DataLoader\n\n"
        "loader = DataLoader(range(8), num_workers=2, collate_fn=lambda b: b)\n"
        "for batch in loader:\n    pass\n"
    )
    result = run_portable(["-m", "loaderdoctor", "lint", str(script)], timeout=60)
    assert result.returncode == 1, result.stderr[-3000:]
    codes = [line.split()[1] for line in result.stdout.splitlines() if " LD1" in line]
    assert codes == ["LD101", "LD102"]
