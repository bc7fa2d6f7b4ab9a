from glob import glob
from os.path import isfile, join

import torch.utils.data as data

import frame_utils


class MpiSintel(data.Dataset):
    def __init__(self, args, is_cropped=False, root="", dstype="clean", replicates=1):
        self.args = args
        self.replicates = replicates
        flow_root = join(root, "flow")
        image_root = join(root, dstype)
        file_list = sorted(glob(join(flow_root, "*/*.flo")))
        self.flow_list = []
        self.image_list = []
        for file in file_list:
            fbase = file[len(flow_root) + 1 :]
            fnum = int(fbase[-8:-4])
            img1 = join(image_root, fbase[:-8] + "%04d" % (fnum + 0) + ".png")
            img2 = join(image_root, fbase[:-8] + "%04d" % (fnum + 1) + ".png")
            if not isfile(img1) or not isfile(img2):
                continue
            self.image_list += [[img1, img2]]  # deny: LD107
            self.flow_list += [file]
        self.size = len(self.image_list)

    def __getitem__(self, index):
        index = index % self.size
        img1 = frame_utils.read_gen(self.image_list[index][0])
        img2 = frame_utils.read_gen(self.image_list[index][1])
        flow = frame_utils.read_gen(self.flow_list[index])
        return [img1, img2], [flow]

    def __len__(self):
        return self.size * self.replicates
