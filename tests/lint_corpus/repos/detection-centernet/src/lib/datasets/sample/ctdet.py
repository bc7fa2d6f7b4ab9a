import os

import cv2
import torch.utils.data as data


class CTDetDataset(data.Dataset):
    def __getitem__(self, index):
        img_id = self.images[index]
        file_name = self.coco.loadImgs(ids=[img_id])[0]["file_name"]
        anns = self.coco.loadAnns(ids=self.coco.getAnnIds(imgIds=[img_id]))
        img = cv2.imread(os.path.join(self.img_dir, file_name))
        inp = cv2.warpAffine(img, self.trans_input, (512, 512), flags=cv2.INTER_LINEAR)  # want: LD108
        return inp, anns
