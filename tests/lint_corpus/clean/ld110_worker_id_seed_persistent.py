# expect:
# The same first-item seeding with workers that live for the whole run: each worker's stream
# goes on from epoch to epoch instead of starting again.
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Crops(Dataset):
    def __init__(self, paths):
        self.paths = paths
        self.init_seed = False

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        if not self.init_seed:
            info = torch.utils.data.get_worker_info()
            if info is not None:
                np.random.seed(info.id)
                self.init_seed = True
        image = np.load(self.paths[index])
        return image[np.random.randint(0, 8) :]


def main(paths):
    loader = DataLoader(Crops(paths), batch_size=8, num_workers=4, persistent_workers=True)
    for _ in range(10):
        for batch in loader:
            batch.sum()


if __name__ == "__main__":
    main([])
