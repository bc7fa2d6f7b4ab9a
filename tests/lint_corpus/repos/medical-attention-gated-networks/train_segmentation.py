from torch.utils.data import DataLoader

from dataio.loader import get_dataset


def train(arguments):
    ds_class = get_dataset(arguments.arch_type)
    train_dataset = ds_class(arguments.data_path, split="train")
    train_loader = DataLoader(dataset=train_dataset, num_workers=16, batch_size=4, shuffle=True)
    for images, labels in train_loader:
        step(images, labels)


if __name__ == "__main__":
    train(parse_args())
