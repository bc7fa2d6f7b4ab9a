"""A WebDataset pipeline over tar shards (``ARGV[1]``: their folder): ``.decode()`` raises
webdataset's DecodingError on the corrupt ``.json`` record the test planted; a ``.map`` step
kills or crashes its worker at the planted keys."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import webdataset as wds
from eco_plan import fault, record


def planted(sample: dict) -> dict:
    fault(sample["__key__"])
    return {"__key__": sample["__key__"], "value": sample["json"]["value"]}


def main() -> None:
    urls = sorted(str(p) for p in Path(sys.argv[1]).glob("shard-*.tar"))
    pipeline = wds.WebDataset(urls, shardshuffle=False, empty_check=False).decode().map(planted)
    loader = torch.utils.data.DataLoader(pipeline, batch_size=4, num_workers=len(urls))
    for batch in loader:
        record(batch["__key__"])


if __name__ == "__main__":
    main()
