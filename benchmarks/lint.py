"""How fast is ``loaderdoctor lint`` on a real repository, start-up included?

Run: ``python benchmarks/lint.py PATH [--repeat 5]``, PATH being a checkout of a training repo
(for example ``git clone --depth 1 https://github.com/Megvii-BaseDetection/YOLOX``, 11k lines, or a
folder of several repositories: the issue's yardstick is 20k lines). Each run is a fresh Python
process, as a user's ``loaderdoctor lint`` is, and reports:

- start-up: from the first import of ``loaderdoctor.lint`` to the first file parsed (target
  within 0.3 s);
- the whole run: lines per second of ``check_paths(PATH)`` counted from that first import
  (target at least 30,000 lines/s over 20k lines), side by side with the floor every AST linter
  pays, ``ast.parse`` of the same files in a fresh process, as a ratio.

Medians of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

_LINT = """
import ast, json, sys, time
start, cpu = time.perf_counter(), time.process_time()
first = []
_parse = ast.parse
def timed_parse(*args, **kwargs):
    if not first:
        first.append((time.perf_counter(), time.process_time()))
    return _parse(*args, **kwargs)
ast.parse = timed_parse
from loaderdoctor.lint import check_paths
report = check_paths([sys.argv[1]])
end, cpu_end = time.perf_counter(), time.process_time()
first = first or [(end, cpu_end)]
print(json.dumps({"startup": first[0][0] - start, "total": end - start,
                  "startup_cpu": first[0][1] - cpu, "total_cpu": cpu_end - cpu,
                  "lines": report.lines_checked, "files": report.files_checked,
                  "findings": len(report.findings)}))
"""

_PARSE = """
import ast, json, sys, time
from pathlib import Path
start, cpu = time.perf_counter(), time.process_time()
for path in sorted(Path(sys.argv[1]).rglob("*.py")):
    if not path.is_file():  # fastMRI has a folder named unet_reproduce_20201111.py
        continue
    try:
        ast.parse(path.read_bytes())
    except (SyntaxError, ValueError):
        pass
print(json.dumps({"total": time.perf_counter() - start, "total_cpu": time.process_time() - cpu}))
"""


def _run(code: str, path: Path) -> dict[str, float]:
    result = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=600
    )
    if result.returncode != 0:
        raise RuntimeError(result.stderr)
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("path", type=Path, help="a folder of Python code (a training repo)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (median)")
    options = parser.parse_args()
    if not options.path.is_dir():
        print(f"benchmarks/lint.py: not a folder: {options.path}", file=sys.stderr)
        return 2
    _run(_LINT, options.path)  # warms the file cache for both measurements
    lints = [_run(_LINT, options.path) for _ in range(options.repeat)]
    parses = [_run(_PARSE, options.path) for _ in range(options.repeat)]
    lines = int(lints[0]["lines"])
    print(f"{options.path}: {int(lints[0]['files'])} files, {lines:,} lines")
    for clock, suffix in (
        ("wall clock", ""),
        ("CPU time (what a busy machine distorts least)", "_cpu"),
    ):
        startup = statistics.median(run[f"startup{suffix}"] for run in lints)
        lint_s = statistics.median(run[f"total{suffix}"] for run in lints)
        parse_s = statistics.median(run[f"total{suffix}"] for run in parses)
        print(f" {clock}:")
        print(f"  start-up (import to first parse): {startup:6.3f} s  (target <= 0.3 s)")
        print(
            f"  loaderdoctor lint, start-up incl.: {lint_s:6.3f} s  {lines / lint_s:>9,.0f} lines/s"
            "  (target >= 30,000)"
        )
        print(
            f"  ast.parse only                   : {parse_s:6.3f} s  {lines / parse_s:>9,.0f} lines/s"
        )
        print(f"  lint / parse time                : {lint_s / parse_s:.2f}")
    print(f" findings: {int(lints[0]['findings'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
