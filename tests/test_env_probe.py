"""The load probe behind shm-need/worker-memory: bounded in time, and it kills what it starts."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psutil
import pytest

from loaderdoctor.env.core import run_env_checks
from loaderdoctor.spec import load_dataset

FIXTURE = Path(__file__).parent / "fixtures" / "env" / "images.py"


def children() -> set[int]:
    return {child.pid for child in psutil.Process().children()}


@pytest.mark.slow
def test_a_stuck_sample_is_abandoned_and_its_worker_killed() -> None:
    stuck = load_dataset(f"{FIXTURE}:Stuck")  # a Dataset class is a zero-argument factory
    # Only the probe's own processes: a forkserver or another test's loader may outlive its test.
    before = children()
    started = time.monotonic()
    report = run_env_checks(stuck, batch_size=2, probe_timeout_s=1.0)
    assert time.monotonic() - started < 300  # the 600 s sleep was cut short, at any load
    need = report.check("shm-need")
    assert need.status == "unknown"
    assert "stopped after 1 s with 0 batch(es) loaded" in need.message
    assert children() - before == set()


@pytest.mark.slow
def test_a_failing_sample_is_named() -> None:
    before = children()
    report = run_env_checks(load_dataset(f"{FIXTURE}:Broken"), batch_size=2, num_workers=1)
    need = report.check("worker-memory")
    assert need.status == "unknown"
    assert (
        need.message
        == "could not load a batch: loading a batch raised ValueError: corrupt sample 0 (sample 0)"
    )
    assert children() - before == set()


TRUNCATED_IMAGES = '''
from pathlib import Path

from PIL import Image
import torch
from torch.utils.data import Dataset

ROOT = Path(__file__).parent / "images"


class Folder(Dataset):
    """ImageFolder's shape: ``samples`` lists (file, label); the second image is truncated."""

    def __init__(self):
        ROOT.mkdir(exist_ok=True)
        self.samples = []
        for number in range(6):
            path = ROOT / f"img{number}.jpg"
            if not path.exists():
                Image.new("RGB", (32, 32), (number, 0, 0)).save(path)
                if number == 1:
                    path.write_bytes(path.read_bytes()[:100])
            self.samples.append((str(path), 0))

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        path, label = self.samples[index]
        with Image.open(path) as image:
            pixels = torch.tensor(list(image.convert("L").getdata()), dtype=torch.uint8)
        return pixels, label


train = Folder()
'''


@pytest.mark.slow
def test_a_bad_image_in_the_first_batch_is_named_by_index_and_file(tmp_path: Path) -> None:
    from conftest import run_python

    (tmp_path / "data.py").write_text(TRUNCATED_IMAGES)
    result = run_python(
        ["-m", "loaderdoctor", "env", "--target", "data.py:train", "--batch-size", "4", "--json"],
        cwd=str(tmp_path),
    )
    checks = {check["id"]: check for check in json.loads(result.stdout)["checks"]}
    bad = tmp_path / "images" / "img1.jpg"
    assert checks["worker-memory"]["message"] == (
        "could not load a batch: loading a batch raised OSError: Truncated File Read "
        f"(sample 1, {bad})"
    )
