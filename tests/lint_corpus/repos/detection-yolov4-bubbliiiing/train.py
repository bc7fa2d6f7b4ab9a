from functools import partial

from torch.utils.data import DataLoader

from utils.dataloader import YoloDataset
from utils.utils import worker_init_fn

if __name__ == "__main__":
    seed, rank, num_workers = 11, 0, 4
    with open("2007_train.txt", encoding="utf-8") as f:
        train_lines = f.readlines()
    train_dataset = YoloDataset(train_lines, (416, 416), 20, train=True)
    gen = DataLoader(
        train_dataset, shuffle=True, batch_size=8, num_workers=num_workers, pin_memory=True,
        worker_init_fn=partial(worker_init_fn, rank=rank, seed=seed),
    )
    for batch in gen:
        step(batch)
