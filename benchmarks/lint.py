"""How fast is ``loaderdoctor lint`` on a real repository?

Run: ``python benchmarks/lint.py PATH [--repeat 5]``, PATH being a checkout of a training repo
(for example ``git clone --depth 1 https://github.com/pytorch/vision``). Prints the lines per
second of ``check_paths(PATH)`` (median of the runs) side by side with the floor every AST linter
pays, ``ast.parse`` of every ``.py`` file of the same tree, as a ratio. The target is at least
20,000 lines/s on one core.
"""

from __future__ import annotations

import argparse
import ast
import statistics
import sys
import time
from pathlib import Path

from loaderdoctor.lint import check_paths
from loaderdoctor.lint.engine import iter_files, read_source


def _parse_everything(path: Path) -> None:
    for file, _ in iter_files([path]):
        try:
            ast.parse(read_source(file)[0].text)
        except (SyntaxError, ValueError, UnicodeDecodeError):
            pass


def _median_seconds(action: object, repeat: int) -> float:
    timings = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()  # type: ignore[operator]
        timings.append(time.perf_counter() - start)
    return statistics.median(timings)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("path", type=Path, help="a folder of Python code (a training repo)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (median)")
    options = parser.parse_args()
    if not options.path.is_dir():
        print(f"benchmarks/lint.py: not a folder: {options.path}", file=sys.stderr)
        return 2
    report = check_paths([options.path])  # also warms the file cache for both measurements
    lint_s = _median_seconds(lambda: check_paths([options.path]), options.repeat)
    parse_s = _median_seconds(lambda: _parse_everything(options.path), options.repeat)
    lines = report.lines_checked
    print(f"{options.path}: {report.files_checked} files, {lines:,} lines")
    print(f"  loaderdoctor lint : {lint_s:7.3f} s  {lines / lint_s:>10,.0f} lines/s")
    print(f"  ast.parse only    : {parse_s:7.3f} s  {lines / parse_s:>10,.0f} lines/s")
    print(f"  lint / parse time : {lint_s / parse_s:.2f}  ({len(report.findings)} findings)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
