"""Plain functions: no Dataset, no DataLoader (skipped by the text scan)."""


def flip(image):
    return image[:, ::-1]
