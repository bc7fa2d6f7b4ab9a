import torch

from datasets.activitynet import ActivityNet
from datasets.videodataset import VideoDataset


def get_train_utils(opt):
    if opt.dataset == "activitynet":
        train_data = ActivityNet(opt.video_path, opt.annotation_path, "training")
    else:
        train_data = VideoDataset(opt.video_path, opt.annotation_path, "training")
    return torch.utils.data.DataLoader(train_data, batch_size=opt.batch_size, num_workers=opt.n_threads)


if __name__ == "__main__":
    get_train_utils(parse_opts())
