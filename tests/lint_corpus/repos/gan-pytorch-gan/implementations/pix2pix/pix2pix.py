import argparse

from torch.utils.data import DataLoader

from datasets import ImageDataset

parser = argparse.ArgumentParser()
parser.add_argument("--n_cpu", type=int, default=8, help="number of cpu threads to use during batch generation")
opt = parser.parse_args()

transforms_ = [transforms.Resize((256, 256)), transforms.ToTensor()]
dataloader = DataLoader(  # want: LD101
    ImageDataset("../../data/facades", transforms_=transforms_),
    batch_size=1,
    shuffle=True,
    num_workers=opt.n_cpu,
)
val_dataloader = DataLoader(
    ImageDataset("../../data/facades", transforms_=transforms_, mode="val"),
    batch_size=10,
    shuffle=True,
    num_workers=1,
)


def sample_images(batches_done):
    imgs = next(iter(val_dataloader))
    save(imgs, batches_done)


for epoch in range(200):
    for i, batch in enumerate(dataloader):
        step(batch)
        if i % 500 == 0:
            sample_images(i)  # want: LD101
