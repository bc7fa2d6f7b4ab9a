"""litdata's StreamingDataset with a planted SIGKILL (a module of its own: litdata's loaders
start their workers with spawn, which imports the class by name)."""

from __future__ import annotations

import os
import signal
from typing import Any

import litdata


class Planted(litdata.StreamingDataset):
    """``LD_KILL_AT``: SIGKILL the worker that reads this id, once (``flags``: its flag file's
    folder)."""

    flags = ""

    def __getitem__(self, index: Any) -> Any:
        sample = super().__getitem__(index)
        flag = os.path.join(self.flags, "killed")
        if str(int(sample["id"])) == os.environ.get("LD_KILL_AT") and not os.path.exists(flag):
            open(flag, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return sample
