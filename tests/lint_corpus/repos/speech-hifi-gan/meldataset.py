import os
import random

import torch
from scipy.io.wavfile import read


def get_dataset_filelist(a):
    with open(a.input_training_file, "r", encoding="utf-8") as fi:
        training_files = [
            os.path.join(a.input_wavs_dir, x.split("|")[0] + ".wav")
            for x in fi.read().split("\n")
            if len(x) > 0
        ]
    return training_files


class MelDataset(torch.utils.data.Dataset):
    def __init__(self, training_files, segment_size, shuffle=True, device=None):
        self.audio_files = training_files
        random.seed(1234)
        if shuffle:
            random.shuffle(self.audio_files)
        self.segment_size = segment_size
        self.cached_wav = None
        self.device = device  # deny: LD103

    def __getitem__(self, index):
        filename = self.audio_files[index]
        if self.cached_wav is None:
            sampling_rate, audio = read(filename)
            self.cached_wav = audio
        audio = torch.FloatTensor(self.cached_wav)
        return audio[: self.segment_size]

    def __len__(self):
        return len(self.audio_files)
