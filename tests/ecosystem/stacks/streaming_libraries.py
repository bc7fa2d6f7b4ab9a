"""Clean jobs of the streaming libraries, unchanged: MosaicML ``streaming`` (MDS shards written
here, read by a torch DataLoader) and litdata (chunks ``optimize``d here, read by a torch
DataLoader, by litdata's own ``StreamingDataLoader``; with ``LD_DROP_IN`` both also by
loaderdoctor's drop-in). ARGV:
library, data folder, ledger prefix; each loader writes the ids it delivered to PREFIX-NAME.json.
``LD_KILL_AT``: SIGKILL the worker that reads this id, once (a flag file in the data folder).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

import torch

SAMPLES = 200


def kill_once(sample_id: int, folder: str) -> None:
    flag = os.path.join(folder, "killed")
    if str(sample_id) == os.environ.get("LD_KILL_AT") and not os.path.exists(flag):
        open(flag, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)


def drain(loader: Any, ledger: str) -> None:
    ids = [int(v) for batch in loader for v in batch["id"]]
    with open(ledger, "w") as out:
        json.dump(ids, out)


def mosaic(folder: str, prefix: str) -> None:
    from streaming import MDSWriter, StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    data = os.path.join(folder, "mds")
    if not os.path.exists(data):
        with MDSWriter(out=data, columns={"id": "int"}, size_limit=2048) as out:
            for i in range(SAMPLES):
                out.write({"id": i})

    class Planted(StreamingDataset):
        def __getitem__(self, at: int) -> Any:
            sample = super().__getitem__(at)
            kill_once(int(sample["id"]), folder)
            return sample

    clean_stale_shared_memory()
    dataset = Planted(local=data, batch_size=8, shuffle=False)
    drain(torch.utils.data.DataLoader(dataset, batch_size=8, num_workers=2), f"{prefix}-torch.json")
    if os.environ.get("LD_DROP_IN"):
        from loaderdoctor import DataLoader

        dropin = DataLoader(dataset, batch_size=8, num_workers=2, heal=True)
        drain(dropin, f"{prefix}-dropin.json")


def item(i: int) -> dict[str, Any]:
    return {"id": i}


def litdata_data(folder: str, prefix: str) -> None:
    """litdata's chunks, written by its ``optimize`` in a process of their own (a loader built in
    the process that optimized hung under load, litdata 0.2.76)."""
    import litdata

    litdata.optimize(
        fn=item,
        inputs=list(range(SAMPLES)),
        output_dir=os.path.join(folder, "chunks"),
        chunk_bytes="2KB",
        num_workers=1,
    )


def litdata(folder: str, prefix: str) -> None:
    import litdata

    data = os.path.join(folder, "chunks")
    from planted_litdata import Planted

    planted = Planted(data)
    planted.flags = folder
    torch_loader = torch.utils.data.DataLoader(planted, batch_size=8, num_workers=2)
    drain(torch_loader, f"{prefix}-torch.json")
    own = litdata.StreamingDataLoader(litdata.StreamingDataset(data), batch_size=8, num_workers=2)
    drain(own, f"{prefix}-own.json")
    if os.environ.get("LD_DROP_IN"):
        from loaderdoctor import DataLoader

        dropin = DataLoader(litdata.StreamingDataset(data), batch_size=8, num_workers=2, heal=True)
        drain(dropin, f"{prefix}-dropin.json")


if __name__ == "__main__":
    jobs = {"mosaic": mosaic, "litdata": litdata, "litdata-data": litdata_data}
    jobs[sys.argv[1]](sys.argv[2], sys.argv[3])
