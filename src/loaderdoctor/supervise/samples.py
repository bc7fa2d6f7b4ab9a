"""Name the file behind a dataset index, when the dataset says which file it reads."""

from __future__ import annotations

import bisect
import os
from typing import Any

# Attributes through which datasets of popular repositories keep their file list, one entry per
# index (a path, a (path, target) pair, or a dict with a path), and who keeps it there; read in
# this order.
FILE_LISTS: tuple[tuple[str, str], ...] = (
    ("samples", "torchvision ImageFolder/DatasetFolder, timm's reader: (path, target)"),
    ("imgs", "torchvision ImageFolder (an alias of samples)"),
    ("im_files", "Ultralytics YOLO datasets (YOLOv8 and later, YOLOv5 since v6)"),
    ("img_files", "YOLOv5 before v6, many detection repos"),
    ("image_files", "custom datasets"),
    ("_image_files", "torchvision Flowers102, Food101, DTD, FGVCAircraft"),
    ("_samples", "torchvision StanfordCars, GTSRB: (path, target)"),
    ("data_list", "OpenMMLab (mmdet, mmseg, mmpose) BaseDataset: dicts with img_path"),
    ("images_fps", "segmentation_models.pytorch examples"),
    ("files", "custom datasets"),
    ("file_paths", "custom datasets"),
    ("paths", "custom datasets"),
    ("image_paths", "custom datasets"),
    ("img_paths", "custom datasets"),
    ("filenames", "custom datasets"),
)
FILE_LIST_ATTRIBUTES = tuple(name for name, _ in FILE_LISTS)


# The keys of a dict item (MONAI's ``data=[{"image": path, "label": path}]``, OpenMMLab's
# ``img_path``, detectron2's ``file_name``, Ultralytics' ``im_file``) that name the file it is
# read from, best first; else its first value that is a path.
PATH_KEYS = (
    "image",
    "img",
    "img_path",
    "image_path",
    "im_file",
    "file_name",
    "path",
    "file",
    "filename",
    "filepath",
)


def _as_path(entry: Any) -> str | None:
    if isinstance(entry, dict):
        values = [entry[k] for k in PATH_KEYS if k in entry] + list(entry.values())
        return next((p for p in map(_path_value, values) if p is not None), None)
    if isinstance(entry, (tuple, list)) and entry:
        entry = entry[0]
    if isinstance(entry, (str, os.PathLike)):
        return str(os.fspath(entry))
    return None


def _path_value(value: Any) -> str | None:
    if isinstance(value, os.PathLike):
        return str(os.fspath(value))
    if isinstance(value, str) and (os.sep in value or os.path.splitext(value)[1]):
        return value
    return None


# Hugging Face ``datasets`` features whose stored value names the file it was read from
HF_FILE_FEATURES = ("Image", "Audio", "Video", "Pdf")


def _hugging_face_file(dataset: Any, index: int) -> str | None:
    """A Hugging Face ``datasets.Dataset`` row's file (an ``Image`` column's ``path``), read from
    its Arrow table without decoding it (decoding is what failed)."""
    features = getattr(dataset, "features", None)
    with_format = getattr(dataset, "with_format", None)
    if not isinstance(features, dict) or not callable(with_format):
        return None
    columns = [n for n, f in features.items() if type(f).__name__ in HF_FILE_FEATURES]
    if not columns:
        return None
    row = with_format("arrow")[index]  # one row, through the dataset's own index mapping
    for name in columns:
        value = row.column(name)[0].as_py()
        path = value.get("path") if isinstance(value, dict) else None
        if isinstance(path, str) and path:
            return path
    return None


def sample_shard(dataset: Any, index: Any) -> str | None:
    """The shard file that holds ``dataset[index]`` where the library keeps rows in shard files
    apart from the sample's own file: a Hugging Face ``datasets.Dataset``'s Arrow file (its
    ``save_to_disk`` shards, ``load_dataset``'s cache files), read from its table's blocks."""
    if not isinstance(index, int):
        return None
    try:
        if getattr(dataset, "cache_files", None) is None or not callable(
            getattr(dataset, "with_format", None)
        ):
            return None
        indices = getattr(dataset, "_indices", None)  # select/shuffle: the row behind the index
        row = int(indices.column(0)[index].as_py()) if indices is not None else index
        table = dataset.data
        blocks = getattr(table, "blocks", None)  # a ConcatenationTable: rows of column blocks
        tables = [group[0] for group in blocks] if blocks is not None else [table]
        first = 0
        for part in tables:
            if row < first + len(part):
                path = getattr(part, "path", None)  # a MemoryMappedTable's file
                return path if isinstance(path, str) and path else None
            first += len(part)
    except Exception:  # a dataset's attributes are the library's: never fail a verdict on them
        return None
    return None


def sample_file(dataset: Any, index: Any, depth: int = 0) -> str | None:
    """The file that ``dataset[index]`` reads, or None when the dataset does not say."""
    if depth > 8 or not isinstance(index, int):
        return None
    try:
        indices = getattr(dataset, "indices", None)
        inner = getattr(dataset, "dataset", None)
        if inner is not None and indices is not None:  # torch.utils.data.Subset
            return sample_file(inner, int(indices[index]), depth + 1)
        sizes = getattr(dataset, "cumulative_sizes", None)
        parts = getattr(dataset, "datasets", None)
        if sizes is not None and parts is not None:  # ConcatDataset
            which = bisect.bisect_right(sizes, index)
            offset = index - (sizes[which - 1] if which > 0 else 0)
            return sample_file(parts[which], offset, depth + 1)
        for name in FILE_LIST_ATTRIBUTES:
            files = getattr(dataset, name, None)
            if files is not None and hasattr(files, "__getitem__") and not isinstance(files, str):
                path = _as_path(files[index])
                if path is not None:
                    return path
        # timm's ImageDataset reads through a reader (``reader.samples``, ``parser`` before 0.9)
        for name in ("reader", "parser"):
            reader = getattr(dataset, name, None)
            if reader is not None and not isinstance(reader, str):
                path = sample_file(reader, index, depth + 1)
                if path is not None:
                    return path
        data = getattr(dataset, "data", None)  # MONAI's Dataset(data=[{"image": path}, ...])
        if (
            isinstance(data, (list, tuple))
            and 0 <= index < len(data)
            and isinstance(data[index], dict)
        ):
            path = _as_path(data[index])
            if path is not None:
                return path
        path = _hugging_face_file(dataset, index)
        if path is not None:
            return path
        filename = getattr(dataset, "filename", None)  # timm: dataset.filename(i)
        if callable(filename):
            path = _as_path(filename(index))
            if path is not None:
                return path
    except Exception:  # a dataset's attributes are the user's code: never fail a verdict on them
        return None
    return None
