"""The faults planted in a stack's samples and the ledger of what the training loop received.

Imported by the stack scripts (``tests/ecosystem/stacks/*.py``), in the main process and in the
DataLoader workers. The plan comes from ``LD_ECO_PLAN`` (JSON): the index (or key) that raises,
the one whose worker is SIGKILLed once, the one that segfaults every time, and a folder for the
"once" flag. The ledger (``LD_ECO_LEDGER``) gets one line per batch the training loop received,
written in the main process, so the test compares the delivered multiset with the plan.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
from pathlib import Path
from typing import Any

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
