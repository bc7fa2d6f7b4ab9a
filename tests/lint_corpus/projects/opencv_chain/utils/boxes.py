from utils.image import resize_to


def prepare(path):
    return resize_to(path, 640)
