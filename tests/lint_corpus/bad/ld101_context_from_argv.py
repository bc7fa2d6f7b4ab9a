# expect: LD101
# ruff: noqa
# The start method comes from the command line: it may be spawn, so the missing guard counts.
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(
    TensorDataset(torch.arange(32.0)), num_workers=2, multiprocessing_context=sys.argv[1]
)
for batch in loader:
    pass
