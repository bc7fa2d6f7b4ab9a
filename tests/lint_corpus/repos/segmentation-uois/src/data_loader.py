import cv2
import numpy as np
from torch.utils.data import DataLoader, Dataset

cv2.setNumThreads(0)


def worker_init_fn(worker_id):
    """Bypass PyTorch dataloaders using a deterministic RNG for numpy (pytorch#5059)."""
    np.random.seed(np.random.get_state()[1][0] + worker_id)  # want: LD110


class Tabletop_Object_Dataset(Dataset):
    def __init__(self, base_dir, train_or_test, config):
        self.base_dir = base_dir
        self.config = config
        self.len = 40000 if train_or_test == "train" else 2000

    def __len__(self):
        return self.len

    def __getitem__(self, idx):
        rgb = cv2.imread(f"{self.base_dir}/scene_{idx:05d}/rgb.jpeg")
        return rgb


def get_TOD_train_dataloader(base_dir, config, batch_size=8, num_workers=4, shuffle=True):
    dataset = Tabletop_Object_Dataset(base_dir + "training_set/", "train", config)
    return DataLoader(
        dataset=dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        num_workers=num_workers,
        worker_init_fn=worker_init_fn,
    )
