"""Does watching a job with ``loaderdoctor top`` change it? Batches and time, watched and not.

A job under ``loaderdoctor run`` loads a fixed dataset (2 workers, a little CPU per sample) and
prints its batches' checksum and its loading time. It runs ROUNDS times alone and ROUNDS times
while ``top`` attaches and detaches ATTACHES times (what ``top --json`` does: find the job, map
its tables, look twice 0.2 s apart, unmap), alternately so that the machine's load falls on both
alike. The batches must be the same;
the time ratio (watched / alone, medians) is the figure.

Run: ``.venv/bin/python benchmarks/top.py``.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROUNDS = 3
ATTACHES = 20
JOB = """\
import hashlib
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Work(Dataset):
    def __len__(self):
        return 32000

    def __getitem__(self, index):
        generator = torch.Generator().manual_seed(index)
        sample = torch.rand(64, 64, generator=generator)
        for _ in range(4):  # a little CPU per sample, like a decode
            sample = (sample @ sample).softmax(dim=1)
        return sample.sum().reshape(1)


if __name__ == "__main__":
    loader = DataLoader(Work(), batch_size=8, num_workers=2)
    digest = hashlib.sha256()
    started = time.perf_counter()
    for batch in loader:
        digest.update(batch.numpy().tobytes() if hasattr(batch, "numpy") else bytes(batch))
    print(digest.hexdigest(), time.perf_counter() - started, flush=True)
"""


def run_job(folder: Path, watched: bool) -> tuple[str, float, int, float]:
    """(checksum of the batches, seconds the loading took, looks ``top`` took, CPU seconds the
    looks cost: on a machine with fewer free cores than the job's workers, ``top`` takes its CPU
    time from them)."""
    report_dir = folder / ("watched" if watched else "alone")
    command = [sys.executable, "-m", "loaderdoctor", "run", "--report-dir", str(report_dir)]
    job = subprocess.Popen(
        [*command, "--", sys.executable, "job.py"],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    looks = 0
    cpu = time.process_time()
    try:
        if watched:
            looks = watch(report_dir, job)
        cpu = time.process_time() - cpu
        out, _ = job.communicate(timeout=600)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(timeout=30)
    digest, seconds = out.split()[-2:]
    return digest, float(seconds), looks, cpu


def watch(report_dir: Path, job: subprocess.Popen[str]) -> int:
    """Attach and detach ``top`` ATTACHES times while the job's loader runs."""
    from loaderdoctor.top.find import TopError, find_job
    from loaderdoctor.top.watch import Watcher

    looks = 0
    deadline = time.monotonic() + 300
    while looks < ATTACHES and job.poll() is None and time.monotonic() < deadline:
        try:
            watcher = Watcher(find_job(str(report_dir)))
        except TopError:  # not started yet
            time.sleep(0.1)
            continue
        try:
            snapshot = watcher.snapshot(interval_s=0.2)
        finally:
            watcher.close()
        if any(loader.workers for p in snapshot.processes for loader in p.loaders):
            looks += 1  # a look that saw the loader's workers
            time.sleep(0.3)
        else:
            time.sleep(0.1)
    return looks


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="ld-top-bench-") as name:
        folder = Path(name)
        (folder / "job.py").write_text(JOB)
        alone: list[float] = []
        watched: list[float] = []
        digests = set()
        all_looks = []
        cpu_s = []
        for _ in range(ROUNDS):
            for is_watched in (False, True):
                digest, seconds, looks, cpu = run_job(folder, is_watched)
                digests.add(digest)
                (watched if is_watched else alone).append(seconds)
                if is_watched:
                    all_looks.append(looks)
                    cpu_s.append(round(cpu, 2))
    same = "the same batches" if len(digests) == 1 else f"DIFFERENT batches: {sorted(digests)}"
    ratio = statistics.median(watched) / statistics.median(alone)
    print(
        f"loading time alone: median {statistics.median(alone):.2f} s {[round(s, 2) for s in alone]}; "
        f"watched (top attached {all_looks} times): median {statistics.median(watched):.2f} s "
        f"{[round(s, 2) for s in watched]}; ratio {ratio:.3f}; {same}; CPU seconds the looks "
        f"took: {cpu_s}; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
