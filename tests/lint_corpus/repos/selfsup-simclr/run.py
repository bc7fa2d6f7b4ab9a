import torch

from data_aug.contrastive_learning_dataset import ContrastiveLearningDataset


def main(args):
    dataset = ContrastiveLearningDataset(args.data)
    train_dataset = dataset.get_dataset(args.dataset_name, args.n_views)
    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, drop_last=True
    )
    for images, _ in train_loader:
        step(images)


if __name__ == "__main__":
    main(parse_args())
