# expect: LD103 LD103 LD103 LD103 LD103
# ruff: noqa
import torch
from torch.utils.data import DataLoader, Dataset


class GpuDataset(Dataset):
    def __init__(self, tensors):
        self.tensors = tensors
        self.device = "cuda:0"

    def __len__(self):
        return len(self.tensors)

    def __getitem__(self, index):
        sample = self.tensors[index].cuda()
        noise = torch.randn(3, device="cuda")
        return self._place(sample + noise)

    def _place(self, tensor):
        torch.cuda.synchronize()
        return tensor.to(self.device)


def gpu_collate(batch):
    return torch.stack(batch).to(torch.device("cuda"))


def main():
    loader = DataLoader(GpuDataset([torch.zeros(3)] * 8), num_workers=2, collate_fn=gpu_collate)
    for batch in loader:
        print(batch.device)


if __name__ == "__main__":
    main()
