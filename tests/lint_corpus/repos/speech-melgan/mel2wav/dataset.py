import random
from pathlib import Path

import torch
from librosa.core import load


def files_to_list(filename):
    with open(filename, encoding="utf-8") as f:
        files = f.readlines()
    return [f.rstrip() for f in files]


class AudioDataset(torch.utils.data.Dataset):
    def __init__(self, training_files, segment_length, sampling_rate, augment=True):
        self.sampling_rate = sampling_rate
        self.segment_length = segment_length
        self.audio_files = files_to_list(training_files)
        self.audio_files = [Path(training_files).parent / x for x in self.audio_files]
        random.seed(1234)  # deny: LD109
        random.shuffle(self.audio_files)
        self.augment = augment

    def __getitem__(self, index):
        data, sampling_rate = load(self.audio_files[index], sr=self.sampling_rate)
        if self.augment:
            data = data * random.random()
        return torch.from_numpy(data).float()

    def __len__(self):
        return len(self.audio_files)
