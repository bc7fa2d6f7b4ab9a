"""The faults planted in a stack's samples and the ledger of what the training loop received.

Imported by the stack scripts (``tests/ecosystem/stacks/*.py``), in the main process and in the
DataLoader workers. The plan comes from ``LD_ECO_PLAN`` (JSON): the index (or key) that raises,
the one whose worker is SIGKILLed once, the one that segfaults every time, and a folder for the
"once" flag. The ledger (``LD_ECO_LEDGER``) gets one line per batch the training loop received,
written in the main process, so the test compares the delivered multiset with the plan.
``Files`` is the map-style dataset of the stacks whose own loading code is torch's.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
from pathlib import Path
from typing import Any

import torch

SAMPLES = 192
PLAN: dict[str, Any] = json.loads(os.environ.get("LD_ECO_PLAN", "{}"))


def fault(sample: Any) -> None:
    """Plant the fault of ``sample`` (an index or a key), if it has one."""
    if sample == PLAN.get("raise"):
        raise OSError(f"image file is truncated ({sample})")
    if sample == PLAN.get("kill"):
        flag = Path(PLAN["flags"]) / f"killed-{sample}"
        if not flag.exists():
            flag.touch()
            os.kill(os.getpid(), signal.SIGKILL)
    if sample == PLAN.get("segv"):
        ctypes.string_at(0)  # a real SIGSEGV, every time


def record(samples: Any) -> None:
    """The training loop received ``samples`` (a tensor, a list of ints or keys)."""
    values = samples.tolist() if hasattr(samples, "tolist") else list(samples)
    with open(os.environ["LD_ECO_LEDGER"], "a") as ledger:
        ledger.write(json.dumps(values) + "\n")


class Files(torch.utils.data.Dataset):
    """``SAMPLES`` samples named by a file list (the name a verdict gives a culprit), each with
    its planted fault; ``load`` makes the sample, a subclass's for its stack's own shape."""

    folder = "/data/files"

    def __init__(self) -> None:
        self.files = [f"{self.folder}/{i:04d}.bin" for i in range(SAMPLES)]

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> Any:
        fault(index)
        return self.load(index)

    def load(self, index: int) -> Any:
        return torch.full((4,), float(index)), index
