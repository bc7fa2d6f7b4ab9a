import cv2
import numpy as np
from PIL import Image
from torch.utils.data.dataset import Dataset


class YoloDataset(Dataset):
    def __init__(self, annotation_lines, input_shape, num_classes, train):
        self.annotation_lines = annotation_lines
        self.input_shape = input_shape
        self.length = len(self.annotation_lines)
        self.train = train

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        return self.get_random_data(self.annotation_lines[index], self.input_shape)

    def get_random_data(self, annotation_line, input_shape):
        image = Image.open(annotation_line.split()[0])
        image_data = np.array(image, np.uint8)
        hue, sat, val = cv2.split(cv2.cvtColor(image_data, cv2.COLOR_RGB2HSV))  # want: LD108
        return image_data
