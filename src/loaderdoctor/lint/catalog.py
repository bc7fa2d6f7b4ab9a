"""The lint rule catalog: one row of data per rule, so docs and tests can iterate it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """One lint rule: a stable code, a one-line title, why it matters and the concrete fix."""

    code: str
    title: str
    why: str
    fix: str
    fixable: bool = False


_ROWS: tuple[Rule, ...] = (
    Rule(
        code="LD000",
        title="file could not be checked",
        why="The file has a syntax error or cannot be decoded, so none of its rules ran.",
        fix="Fix the syntax error (run `python -m py_compile FILE`), then lint again.",
    ),
    Rule(
        code="LD101",
        title="DataLoader workers started at module top level without a main guard",
        why=(
            "Under the spawn and forkserver start methods (the default on macOS and Windows, "
            "and on Linux from Python 3.14) every worker re-imports the main script. Top-level "
            "code that iterates a DataLoader with workers then starts workers again while the "
            "child is still bootstrapping, and the run dies with 'An attempt has been made to "
            "start a new process before the current process has finished its bootstrapping "
            "phase' or a worker that exits unexpectedly."
        ),
        fix=(
            'Move the training code into a function and call it under `if __name__ == "__main__":`.'
        ),
    ),
    Rule(
        code="LD102",
        title="unpicklable callable handed to DataLoader workers",
        why=(
            "With spawn or forkserver (default on macOS and Windows, and on Linux from "
            "Python 3.14) the Dataset, collate_fn, worker_init_fn and samplers are pickled "
            "into every worker. Lambdas, functions and classes defined inside a function, and "
            "bound methods of such objects cannot be pickled: the first epoch fails with "
            "'Can't pickle <function <lambda>>' or 'Can't get local object'."
        ),
        fix=(
            "Define the callable as a plain function or class at module level (use "
            "functools.partial for parameters), or pass "
            'multiprocessing_context="fork" deliberately.'
        ),
        fixable=True,
    ),
    Rule(
        code="LD103",
        title="CUDA used inside a Dataset or collate_fn",
        why=(
            "Dataset methods and collate_fn run in the worker processes. A forked worker cannot "
            "initialise CUDA ('Cannot re-initialize CUDA in forked subprocess'), and under spawn "
            "every worker creates its own CUDA context (hundreds of MiB of GPU memory each)."
        ),
        fix=(
            "Return CPU tensors from the Dataset and collate_fn, set pin_memory=True, and move "
            "the batch to the GPU in the training loop (`batch.to(device, non_blocking=True)`)."
        ),
    ),
    Rule(
        code="LD104",
        title="DataLoader with workers created inside a training loop",
        why=(
            "Every new DataLoader iterator starts its worker processes from scratch: creating "
            "the DataLoader per step re-spawns (and re-pickles the Dataset into) all workers "
            "for each batch, which is slow and leaks memory and file descriptors."
        ),
        fix=(
            "Create the DataLoader once before the loop and iterate it; use "
            "persistent_workers=True to keep workers alive across epochs."
        ),
    ),
    Rule(
        code="LD105",
        title="worker-only DataLoader option given with num_workers=0",
        why=(
            "prefetch_factor, persistent_workers and timeout only apply to worker processes. "
            "With num_workers=0 torch raises ValueError for prefetch_factor and "
            "persistent_workers=True, and silently ignores timeout."
        ),
        fix="Remove the option, or set num_workers to a positive number.",
        fixable=True,
    ),
    Rule(
        code="LD106",
        title="file or connection handle opened in Dataset.__init__ and used in workers",
        why=(
            "A handle opened in __init__ is copied into every forked worker: they share one file "
            "offset, one HDF5/LMDB/SQLite state or one socket, which corrupts reads, deadlocks or "
            "crashes the worker; under spawn the handle cannot be pickled at all."
        ),
        fix=(
            "Store the path in __init__ and open the handle lazily in __getitem__ (once per "
            "worker: `if self._handle is None: self._handle = open(...)`), or in worker_init_fn."
        ),
    ),
    Rule(
        code="LD107",
        title="Dataset stores a large Python list or dict of per-sample objects",
        why=(
            "Reading Python objects touches their reference counts, so every worker slowly "
            "copies the pages of a shared list or dict (copy-on-read): memory grows by "
            "num_workers x the size of the list until the OOM killer ends the run "
            "(pytorch/pytorch#13246)."
        ),
        fix=(
            "Store per-sample metadata in numpy arrays (np.array of paths with dtype=np.str_, "
            "integer label arrays), a pandas/arrow table, or a file read in __getitem__."
        ),
    ),
    Rule(
        code="LD108",
        title="OpenCV used in a Dataset without limiting its threads",
        why=(
            "OpenCV starts a thread pool sized to all cores in every worker: N workers x all "
            "cores threads oversubscribe the CPU, and a pool created before fork can deadlock "
            "the worker."
        ),
        fix="Call `cv2.setNumThreads(0)` at module level or in worker_init_fn.",
    ),
    Rule(
        code="LD109",
        title="random generator created in Dataset.__init__ and drawn from in workers",
        why=(
            "PyTorch reseeds the global torch, random and numpy generators per worker, but not "
            "generator objects stored on the Dataset: every worker gets a copy of the same "
            "stream, so the 'random' augmentations repeat num_workers times."
        ),
        fix=(
            "Draw from the global generators, or reseed the generator per worker in "
            "worker_init_fn (`info = torch.utils.data.get_worker_info(); "
            "info.dataset.rng = np.random.default_rng(info.seed)`)."
        ),
    ),
)

RULES: dict[str, Rule] = {rule.code: rule for rule in _ROWS}
"""Every rule by code, in code order."""
