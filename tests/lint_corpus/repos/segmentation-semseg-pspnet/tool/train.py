import cv2
import torch

from util import dataset

cv2.ocl.setUseOpenCL(False)
cv2.setNumThreads(0)


def main_worker(gpu, args):
    train_data = dataset.SemData(split="train", data_root=args.data_root, data_list=args.train_list)
    train_loader = torch.utils.data.DataLoader(
        train_data, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, drop_last=True
    )
    for batch in train_loader:
        step(batch)


if __name__ == "__main__":
    main_worker(0, parse_args())
