from deepspeech_pytorch.loader.data_loader import AudioDataLoader, SpectrogramDataset


class DeepSpeechDataModule:
    def __init__(self, labels, data_cfg):
        self.labels = labels
        self.data_cfg = data_cfg

    def train_dataloader(self):
        train_dataset = SpectrogramDataset(None, self.data_cfg.train_path, self.labels)
        return AudioDataLoader(dataset=train_dataset, num_workers=self.data_cfg.num_workers)
