import torch

from fastmri.data.mri_data import SliceDataset


def worker_init_fn(worker_id):
    """Handle random seeding for all mask_func."""
    worker_info = torch.utils.data.get_worker_info()
    data = worker_info.dataset
    base_seed = worker_info.seed
    if data.transform.mask_func is not None:
        data.transform.mask_func.rng.seed((base_seed + worker_id) % (2**32 - 1))


class FastMriDataModule:
    def __init__(self, data_path, challenge, train_transform, num_workers=4):
        self.data_path = data_path
        self.challenge = challenge
        self.train_transform = train_transform
        self.num_workers = num_workers

    def train_dataloader(self):
        dataset = SliceDataset(root=self.data_path, challenge=self.challenge, transform=self.train_transform)
        return torch.utils.data.DataLoader(
            dataset, batch_size=1, num_workers=self.num_workers, worker_init_fn=worker_init_fn  # want: LD102
        )
