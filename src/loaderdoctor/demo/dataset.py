"""The demo's image pipeline: a generated ImageFolder-like dataset and the faults planted in it.

Everything here runs for real in the DataLoader's workers: Pillow really fails on a truncated
JPEG, the "native decoder" really dereferences NULL, the "stalled read" really blocks.
"""

from __future__ import annotations

import ctypes
import glob
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import torch
from torch.utils.data import Dataset

if TYPE_CHECKING:
    from PIL.Image import Image

CLASSES = ("circle", "square", "triangle")
IMAGES_PER_CLASS = 16
IMAGE_SIZE = 32
ODD_IMAGE_SIZE = 40  # the ragged sample: no resize in the pipeline, so collate cannot stack it
# Files starting with these headers reach the demo decoder's two planted bugs.
NATIVE_CRASH_HEADER = b"LDDEMO\x00native-decoder-crash\n"
STALLED_READ_HEADER = b"LDDEMO\x00stalled-read\n"
# How long a stalled read blocks: far past the demo's hang timeout, and still bounded so a broken
# watchdog cannot hang the demo for ever.
STALL_S = 60.0

PlantKind = Literal["truncated-jpeg", "native-crash-header", "odd-size", "stalled-read"]


def _draw(label: int, number: int, size: int) -> Image:
    from PIL import Image, ImageDraw

    background = (40 + 12 * number, 60 + 7 * number, 90 + 5 * number)
    colour = ((230, 80, 60), (70, 170, 230), (240, 200, 60))[label]
    image = Image.new("RGB", (size, size), background)
    draw = ImageDraw.Draw(image)
    margin = 4 + number % 5
    box = (margin, margin, size - margin, size - margin)
    if CLASSES[label] == "circle":
        draw.ellipse(box, fill=colour)
    elif CLASSES[label] == "square":
        draw.rectangle(box, fill=colour)
    else:
        draw.polygon(
            [(size // 2, margin), (size - margin, size - margin), (margin, size - margin)],
            fill=colour,
        )
    return image


def _slot_path(root: Path, label: int, number: int, suffix: str) -> Path:
    return root / CLASSES[label] / f"{CLASSES[label]}_{number:02d}{suffix}"


def _save(image: Image, path: Path) -> None:
    if path.suffix == ".jpg":
        image.save(path, quality=90)
    else:
        image.save(path)


def _plant_truncated_jpeg(root: Path, label: int, number: int) -> Path:
    path = _slot_path(root, label, number, ".jpg")
    _save(_draw(label, number, IMAGE_SIZE), path)
    data = path.read_bytes()
    # Cut in the middle of the entropy-coded data: the header still parses, so Image.open()
    # succeeds and the failure only comes at decode time, in the worker, as in real datasets.
    path.write_bytes(data[: len(data) * 3 // 5])
    return path


def _plant_header(header: bytes) -> Callable[[Path, int, int], Path]:
    def plant(root: Path, label: int, number: int) -> Path:
        path = _slot_path(root, label, number, ".jpg")
        path.write_bytes(header + bytes(64))
        return path

    return plant


def _plant_odd_size(root: Path, label: int, number: int) -> Path:
    path = _slot_path(root, label, number, ".png")
    _save(_draw(label, number, ODD_IMAGE_SIZE), path)
    return path


PLANTERS: dict[PlantKind, Callable[[Path, int, int], Path]] = {
    "truncated-jpeg": _plant_truncated_jpeg,
    "native-crash-header": _plant_header(NATIVE_CRASH_HEADER),
    "odd-size": _plant_odd_size,
    "stalled-read": _plant_header(STALLED_READ_HEADER),
}


def write_dataset(root: Path, plant: PlantKind | None = None, plant_index: int = 0) -> Path | None:
    """Write ``len(CLASSES) * IMAGES_PER_CLASS`` small PNG/JPEG images in ``root/<class>/``.

    The sample at ``plant_index`` (in ``ShapesFolder`` order) is replaced by a planted fault;
    returns the planted file's path.
    """
    planted: Path | None = None
    for label in range(len(CLASSES)):
        (root / CLASSES[label]).mkdir(parents=True, exist_ok=True)
        for number in range(IMAGES_PER_CLASS):
            if plant is not None and label * IMAGES_PER_CLASS + number == plant_index:
                planted = PLANTERS[plant](root, label, number)
                continue
            suffix = ".jpg" if number % 3 == 2 else ".png"
            _save(_draw(label, number, IMAGE_SIZE), _slot_path(root, label, number, suffix))
    return planted


def _native_decoder_bug() -> None:
    # Stands in for a C decoder that trusts a corrupt header: reading address 0 is a real SIGSEGV.
    ctypes.string_at(0)


def _stalled_read() -> None:
    # Stands in for a read from a network file system that never answers.
    time.sleep(STALL_S)


def decode_image(path: str) -> torch.Tensor:
    """The demo's decoder: bytes -> uint8 tensor (3, H, W). Deliberately has the planted bugs."""
    from PIL import Image

    with open(path, "rb") as handle:
        header = handle.read(len(NATIVE_CRASH_HEADER))
        if header.startswith(NATIVE_CRASH_HEADER):
            _native_decoder_bug()
        if header.startswith(STALLED_READ_HEADER):
            _stalled_read()
        handle.seek(0)
        with Image.open(handle) as image:
            image.load()  # the full decode: a truncated file fails here, not at open()
            rgb = image.convert("RGB")
    width, height = rgb.size
    pixels = torch.frombuffer(bytearray(rgb.tobytes()), dtype=torch.uint8)
    return pixels.view(height, width, 3).permute(2, 0, 1).contiguous()


class ShapesFolder(Dataset[tuple[torch.Tensor, int]]):
    """An ImageFolder-like dataset: ``root/<class>/<file>``, sorted, with ``samples`` and ``classes``.

    ``samples`` is the list of (path, label) that torchvision's ImageFolder exposes, which is how a
    loaderdoctor verdict names the file behind an index.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = str(root)
        self.classes = [name for name in CLASSES if os.path.isdir(os.path.join(self.root, name))]
        self.samples: list[tuple[str, int]] = [
            (os.path.join(self.root, name, file), label)
            for label, name in enumerate(self.classes)
            for file in sorted(os.listdir(os.path.join(self.root, name)))
        ]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.samples[index]
        return decode_image(path), label


class DemoWorkerInit:
    """worker_init_fn: keep what workers write, and list the temporary folders they make.

    Stock torch prints its own crash line ("ERROR: Unexpected segmentation fault encountered in
    worker.") from the worker; the demo sends the workers' stdout and stderr to a log instead of
    under its progress line. A worker that shares a tensor makes a multiprocessing temp folder
    (``pymp-*``, for the resource sharer's socket) that only its own exit handlers remove, so a
    worker that crashes or is killed leaves it behind: each worker writes its path to a list
    for the demo to remove.
    """

    def __init__(self, log_path: str, temp_list_path: str) -> None:
        self.log_path = log_path
        self.temp_list_path = temp_list_path

    def __call__(self, worker_id: int) -> None:
        from multiprocessing import util

        with open(self.temp_list_path, "a") as temp_list:
            temp_list.write(util.get_temp_dir() + "\n")
        descriptor = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(descriptor, 1)
        os.dup2(descriptor, 2)
        os.close(descriptor)


def remove_worker_temp_dirs(temp_list_path: str, existing_before: set[str]) -> None:
    """Remove the folders listed by ``DemoWorkerInit`` that did not exist before the loader ran.

    (A folder that existed before is the main process's own, inherited at fork.)
    """
    try:
        with open(temp_list_path) as temp_list:
            paths = {line.strip() for line in temp_list if line.strip()}
    except OSError:
        return
    for path in paths - existing_before:
        if os.path.basename(path).startswith("pymp-"):
            shutil.rmtree(path, ignore_errors=True)


def multiprocessing_temp_dirs() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "pymp-*")))
