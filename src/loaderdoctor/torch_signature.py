"""The parameters of ``torch.utils.data.DataLoader.__init__`` as loaderdoctor knows them (no torch).

One list for the linter, which reads calls statically and must not import torch, and for the
supervised loader, which runs a keyword it does not know as plain torch. ``tests/test_torch_compat``
holds it to the installed torch's real signature.
"""

from __future__ import annotations

# Positional parameters, in order.
POSITIONAL = (
    "dataset",
    "batch_size",
    "shuffle",
    "sampler",
    "batch_sampler",
    "num_workers",
    "collate_fn",
    "pin_memory",
    "drop_last",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "generator",
)
KEYWORD_ONLY = ("prefetch_factor", "persistent_workers", "pin_memory_device", "in_order")
ALL = frozenset(POSITIONAL + KEYWORD_ONLY)
