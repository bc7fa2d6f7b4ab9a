import pickle
from pathlib import Path

import h5py
import torch


class SliceDataset(torch.utils.data.Dataset):
    def __init__(self, root, challenge, transform=None, use_dataset_cache=False,
                 dataset_cache_file="dataset_cache.pkl", raw_sample_filter=None):
        self.dataset_cache_file = Path(dataset_cache_file)
        self.transform = transform
        self.raw_samples = []
        if raw_sample_filter is None:
            self.raw_sample_filter = lambda raw_sample: True
        else:
            self.raw_sample_filter = raw_sample_filter
        if self.dataset_cache_file.exists() and use_dataset_cache:
            with open(self.dataset_cache_file, "rb") as f:
                dataset_cache = pickle.load(f)
        else:
            dataset_cache = {}
        if dataset_cache.get(root) is None or not use_dataset_cache:
            for fname in sorted(Path(root).iterdir()):
                for slice_ind in range(16):
                    raw_sample = (fname, slice_ind)
                    if self.raw_sample_filter(raw_sample):
                        self.raw_samples.append(raw_sample)
        else:
            self.raw_samples = dataset_cache[root]  # want: LD107

    def __len__(self):
        return len(self.raw_samples)

    def __getitem__(self, i):
        fname, dataslice = self.raw_samples[i]
        with h5py.File(fname, "r") as hf:
            kspace = hf["kspace"][dataslice]
        return self.transform(kspace, None, None, None, fname.name, dataslice)
