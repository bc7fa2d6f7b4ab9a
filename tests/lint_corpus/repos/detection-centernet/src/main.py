import torch

from lib.datasets.dataset_factory import get_dataset


def main(opt):
    Dataset = get_dataset(opt.dataset, opt.task)
    train_loader = torch.utils.data.DataLoader(
        Dataset(opt, "train"), batch_size=opt.batch_size, shuffle=True, num_workers=opt.num_workers
    )
    for batch in train_loader:
        step(batch)


if __name__ == "__main__":
    main(parse_opts())
