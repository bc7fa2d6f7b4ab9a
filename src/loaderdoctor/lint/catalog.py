"""The lint rule catalog: one row of data per rule, so docs and tests can iterate it."""

from __future__ import annotations

from dataclasses import dataclass

SEVERITIES = ("error", "warning", "info")
"""From most to least severe. ``info`` findings are hidden unless asked for."""


@dataclass(frozen=True)
class Rule:
    """One lint rule: a stable code, a one-line title, why it matters and the concrete fix.

    ``severity`` is the default of its findings (a finding may say otherwise: LD107 on a list of
    file names is ``info``). ``spawn_only`` rules matter only where workers are started by spawn
    or forkserver: errors for Windows and macOS, warnings for Linux alone (fork by default up to
    Python 3.13, forkserver from 3.14), errors everywhere for an explicit spawn context.
    """

    code: str
    title: str
    why: str
    fix: str
    severity: str = "warning"
    fixable: bool = False
    spawn_only: bool = False


_ROWS: tuple[Rule, ...] = (
    Rule(
        code="LD000",
        title="file could not be checked",
        why="The file has a syntax error or cannot be decoded, so none of its rules ran.",
        fix="Fix the syntax error (run `python -m py_compile FILE`), then lint again.",
        severity="error",
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
        severity="error",
        fixable=True,
        spawn_only=True,
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
        severity="error",
        spawn_only=True,
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
        severity="error",
    ),
    Rule(
        code="LD104",
        title="DataLoader with workers created inside a training loop",
        why=(
            "Every new DataLoader starts its worker processes from scratch: one created inside "
            "the epoch loop (or per step) re-spawns all workers and re-pickles the Dataset into "
            "each of them every time round, which stalls the GPU at every epoch start and leaks "
            "memory and file descriptors when an iterator is left behind."
        ),
        fix=(
            "Create the DataLoader once before the loop and iterate it each epoch; pass "
            "persistent_workers=True to keep the workers alive between epochs (call "
            "sampler.set_epoch(epoch) for a DistributedSampler)."
        ),
        severity="warning",
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
        severity="error",
    ),
    Rule(
        code="LD106",
        title="file or connection handle opened in Dataset.__init__ and used in workers",
        why=(
            "A handle opened in __init__ (a file, h5py.File, lmdb, sqlite3, a zip or tar "
            "archive, an .npz, a boto3 or requests client) is copied into every forked worker: "
            "they share one file offset, one HDF5/LMDB/SQLite state or one socket, which "
            "corrupts reads, deadlocks or crashes the worker; under spawn (Windows, macOS) the "
            "handle cannot be pickled at all."
        ),
        fix=(
            "Store the path in __init__ and open the handle lazily in __getitem__, once per "
            "worker (`if self._handle is None: self._handle = open(...)`), or in worker_init_fn."
        ),
        severity="error",
    ),
    Rule(
        code="LD107",
        title="Dataset keeps a big deserialised Python object (copy-on-read)",
        why=(
            "Objects loaded with json/pickle/yaml/torch.load, or lists of dicts and tuples built "
            "per record, are millions of small Python objects. Every worker that reads them "
            "writes their reference counts, which touches every page holding them, so each "
            "forked worker slowly gets its own copy: memory grows by num_workers x the size of "
            "the object over the epoch until the OOM killer ends the run (pytorch/pytorch#13246)."
        ),
        fix=(
            "Keep per-sample data in few large buffers: numpy arrays (np.array(paths, "
            "dtype=np.str_), integer label arrays, one serialised bytes buffer plus offsets), "
            "an Arrow/pandas table or a memory-mapped store (np.memmap, LMDB, HDF5 opened per "
            "worker); or keep only an index and read each record in __getitem__."
        ),
        severity="warning",
    ),
    Rule(
        code="LD108",
        title="OpenCV used in a Dataset without limiting its threads",
        why=(
            "OpenCV starts a thread pool sized to all cores in every worker: N workers x all "
            "cores threads oversubscribe the CPU, and a pool created before fork can deadlock "
            "the worker."
        ),
        fix=(
            "Call `cv2.setNumThreads(0)` once, in any module of the project that the entry "
            "point imports (a setup module) or in worker_init_fn."
        ),
        severity="warning",
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
        severity="warning",
    ),
    Rule(
        code="LD110",
        title="worker reseeded with a seed that is the same every epoch",
        why=(
            "torch seeds numpy in every worker from an array of words, and MT19937 seeded from "
            "an array always starts its state with 2147483648: `np.random.get_state()[1][0] + "
            "worker_id` in a worker_init_fn is the same number in every epoch and every run, "
            "so each epoch repeats the last one's random augmentations; so does a seed built "
            "only from constants, `worker_id` and run-wide settings (`42 + worker_id`)."
        ),
        fix=(
            "Seed from torch's per-worker seed, which changes every epoch: "
            "`np.random.seed(torch.initial_seed() % 2**32)` (torch already adds worker_id)."
        ),
        severity="warning",
        fixable=True,
    ),
    Rule(
        code="LD111",
        title="DistributedSampler shuffles but set_epoch is never called",
        why=(
            "DistributedSampler seeds its shuffle with seed + epoch, and its epoch changes only "
            "through set_epoch(): without the call every epoch, on every rank, draws the same "
            "order. Nothing fails; the model sees the data in one fixed order."
        ),
        fix="Call `sampler.set_epoch(epoch)` at the start of each epoch, before iterating.",
    ),
    Rule(
        code="LD112",
        title="IterableDataset stream not split between DataLoader workers",
        why=(
            "Each worker gets its own copy of an IterableDataset and runs its __iter__ whole: "
            "unless __iter__ takes only its share (by torch.utils.data.get_worker_info()), "
            "every item arrives once per worker, duplicated silently."
        ),
        fix=(
            "In __iter__: `info = torch.utils.data.get_worker_info()` and, when it is not None, "
            "yield only this worker's share (`itertools.islice(stream, info.id, None, "
            "info.num_workers)`, or its own files)."
        ),
    ),
    Rule(
        code="LD113",
        title="dataset attribute changed in the training loop under persistent workers",
        why=(
            "persistent_workers=True keeps each worker's copy of the dataset from the first "
            "epoch on: a value the training loop assigns to the dataset afterwards (a "
            "curriculum's difficulty, an image size) stays in the main process, and the workers "
            "go on loading with the old one."
        ),
        fix=(
            "Pass the value through shared memory (a multiprocessing.Value or a shared tensor "
            "read in __getitem__), or set persistent_workers=False."
        ),
    ),
)

RULES: dict[str, Rule] = {rule.code: rule for rule in _ROWS}
"""Every rule by code, in code order."""
