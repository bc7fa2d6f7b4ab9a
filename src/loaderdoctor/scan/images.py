"""A dataset over a folder of images that fully decodes each file, so a scan finds broken ones."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

IMAGE_SUFFIXES = frozenset(
    {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm"}
)
# Pillow's own default guard (about a 1/4 gigapixel): above it an image is treated as a bomb.
DEFAULT_MAX_PIXELS = 89_478_485


class ImageFolderScan:
    """Every image file under ``root`` (sorted, recursive); ``samples`` names them like ImageFolder.

    ``dataset[i]`` opens and fully decodes file ``i`` (``Image.open`` alone only reads the header;
    truncated data surfaces in ``load()``, bad CRCs in ``verify()``) and returns ``(path, (width, height), mode)``
    so that the decoded pixels never leave the worker.
    """

    def __init__(self, root: str | os.PathLike[str], max_pixels: int = DEFAULT_MAX_PIXELS) -> None:
        self.root = Path(root)
        self.max_pixels = max_pixels
        files = sorted(
            path
            for path in self.root.rglob("*")
            if path.suffix.lower() in IMAGE_SUFFIXES and path.is_file()
        )
        self.samples: list[tuple[str, int]] = [(str(path), 0) for path in files]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[str, tuple[int, int], str]:
        from PIL import Image

        path = self.samples[index][0]
        # Pillow raises DecompressionBombError only past twice MAX_IMAGE_PIXELS (and merely warns
        # below that): a scan flags anything past the limit, from the header, before decoding.
        previous = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = self.max_pixels
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                # ``load()`` does not check the CRC of PNG data chunks; ``verify()`` does, but
                # leaves the image unusable, so the file is opened twice.
                with Image.open(path) as image:
                    image.verify()
                with Image.open(path) as image:
                    width, height = image.size
                    if width * height > self.max_pixels:
                        raise Image.DecompressionBombError(
                            f"image size ({width * height} pixels) exceeds the limit of "
                            f"{self.max_pixels} pixels: a possible decompression bomb"
                        )
                    image.load()
                    return path, (width, height), image.mode
        finally:
            Image.MAX_IMAGE_PIXELS = previous
