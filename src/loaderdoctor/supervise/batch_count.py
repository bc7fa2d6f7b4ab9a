"""How many samples one delivered batch holds: what ``loader.report`` and ``loaderdoctor run`` count.

A map-style batch holds its indices (a skipped sample is taken off by its event). A stream has no
indices (torch hands its fetcher ``[None] * batch_size``, or ``None`` without batching), so its
batch is counted by itself: the last batch of a stream is short, and a stream that batches itself
(webdataset's ``.batched(4)``) read with ``batch_size=None`` yields whole batches as items.
"""

from __future__ import annotations

from typing import Any

import torch


def samples_delivered(indices: Any, batch: Any) -> int:
    """Samples in ``batch``, fetched with ``indices`` (torch's index, or batch of indices)."""
    if isinstance(indices, list):
        if all(index is not None for index in indices):
            return len(indices)  # map-style: the indices fetched
        length = batch_length(batch)  # a stream batched by torch
        return length if length is not None else len(indices)
    if indices is None:  # a stream read item by item (batch_size=None)
        return item_length(batch)
    return 1  # one sample of a map-style dataset (batch_size=None)


def batch_length(batch: Any) -> int | None:
    """Samples in a collated batch: the leading dimension of its first tensor or list."""
    for _ in range(8):  # nested structures: (inputs, labels), {"image": ...}
        if isinstance(batch, torch.Tensor):
            return int(batch.shape[0]) if batch.dim() > 0 else 1
        if isinstance(batch, dict):
            if not batch:
                return None
            batch = next(iter(batch.values()))
        elif isinstance(batch, (list, tuple)):
            if not batch:
                return 0
            if isinstance(batch[0], (torch.Tensor, dict, list, tuple)):
                batch = batch[0]
            else:
                return len(batch)
        else:
            return None
    return None


def item_length(item: Any) -> int:
    """Samples in one item of a stream read with ``batch_size=None``: 1, unless it batched itself.

    A stream that batches itself (webdataset's ``.batched(4)``) yields fields that all share a
    leading dimension, the batch's: ``(images[4, 3, H, W], labels[4])``, ``{"ids": [4, 512],
    "__key__": [4 keys]}``. A single sample's fields do not (``(image[3, H, W], label[])``), or
    are all 1-D (``{"ids": [512], "mask": [512]}``, a text sample). A single sample whose fields
    happen to agree (points[N, 3] with per-point labels[N]) is counted as N: no rule can tell.
    """
    fields = list(item.values()) if isinstance(item, dict) else item
    if not isinstance(fields, (list, tuple)) or len(fields) < 2:
        return 1
    lengths, shapes = set(), set()
    for field in fields:
        if isinstance(field, torch.Tensor) and field.dim() > 0:
            lengths.add(int(field.shape[0]))
            shapes.add(field.dim())
        elif isinstance(field, list):
            lengths.add(len(field))
            shapes.add(1)
        else:
            return 1
    if len(lengths) == 1 and len(shapes) > 1:  # one leading dimension under fields of 1-D and N-D
        return lengths.pop()
    return 1


__all__ = ["batch_length", "item_length", "samples_delivered"]
