"""How fast, and in how much memory, does ``loaderdoctor explain`` read a big log?

Run: ``python benchmarks/explain.py [--mb 100]``. Writes a training log of that size to a
temporary file (progress and loss lines, a warning now and then, and at the end a worker's
traceback, a bus error and torch's ``exited unexpectedly``), then runs ``loaderdoctor explain`` on
it in a child process, side by side with the floor of reading a log in Python (a child that
iterates over the file's lines and does nothing else), and prints each one's wall and CPU time
and peak resident memory (the child's ``ru_maxrss``), and the ratio of their CPU times (wall
time depends on the machine's load; CPU time much less). The target: 100 MB in seconds, with
peak memory independent of the log's size.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

FLOOR = "import sys\nfor line in open(sys.argv[1], 'rb'): pass\n"
RUSAGE = (
    "import resource, subprocess, sys, time\n"
    "start = time.perf_counter()\n"
    "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
    "seconds = time.perf_counter() - start\n"
    "usage = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(code, seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss)\n"
)
TAIL = """\
ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).
Traceback (most recent call last):
  File "/home/u/project/finetune.py", line 88, in <module>
    for images, targets in train_loader:
  File "/opt/conda/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1133, in _try_get_data
    raise RuntimeError(f"DataLoader worker (pid(s) {pids_str}) exited unexpectedly") from e
RuntimeError: DataLoader worker (pid(s) 31337) exited unexpectedly
"""


def write_log(path: Path, megabytes: int) -> int:
    target = megabytes * 1024 * 1024
    lines = 0
    with open(path, "w", encoding="utf-8") as log:
        size = 0
        while size < target:
            step = lines
            if step % 5000 == 4999:
                text = "/opt/conda/lib/python3.11/site-packages/torch/utils/data/dataloader.py:"
                text += "665: UserWarning: This DataLoader will create 16 worker processes\n"
            else:
                text = f"epoch {step // 10000} step {step:>8} loss {1 / (1 + step):.6f} lr 3e-4\n"
            log.write(text)
            size += len(text)
            lines += 1
        log.write(TAIL)
    return lines + TAIL.count("\n")


def measure(command: list[str]) -> tuple[int, float, float, int]:
    """Exit status, wall seconds, CPU seconds and peak RSS (KiB) of a child running ``command``."""
    out = subprocess.run(
        [sys.executable, "-c", RUSAGE, *command], capture_output=True, text=True, check=True
    ).stdout.split()
    return int(out[0]), float(out[1]), float(out[2]), int(out[3])


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mb", type=int, default=100, help="size of the generated log (MB)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "train.log"
        lines = write_log(log, options.mb)
        size = os.path.getsize(log) / 2**20
        code, explain_s, explain_cpu, explain_kib = measure(
            [sys.executable, "-m", "loaderdoctor", "explain", str(log)]
        )
        _, floor_s, floor_cpu, floor_kib = measure([sys.executable, "-c", FLOOR, str(log)])
    print(f"log: {size:.0f} MB, {lines:,} lines (exit status of explain: {code})")
    for name, wall, cpu, kib in (
        ("loaderdoctor explain", explain_s, explain_cpu, explain_kib),
        ("reading lines only  ", floor_s, floor_cpu, floor_kib),
    ):
        print(f"  {name} : {wall:6.2f} s wall {cpu:6.2f} s CPU  peak RSS {kib / 1024:6.1f} MiB")
    print(f"  explain / read CPU time : {explain_cpu / floor_cpu:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
