"""Name the file behind a dataset index, when the dataset says which file it reads."""

from __future__ import annotations

import bisect
import os
from typing import Any

# Attributes through which common datasets expose their file list (torchvision's ImageFolder
# and DatasetFolder use ``samples``/``imgs``, list of (path, target)).
FILE_LIST_ATTRIBUTES = (
    "samples",
    "imgs",
    "files",
    "file_paths",
    "paths",
    "image_paths",
    "filenames",
)


# The keys of a dict item (MONAI's ``data=[{"image": path, "label": path}]``) that name the file
# it is read from, best first; else its first value that is a path.
PATH_KEYS = ("image", "img", "path", "file", "filename", "filepath")


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
        filename = getattr(dataset, "filename", None)  # timm: dataset.filename(i)
        if callable(filename):
            path = _as_path(filename(index))
            if path is not None:
                return path
    except Exception:  # a dataset's attributes are the user's code: never fail a verdict on them
        return None
    return None
