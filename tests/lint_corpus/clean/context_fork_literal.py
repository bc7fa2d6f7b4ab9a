# expect:
# ruff: noqa
# fork, said in so many words: workers never re-import the script.
import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.arange(32.0)), num_workers=2, multiprocessing_context="fork")
for batch in loader:
    pass
