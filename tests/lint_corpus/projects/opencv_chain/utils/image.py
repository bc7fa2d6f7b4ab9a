import cv2


def resize_to(path, size):
    image = cv2.imread(path)
    return cv2.resize(image, (size, size))
