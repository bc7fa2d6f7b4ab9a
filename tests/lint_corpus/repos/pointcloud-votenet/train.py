import numpy as np
from torch.utils.data import DataLoader

FLAGS = parse_flags()


def my_worker_init_fn(worker_id):
    np.random.seed(np.random.get_state()[1][0] + worker_id)  # want: LD110


if FLAGS.dataset == "sunrgbd":
    from sunrgbd.sunrgbd_detection_dataset import SunrgbdDetectionVotesDataset

    TRAIN_DATASET = SunrgbdDetectionVotesDataset("train", augment=True)
elif FLAGS.dataset == "scannet":
    from scannet.scannet_detection_dataset import ScannetDetectionDataset

    TRAIN_DATASET = ScannetDetectionDataset("train", augment=True)

# Built at import, iterated only by train() under the main guard: no workers start on import.
TRAIN_DATALOADER = DataLoader(  # deny: LD101
    TRAIN_DATASET, batch_size=8, shuffle=True, num_workers=4, worker_init_fn=my_worker_init_fn
)


def train_one_epoch():
    for batch in TRAIN_DATALOADER:
        step(batch)


def train(start_epoch):
    for epoch in range(start_epoch, 180):
        train_one_epoch()


if __name__ == "__main__":
    train(0)
