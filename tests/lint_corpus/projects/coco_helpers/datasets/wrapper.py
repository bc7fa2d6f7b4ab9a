from torch.utils.data.dataset import Dataset as TorchDataset


class CacheDataset(TorchDataset):
    def read(self, file_name):
        with open(file_name, "rb") as f:
            return f.read()
