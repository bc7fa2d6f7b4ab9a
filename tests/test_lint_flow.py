"""lint v3: the data followed across functions, modules and notebooks.

Each case is a corpus file or project with its exact findings, beside a negative twin.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from loaderdoctor.lint import check_paths, check_source

CORPUS = Path(__file__).parent / "lint_corpus"
PROJECTS = CORPUS / "projects"
SPAWN = (
    "pickle cannot send it to spawn/forkserver workers, so the first epoch fails on Windows "
    "and macOS (spawn) and Linux from Python 3.14 (forkserver)"
)
SHARED = "forked workers share one handle (one offset, one connection), and spawn cannot pickle it"
COPY_ON_READ = (
    "reads it in every worker: reading Python objects writes their reference counts, so each "
    "worker copies every page they sit on and memory grows by num_workers x its size over the "
    "epoch (copy-on-read)"
)


def findings(*paths: Path | str, cwd: Path | None = None) -> list[str]:
    old = Path.cwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        report = check_paths(list(paths))
    finally:
        os.chdir(old)
    return [f"{f.path}:{f.line}:{f.col} {f.code} {f.message}" for f in report.findings]


def test_lambda_in_a_variable_placed_in_a_compose_list() -> None:
    path = CORPUS / "bad" / "ld102_lambda_var_in_compose.py"
    assert findings(path) == [
        f"{path}:9:33 LD102 a lambda passed to `MNIST(...)` is kept by the Dataset, which is "
        f"pickled into every worker: {SPAWN}"
    ]
    assert findings(CORPUS / "clean" / "ld102_lambda_var_no_workers.py") == []


def test_records_through_helpers_constructors_and_pickled_caches() -> None:
    assert findings(".", cwd=PROJECTS / "records_flow") == [
        "roidb_data.py:15:25 LD107 `Records.data` keeps per-record Python objects built from "
        f"`json.load` data and `__getitem__` {COPY_ON_READ}",
        "roidb_data.py:26:22 LD107 `RoiDataset.roidb` keeps the result of `pickle.load` and "
        f"`__getitem__` {COPY_ON_READ}",
        "roidb_data.py:40:23 LD107 `LabelCache.labels` keeps Python objects unpickled from "
        "`numpy.load(allow_pickle=True)` (per-entry lists, tuples and numpy array headers; "
        "what grows per worker is those objects, not the array data) and `__getitem__` "
        f"{COPY_ON_READ}",
    ]  # Files: a numpy array of the loaded names; Boxes: rebound only after the call: nothing


def test_roidb_passed_in_is_judged_only_with_the_code_that_passes_it() -> None:
    assert findings("roidb_data.py", cwd=PROJECTS / "records_flow") == [
        "roidb_data.py:15:25 LD107 `Records.data` keeps per-record Python objects built from "
        f"`json.load` data and `__getitem__` {COPY_ON_READ}",
        "roidb_data.py:40:23 LD107 `LabelCache.labels` keeps Python objects unpickled from "
        "`numpy.load(allow_pickle=True)` (per-entry lists, tuples and numpy array headers; "
        "what grows per worker is those objects, not the array data) and `__getitem__` "
        f"{COPY_ON_READ}",
    ]


OPENCV = (
    "data/dataset.py:14:16 LD108 OpenCV (`cv2.resize`, utils/image.py:6) is reached from "
    "`Detection.__getitem__` through `Detection.load()` -> `prepare()` -> `resize_to()`, but "
    "no module of the project calls `cv2.setNumThreads(0)`: every worker starts a thread per "
    "core, num_workers x cores threads in all"
)


def test_opencv_three_calls_and_two_modules_below_getitem(tmp_path: Path) -> None:
    assert findings(".", cwd=PROJECTS / "opencv_chain") == [OPENCV]
    copy = tmp_path / "opencv_chain"
    shutil.copytree(PROJECTS / "opencv_chain", copy)
    (copy / "setup_env.py").write_text("import cv2\n\ncv2.setNumThreads(0)\n")
    assert findings(".", cwd=copy) == []


def test_h5py_dataset_read_from_a_handle_opened_in_init() -> None:  # items 4 and 7
    path = CORPUS / "bad" / "ld106_h5py_derived.py"
    assert findings(path) == [
        f"{path}:11:21 LD106 `self.images` is read from `self.file`, a `h5py.File(...)` handle, "
        f"opened in `Images.__init__` and used in `__getitem__`: {SHARED}",
        f"{path}:23:21 LD106 `self.images` is read from `self.file`, a `h5py.File(...)` handle, "
        f"opened in `Dead.__init__` and used in `__getitem__`: {SHARED}",
    ]
    assert findings(CORPUS / "clean" / "ld106_h5py_lazy_or_dead.py") == []


def test_import_time_call_of_an_imported_function_that_iterates_a_loader() -> None:
    assert findings(".", cwd=PROJECTS / "imported_fit") == [
        "train.py:6:1 LD101 `fit()` runs at import time and iterates a DataLoader with "
        'num_workers=4 (line 5 of engine.py), outside an `if __name__ == "__main__":` guard: '
        "each spawned worker re-imports the script and runs it again, which fails on Windows "
        "and macOS (spawn) and Linux from Python 3.14 (forkserver)"
    ]
    assert findings("train_guarded.py", "engine.py", cwd=PROJECTS / "imported_fit") == []


def test_two_projects_side_by_side_keep_their_own_modules(tmp_path: Path) -> None:
    folder = tmp_path / "repos"
    shutil.copytree(PROJECTS / "side_by_side", folder)
    ocr = (
        "ocr/dataset.py:7:20 LD106 `self.env` holds a `lmdb.open(...)` handle, opened in "
        f"`LmdbText.__init__` and used in `__getitem__`: {SHARED}"
    )
    gan = (
        "gan/dataset.py:7:20 LD106 `self.env` holds a `lmdb.open(...)` handle, opened in "
        f"`MultiResolution.__init__` and used in `__getitem__`: {SHARED}"
    )
    assert findings("ocr", cwd=folder) == [ocr]
    assert findings("gan", cwd=folder) == [gan]
    assert findings("ocr", "gan", cwd=folder) == [gan, ocr]
    assert findings(".", cwd=folder) == [gan, ocr]


def test_loop_that_rebinds_its_dataset_through_a_tuple_target() -> None:
    assert findings(CORPUS / "clean" / "ld104_rebinds_dataset_tuple.py") == []
    path = CORPUS / "bad" / "ld104_probe_each_batch.py"
    assert [line.split(" LD104 ")[0] for line in findings(path)] == [f"{path}:11:17"]


def test_ipython_magics_are_stripped_not_fatal() -> None:
    path = CORPUS / "bad" / "notebook_magics.ipynb"
    report = check_paths([path])
    assert [(f.cell, f.line, f.col, f.code, f.message) for f in report.findings] == [
        (2, 2, 63, "LD102", f"collate_fn is a lambda: {SPAWN}")
    ]


def test_notebook_class_advice_is_to_move_it_into_a_module() -> None:
    cells = [
        "from torch.utils.data import DataLoader, Dataset\n",
        "class Squares(Dataset):\n    def __len__(self):\n        return 4\n\n"
        "    def __getitem__(self, i):\n        return i * i\n",
        "for batch in DataLoader(Squares(), num_workers=2):\n    pass\n",
    ]
    notebook = {
        "cells": [{"cell_type": "code", "source": cell} for cell in cells],
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    from loaderdoctor.lint.engine import _notebook_source

    source = _notebook_source(notebook)
    found = check_source(source.text, "nb.ipynb", notebook=True, select=["LD102"])
    assert [(f.code, f.fix) for f in found] == [
        (
            "LD102",
            "Move the class into a .py module and import it (spawned workers import it from "
            "there, as they cannot import the notebook).",
        )
    ]


@pytest.mark.parametrize(
    ("line", "stripped"),
    [
        ("files = !ls data", "files = None"),
        ("out = %timeit -o f()", "out = None"),
        ("    !pip install x", "    pass"),
        ("torch.cuda?", "pass"),
        ("??torch", "pass"),
        ("x = 5 % 3", "x = 5 % 3"),
        ("y = a != b", "y = a != b"),
    ],
)
def test_magic_lines_become_statements_of_the_same_shape(line: str, stripped: str) -> None:
    from loaderdoctor.lint.engine import _magic_as_statement

    assert _magic_as_statement(line) == stripped


def test_records_built_by_helper_methods_from_a_coco_index() -> None:
    # CocoBoxes derives from a Dataset of a module read after its own, and duck-types
    # __getitem__ + __len__: it is still judged with its base (YOLOX's COCODataset).
    assert findings(".", cwd=PROJECTS / "coco_helpers") == [
        "datasets/coco.py:13:28 LD107 `CocoBoxes.annotations` keeps per-record Python objects "
        f"built from a COCO index (pycocotools) and `__getitem__` {COPY_ON_READ}"
    ]  # CocoSizes (line 31) keeps one numpy array of sizes: nothing


def test_pickled_cache_of_numpy_arrays_says_what_grows() -> None:  # item 2, the other way
    path = CORPUS / "clean" / "ld107_pickled_arrays_cache.py"
    report = check_paths([path], min_severity="info")
    assert [(f.line, f.code, f.severity, f.message) for f in report.findings] == [
        (
            32,
            "LD107",
            "info",
            "`PointClouds.points` is a Python list of numpy arrays unpickled by `pickle.load` "
            "(the same arrays `__init__` builds when there is no cache), read in `__getitem__`: "
            "reading it copies only the list and each array's header per worker, not the "
            "array data",
        )
    ]


def test_a_handle_opened_from_a_listed_name_is_not_a_list_of_names() -> None:
    path = CORPUS / "clean" / "ld107_walked_root_opened.py"
    assert check_paths([path], min_severity="info").findings == []


def test_cuda_in_a_helper_module_called_from_getitem() -> None:
    assert findings(".", cwd=PROJECTS / "cuda_helper") == [
        "data.py:11:16 LD103 `.cuda()` (helpers.py:5) is reached from `Points.__getitem__` "
        "through `to_tensor()` and runs in every DataLoader worker: a forked worker cannot "
        "initialise CUDA, a spawned one builds its own context"
    ]  # Labels' helper only calls torch.cuda.is_available(): nothing
