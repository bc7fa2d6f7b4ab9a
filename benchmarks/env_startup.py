"""How long ``python -m loaderdoctor env --json`` takes without a target (median of 5 runs).

Run: ``.venv/bin/python benchmarks/env_startup.py``. Timing belongs here, not in a test assert.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

RUNS = 5


def time_once() -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "loaderdoctor", "env", "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    return time.perf_counter() - started


def main() -> None:
    time_once()  # warm the page cache and bytecode caches
    timings = [time_once() for _ in range(RUNS)]
    print(
        f"loaderdoctor env --json: median {statistics.median(timings) * 1000:.0f} ms "
        f"over {RUNS} runs (min {min(timings) * 1000:.0f} ms, max {max(timings) * 1000:.0f} ms)"
    )


if __name__ == "__main__":
    main()
