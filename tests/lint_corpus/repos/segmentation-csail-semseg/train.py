import torch

from mit_semseg.dataset import TrainDataset


def main(cfg, gpus):
    dataset_train = TrainDataset(cfg.DATASET.root_dataset, cfg.DATASET.list_train, cfg.DATASET)
    loader_train = torch.utils.data.DataLoader(
        dataset_train, batch_size=len(gpus), shuffle=False, num_workers=cfg.TRAIN.workers
    )
    for batch in loader_train:
        step(batch)


if __name__ == "__main__":
    main(load_cfg(), [0])
