"""Progress where no bar can be drawn: ``| tee``, nohup, a Slurm log.

stderr a terminal: rich's bar. Anything else: a line at a steady interval (every 10 s; the tests
set ``LOADERDOCTOR_PROGRESS_INTERVAL`` shorter), with done/total, the rate and the time left.
"""

from __future__ import annotations

import io
import re
import textwrap
from pathlib import Path

import pytest

from cli_terminal import plain, run_in_pty
from conftest import run_python
from loaderdoctor.report.progress import ProgressLines, format_duration


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_line_per_interval_with_rate_and_time_left() -> None:
    clock, out = Clock(), io.StringIO()
    lines = ProgressLines("scanning", "samples", out, every_s=10, clock=clock)
    for now, done in [(0, 0), (4, 200), (10, 500), (15, 700), (20.5, 1000), (31, 1500)]:
        clock.now = 100 + now
        lines.update(done, 5000)
    assert out.getvalue().splitlines() == [
        "scanning: 500/5000 samples (10%), 50/s, about 1 min 30 s left, 10 s so far",
        "scanning: 1000/5000 samples (20%), 49/s, about 1 min 22 s left, 20 s so far",
        "scanning: 1500/5000 samples (30%), 48/s, about 1 min 12 s left, 31 s so far",
    ]


def test_a_resumed_scan_counts_its_rate_from_where_it_resumed() -> None:
    clock, out = Clock(), io.StringIO()
    lines = ProgressLines("scanning", "samples", out, every_s=10, clock=clock)
    lines.update(4000, 5000)  # 4000 scanned before the interruption
    clock.now += 10
    lines.update(4100, 5000)
    assert (
        out.getvalue()
        == "scanning: 4100/5000 samples (82%), 10/s, about 1 min 30 s left, 10 s so far\n"
    )


def test_tune_names_what_runs_and_a_new_phase_restarts_the_rate() -> None:
    clock, out = Clock(), io.StringIO()
    lines = ProgressLines("tuning", "trials", out, every_s=10, clock=clock)
    lines.update(0, 8, "workers=0")
    clock.now += 20
    lines.update(4, 8, "workers=4 prefetch=2")
    lines.update(0, 2, "soak epoch 1/2")  # the soak counts epochs from 0 again
    clock.now += 12
    lines.update(1, 2, "soak epoch 2/2")
    assert out.getvalue().splitlines() == [
        "tuning: 4/8 trials (50%), now workers=4 prefetch=2, 0.2/s, about 20 s left, 20 s so far",
        "tuning: 1/2 trials (50%), now soak epoch 2/2, 0.1/s, about 12 s left, 12 s so far",
    ]


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.4, "0 s"), (59.4, "59 s"), (61, "1 min 01 s"), (7325, "2 h 02 min")]
)
def test_durations(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


SLOW_DATASET = textwrap.dedent(
    """
    import time

    import torch


    class Slow(torch.utils.data.Dataset):
        def __len__(self):
            return 40

        def __getitem__(self, index):
            time.sleep(0.05)
            return torch.zeros(4)


    train = Slow()
    """
)
LINE = re.compile(
    r"scanning: (\d+)/40 samples \(\d+%\), [0-9.]+/s(, about \d+ s left)?, \d+ s so far"
)


@pytest.mark.slow
@pytest.mark.parametrize("through", ["pipe", "pty"])
def test_scan_prints_progress_lines_to_a_log_and_a_bar_to_a_terminal(
    tmp_path: Path, through: str
) -> None:
    (tmp_path / "data.py").write_text(SLOW_DATASET)
    args = ["-m", "loaderdoctor", "scan", "data.py:train", "--num-workers", "1"]
    fast = {"LOADERDOCTOR_PROGRESS_INTERVAL": "0.2"}
    if through == "pipe":
        result = run_python(args, cwd=str(tmp_path), env=fast)
        assert result.returncode == 0, result.stderr
        lines = result.stderr.splitlines()
        assert lines, "no progress line in a log"
        for line in lines:
            assert LINE.fullmatch(line), line
        done = [int(LINE.fullmatch(line).group(1)) for line in lines]  # type: ignore[union-attr]
        assert done == sorted(done) and done[-1] <= 40
    else:
        result = run_in_pty(args, cwd=str(tmp_path), env=fast)
        assert result.returncode == 0, result.stdout
        shown = plain(result.stdout)
        assert "━" in shown  # rich's bar, redrawn in place
        assert not any(LINE.fullmatch(line) for line in shown.splitlines())
    assert "scanned 40 samples in " in (result.stdout)
