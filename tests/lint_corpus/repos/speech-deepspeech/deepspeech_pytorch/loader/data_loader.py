import json
import os
from pathlib import Path

from torch.utils.data import DataLoader, Dataset


class SpectrogramDataset(Dataset):
    def __init__(self, audio_conf, input_path, labels):
        self.ids = self._parse_input(input_path)  # want: LD107
        self.size = len(self.ids)
        self.labels_map = {labels[i]: i for i in range(len(labels))}

    def __getitem__(self, index):
        audio_path, transcript_path = self.ids[index]
        return audio_path, transcript_path

    def _parse_input(self, input_path):
        ids = []
        if os.path.isdir(input_path):
            for wav_path in Path(input_path).rglob("*.wav"):
                ids.append((wav_path, str(wav_path).replace(".wav", ".txt")))
        else:
            with open(input_path) as f:
                manifest = json.load(f)
            for sample in manifest["samples"]:
                wav_path = os.path.join(manifest["root_path"], sample["wav_path"])
                transcript_path = os.path.join(manifest["root_path"], sample["transcript_path"])
                ids.append((wav_path, transcript_path))
        return ids

    def __len__(self):
        return self.size


class AudioDataLoader(DataLoader):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
