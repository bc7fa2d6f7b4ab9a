"""``loaderdoctor env`` end to end: the real CLI in a subprocess, under real constraints."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from conftest import charged_baseline, in_cgroup, memory_cgroup, run_python

FIXTURE = Path(__file__).parent / "fixtures" / "env" / "images.py"
SAMPLE_BYTES = 3 * 256 * 256 * 4  # images.py: one float32 3×256×256 tensor
INDEX_BYTES = 8  # and its int64 index
MiB = 1024 * 1024
GiB = 1024 * MiB


def run_cli(
    args: Sequence[str],
    *,
    prefix: Sequence[str] = (),
    preexec_fn: Callable[[], None] | None = None,
    timeout: float = 90,
) -> tuple[int, str, str]:
    result = run_python(
        ["-m", "loaderdoctor", "env", *args],
        wrapper=list(prefix),
        preexec_fn=preexec_fn,
        timeout=timeout,
    )
    return result.returncode, result.stdout, result.stderr


def checks_of(stdout: str) -> dict[str, dict[str, Any]]:
    data = json.loads(stdout)
    assert data["schema"] == 1
    return {check["id"]: check for check in data["checks"]}


def needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (mount namespaces, cgroups)")


def needs_unshare() -> None:
    needs_root()
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=10)
    if probe.returncode != 0:
        pytest.skip(f"unshare -m is not permitted here: {probe.stderr.decode().strip()}")


def small_shm_prefix(size: str = "64M") -> list[str]:
    # a private mount namespace: the 64 MiB /dev/shm docker gives a container, for this run only
    return [
        "unshare",
        "-m",
        "sh",
        "-c",
        f'mount -t tmpfs -o size={size} tmpfs /dev/shm && exec "$@"',
        "sh",
    ]


@pytest.mark.slow
def test_env_json_without_target() -> None:
    code, stdout, stderr = run_cli(["--json"])
    checks = checks_of(stdout)
    assert "shm-size" in checks and "versions" in checks
    failed = any(check["status"] == "fail" for check in checks.values())
    assert code == (1 if failed else 0), stderr
    assert checks["versions"]["value"]["python"] == ".".join(map(str, sys.version_info[:3]))


@pytest.mark.slow
def test_env_terminal_output_ends_with_summary() -> None:
    code, stdout, _ = run_cli([])
    assert code in (0, 1)
    last = stdout.strip().splitlines()[-1]
    words = last.split(", ")
    assert [word.split()[1] for word in words] == ["pass", "warn", "fail", "unknown"]


@pytest.mark.slow
def test_env_without_target_does_not_import_torch() -> None:
    code = (
        "import sys, contextlib, io\n"
        "from loaderdoctor.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['env', '--json'])\n"
        "print('torch' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip() == "False", result.stderr


@pytest.mark.slow
def test_bad_spec_is_one_line_on_stderr(tmp_path: Path) -> None:
    code, stdout, stderr = run_cli(["--target", f"{tmp_path}/missing.py:ds"])
    assert code == 2
    assert stdout == ""
    assert stderr == f"loaderdoctor env: error: no such file: {tmp_path}/missing.py\n"


@pytest.mark.slow
def test_target_dataloader_settings_and_real_batch_bytes() -> None:
    _, stdout, stderr = run_cli(["--json", "--target", f"{FIXTURE}:make_loader"])
    checks = checks_of(stdout)
    need = checks["shm-need"]
    assert need["details"]["batch_bytes"] == 16 * (SAMPLE_BYTES + INDEX_BYTES), stderr
    assert need["details"]["batches_in_flight"] == 2 * 4  # the DataLoader's workers × prefetch
    assert checks["worker-memory"]["value"] > 0
    assert checks["start-method"]["details"]["picklable"] is True


@pytest.mark.slow
def test_unpicklable_dataset_is_reported() -> None:
    _, stdout, _ = run_cli(["--json", "--target", f"{FIXTURE}:unpicklable", "--num-workers", "1"])
    start = checks_of(stdout)["start-method"]
    assert start["details"]["picklable"] is False
    # fork copies the dataset, so it still works there (a warning); spawn cannot (a failure)
    assert start["status"] == ("warn" if start["value"] == "fork" else "fail")
    assert "lambda" in start["message"]


@pytest.mark.slow
@pytest.mark.root
def test_shm_size_in_a_64_mib_shm() -> None:
    needs_unshare()
    code, stdout, stderr = run_cli(["--json"], prefix=small_shm_prefix())
    shm = checks_of(stdout)["shm-size"]
    assert shm["status"] == "fail", stderr
    assert shm["value"] == 64 * MiB
    assert shm["details"]["total_bytes"] == 64 * MiB
    assert code == 1


@pytest.mark.root
@pytest.mark.slow
def test_shm_need_fails_when_batches_in_flight_exceed_shm() -> None:
    needs_unshare()
    # 16 samples of 768 KiB = 12 MiB a batch; 4 workers × 2 prefetch × 1.25 = 120 MiB > 64 MiB
    args = ["--json", "--target", f"{FIXTURE}:dataset", "--batch-size", "16", "--num-workers", "4"]
    code, stdout, stderr = run_cli(args, prefix=small_shm_prefix())
    need = checks_of(stdout)["shm-need"]
    batch = 16 * (SAMPLE_BYTES + INDEX_BYTES)
    assert need["status"] == "fail", stderr
    assert need["details"]["batch_bytes"] == batch
    assert need["value"] == int(batch * 4 * 2 * 1.25)
    assert need["details"]["free_bytes"] <= 64 * MiB
    assert code == 1


def run_in_memory_cgroup(args: Sequence[str], limit: int) -> tuple[int, str, str]:
    with memory_cgroup(limit) as group:
        return run_cli(args, prefix=in_cgroup(group))


@pytest.mark.slow
@pytest.mark.root
def test_memory_limit_reports_a_1_gib_cgroup() -> None:
    _, stdout, stderr = run_in_memory_cgroup(["--json"], GiB)
    memory = checks_of(stdout)["memory-limit"]
    assert memory["value"] == GiB, stderr
    assert memory["details"]["cgroup_limit_bytes"] == GiB
    assert memory["details"]["cgroup_version"] == 1
    assert 0 < memory["details"]["cgroup_usage_bytes"] < GiB
    assert "limit 1.0 GiB" in memory["message"]


@pytest.mark.root
@pytest.mark.slow
def test_worker_memory_fails_against_a_memory_cgroup() -> None:
    # hungry keeps 64 MiB per sample: 3 batches of 2 = 384 MiB private in one worker, × 4 workers.
    # The cgroup holds the main process (measured: the CUDA build's torch alone is ~509 MiB) and
    # the probe's one worker, with room to spare; four such workers do not fit.
    floor = charged_baseline("torch", "loaderdoctor.cli.env", FIXTURE.stem, path=[FIXTURE.parent])
    limit = floor + 6 * 64 * MiB + 256 * MiB
    args = ["--json", "--target", f"{FIXTURE}:hungry", "--batch-size", "2", "--num-workers", "4"]
    _, stdout, stderr = run_in_memory_cgroup(args, limit)
    worker = checks_of(stdout)["worker-memory"]
    assert worker["status"] == "fail", stderr
    assert worker["details"]["batches_loaded"] == 3
    assert worker["details"]["worker_private_bytes"] >= 6 * 64 * MiB
    assert worker["details"]["projected_bytes"] > worker["details"]["available_bytes"]


@pytest.mark.slow
def test_open_files_with_rlimit_nofile_128() -> None:
    def limit_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))

    _, stdout, stderr = run_cli(["--json"], preexec_fn=limit_files)
    files = checks_of(stdout)["open-files"]
    assert files["value"] == 128, stderr
    # more needed than the limit fails; a limit under 1024 warns however many are needed
    assert files["status"] == ("fail" if files["details"]["need"] > 128 else "warn")
    assert files["details"]["hard_limit"] == 128


@pytest.mark.slow
def test_open_files_fails_when_workers_need_more_than_the_limit() -> None:
    def limit_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))

    _, stdout, _ = run_cli(["--json", "--num-workers", "16"], preexec_fn=limit_files)
    files = checks_of(stdout)["open-files"]
    assert files["status"] == "fail"
    assert files["details"]["need"] > 128
