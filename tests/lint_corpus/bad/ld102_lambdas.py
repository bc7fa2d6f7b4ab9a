# expect: LD102 LD102 LD102 LD110
# ruff: noqa
import torch
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __len__(self):
        return 100

    def __getitem__(self, index):
        return torch.tensor([index * index])


def main():
    loader = DataLoader(
        Squares(),
        batch_size=10,
        num_workers=2,
        collate_fn=lambda batch: torch.stack(batch),
        worker_init_fn=lambda worker_id: torch.manual_seed(worker_id),
    )
    to_list = lambda batch: list(batch)  # noqa: E731
    other = DataLoader(Squares(), num_workers=2, collate_fn=to_list)
    for batch in loader:
        print(batch.shape)
    for batch in other:
        print(len(batch))


if __name__ == "__main__":
    main()
