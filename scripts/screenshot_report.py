"""Render a run report's HTML and screenshot it in headless Chromium (a visual check).

    python scripts/screenshot_report.py DIR [--out report.png] [--width 1100] [--height 1600]

DIR is a ``loaderdoctor run`` report folder (or its report.json); report.html is rewritten from
report.json first. Needs ``chromium`` (``apt-get install chromium``; ``.ci/run`` installs it for
``tests/test_report_html_browser.py``, which measures the pages in it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def screenshot(
    html: Path, png: Path, width: int = 1100, height: int = 1600, timeout: float = 60
) -> Path:
    """Chromium loads the file with the network off-limits by flags, and saves a PNG of it."""
    browser = find_chromium()
    if browser is None:
        raise FileNotFoundError("chromium not found (apt-get install chromium)")
    profile = tempfile.mkdtemp(prefix="loaderdoctor-chromium-")
    try:
        subprocess.run(
            [
                browser,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                f"--screenshot={png.resolve()}",
                html.resolve().as_uri(),
            ],
            check=True,
            timeout=timeout,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    return png


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="the report folder or its report.json")
    parser.add_argument("--out", type=Path, default=Path("report.png"))
    parser.add_argument("--width", type=int, default=1100)
    parser.add_argument("--height", type=int, default=1600)
    args = parser.parse_args(argv)

    from loaderdoctor.report.html.run import write_html
    from loaderdoctor.runner.core import RunUsageError, load_report

    try:
        report = load_report(args.report)
    except RunUsageError as error:
        print(f"screenshot_report: {error}", file=sys.stderr)
        return 2
    folder = args.report if args.report.is_dir() else args.report.parent
    html = write_html(report, folder)
    try:
        screenshot(html, args.out, args.width, args.height)
    except (FileNotFoundError, subprocess.SubprocessError) as error:
        print(f"screenshot_report: {error}", file=sys.stderr)
        return 1
    print(os.fspath(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
