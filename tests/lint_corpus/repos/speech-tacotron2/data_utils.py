import random

import torch

from utils import load_filepaths_and_text, load_wav_to_torch


class TextMelLoader(torch.utils.data.Dataset):
    def __init__(self, audiopaths_and_text, hparams):
        self.audiopaths_and_text = load_filepaths_and_text(audiopaths_and_text)  # deny: LD107
        self.max_wav_value = hparams.max_wav_value
        random.seed(hparams.seed)
        random.shuffle(self.audiopaths_and_text)

    def __getitem__(self, index):
        audiopath, text = self.audiopaths_and_text[index][0], self.audiopaths_and_text[index][1]
        audio, sampling_rate = load_wav_to_torch(audiopath)
        return audio / self.max_wav_value, text

    def __len__(self):
        return len(self.audiopaths_and_text)
