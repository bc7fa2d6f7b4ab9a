import torch.utils.data

from data.aligned_dataset import AlignedDataset
from data.base_data_loader import BaseDataLoader


class CustomDatasetDataLoader(BaseDataLoader):
    def initialize(self, opt):
        BaseDataLoader.initialize(self, opt)
        self.dataset = AlignedDataset()
        self.dataset.initialize(opt)
        self.dataloader = torch.utils.data.DataLoader(
            self.dataset,
            batch_size=opt.batchSize,
            shuffle=not opt.serial_batches,
            num_workers=int(opt.nThreads),
        )

    def load_data(self):
        return self.dataloader

    def __len__(self):
        return len(self.dataset)
