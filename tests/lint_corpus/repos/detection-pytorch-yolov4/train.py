from torch.utils.data import DataLoader

from dataset import Yolo_dataset


def train(model, device, config):
    train_dataset = Yolo_dataset(config.train_label, config, train=True)
    train_loader = DataLoader(train_dataset, batch_size=config.batch, shuffle=True, num_workers=8, pin_memory=True)
    for images, bboxes in train_loader:
        step(images, bboxes)


if __name__ == "__main__":
    train(None, "cuda", get_config())
