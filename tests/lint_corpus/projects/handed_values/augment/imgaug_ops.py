import imgaug.augmenters as iaa


class ImgAug:
    def __init__(self, augmenter=None):
        self.augmenter = augmenter

    def __call__(self, image):
        return self.augmenter(image=image)


class DefaultAug(ImgAug):
    def __init__(self):
        self.augmenter = iaa.Sequential([iaa.Affine(rotate=(-10, 10)), iaa.Fliplr(0.5)])


TRAIN_TRANSFORMS = [DefaultAug()]
