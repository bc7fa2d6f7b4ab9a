"""The cause catalog: every verdict loaderdoctor can reach, as data.

Docs, the ``explain`` table and the tests iterate this catalog, so a cause cannot exist without its
title, explanation and fixes.
"""

from __future__ import annotations

from dataclasses import dataclass

DOCS_BASE = "docs/causes"

# How healing treats a cause (``supervise.heal_policy`` reads them from the rows): every row says
# which apply (``heals``), so a new cause cannot silently get a default.
ENVIRONMENTAL = "environmental"  # the machine, now, not a sample: back off rather than blame
SAMPLE_DEATH = "sample-death"  # a death whose sample in flight is re-tried alone, then quarantined
PROCESS_KILLING = "process-killing"  # its sample never runs in the training process
START_FAILURE = "start-failure"  # the workers cannot start: loading moves to the main process
HEAL_KINDS = frozenset({ENVIRONMENTAL, SAMPLE_DEATH, PROCESS_KILLING, START_FAILURE})


@dataclass(frozen=True)
class FittedFix:
    """A fix that facts of the failure select (``forensics.facts``): shown before the cause's own
    fixes, its ``{fact}`` placeholders filled in from the evidence."""

    when: tuple[str, ...]  # every one of these facts holds
    text: str
    replaces: tuple[int, ...] = ()  # positions in ``Cause.fixes`` it makes moot
    unless: tuple[str, ...] = ()  # none of these facts holds


@dataclass(frozen=True)
class Cause:
    id: str
    title: str
    explanation: str
    fixes: tuple[str, ...]
    # What the failure looks like to a user of stock PyTorch (for docs and ``explain``).
    symptoms: tuple[str, ...] = ()
    # How loaderdoctor tells this cause from the others: the evidence behind the verdict (docs).
    proof: str = ""
    # The same in one line, for the README's table of causes.
    proven_by: str = ""
    # How healing treats it (``HEAL_KINDS``; empty: the user's to see). None: not declared, which
    # ``tests/test_catalog.py`` refuses.
    heals: frozenset[str] | None = None
    # Fixes that facts of this failure select and put first (``facts.choose_fixes``).
    fitted: tuple[FittedFix, ...] = ()

    @property
    def docs_url(self) -> str:
        return f"{DOCS_BASE}/{self.id}.md"


def page_command(cause_id: str) -> str:
    """What prints a cause's page wherever loaderdoctor is installed (``docs/causes`` is in a
    checkout only): the ``more:`` of a verdict in a terminal."""
    return f"loaderdoctor explain --cause {cause_id}"


CAUSES: dict[str, Cause] = {
    cause.id: cause
    for cause in (
        Cause(
            id="sample-error",
            proven_by="the exception, tagged in the worker with the index being fetched",
            heals=frozenset(),
            title="A sample raised an exception in the Dataset",
            explanation=(
                "Dataset.__getitem__ (or a transform it calls) raised a Python exception for a "
                "specific index: a corrupt or missing file, a bad label, a transform that does "
                "not accept this input."
            ),
            fitted=(
                FittedFix(
                    ("len_past_data",),
                    "{len_past_data}: `__len__` counts more items than the data holds. Make it "
                    "return the real count (`len(self.files)`), or drop the missing entries "
                    "from the list it counts.",
                    replaces=(0,),
                ),
            ),
            fixes=(
                "Open the sample named above and fix it or remove it from the file list.",
                "Reproduce it in the main process: `dataset[INDEX]` with the index above, under "
                "a debugger (`python -m pdb`).",
                "Keep training past bad samples: `loaderdoctor.DataLoader(..., heal=True, "
                "quarantine='quarantine.json')` skips them and records them.",
            ),
            symptoms=("Caught <Exception> in DataLoader worker process N.",),
            proof=(
                "The supervised Dataset records the index in flight in the worker's slot of a "
                "shared-memory flight recorder before it calls __getitem__, and tags an exception "
                "raised there with that index, the fetch stage and the indices of the batch "
                "before torch ships it to the main process. A Python exception in the fetch stage "
                "whose message matches none of the more specific signatures (shared memory, file "
                "descriptors, CUDA, pickling, bootstrapping) is a sample error. The file comes "
                "from the dataset's file list (`samples`, `imgs`, `files`, ... as torchvision's "
                "ImageFolder has), through Subset and ConcatDataset."
            ),
        ),
        Cause(
            id="collate-error",
            proven_by=(
                "the exception in collate_fn, and the samples whose shape or type differs from "
                "the rest"
            ),
            heals=frozenset(),
            title="collate_fn could not merge the samples of a batch",
            explanation=(
                "The samples of one batch have different shapes or types (ragged tensors, a None, "
                "a different number of fields), or a custom collate_fn raised."
            ),
            fitted=(
                FittedFix(
                    ("none_samples",),
                    "`__getitem__` returned None for {none_samples} (a path without `return`, "
                    "or a bad file skipped by returning None): return a sample or raise there, "
                    "or drop the Nones in a collate_fn: `default_collate([s for s in batch if "
                    "s is not None])`.",
                    replaces=(0, 2),
                ),
            ),
            fixes=(
                "Make every sample the same shape (resize, crop or pad in the Dataset).",
                "Or write a collate_fn that pads variable-length fields (e.g. "
                "torch.nn.utils.rnn.pad_sequence) or returns lists for them.",
                "Check the odd samples named above: they differ from the rest of the batch.",
            ),
            symptoms=(
                "RuntimeError: stack expects each tensor to be equal size",
                "RuntimeError: Caught RuntimeError in DataLoader worker process N.\n"
                "Original Traceback (most recent call last):\n"
                '  File ".../torch/utils/data/_utils/fetch.py", line N, in fetch\n'
                "    return self.collate_fn(data)\n"
                "TypeError: expected Tensor as element 1 in argument 0, but got NoneType",
            ),
            proof=(
                "The wrapped collate_fn marks the collate stage in the flight recorder and tags an "
                "exception raised there with the indices of the batch. It compares the structure "
                "of every sample of the batch (type, shape, dtype, nested fields) and names the "
                "samples unlike the majority as the culprits."
            ),
        ),
        Cause(
            id="init-error",
            proven_by="the exception, tagged as raised in `worker_init_fn`",
            heals=frozenset(),
            title="worker_init_fn raised an exception",
            explanation=(
                "The worker_init_fn passed to the DataLoader raised while a worker was starting, "
                "so that worker could not load any sample."
            ),
            fixes=(
                "Read the traceback above; worker_init_fn runs once per worker, in the worker.",
                "Test it in the main process: call worker_init_fn(0) before building the loader.",
            ),
            symptoms=(
                "Caught <Exception> in DataLoader worker process N.",
                "<Exception>: Caught <Exception> in DataLoader worker process N.\n"
                "Original Traceback (most recent call last):\n"
                '  File ".../torch/utils/data/_utils/worker.py", line N, in _worker_loop\n'
                "    init_fn(worker_id)\n"
                "<Exception>: ...",
            ),
            proof=(
                "The wrapper around worker_init_fn tags an exception raised in it with the init "
                "stage, so the verdict tells a failing worker_init_fn from a failing sample."
            ),
        ),
        Cause(
            id="native-crash",
            proven_by="a fatal signal; faulthandler's Python stack of the crashing thread",
            heals=frozenset({SAMPLE_DEATH, PROCESS_KILLING}),
            title="The worker crashed in native code",
            explanation=(
                "A C/C++ extension (an image or video decoder, OpenCV, a custom op, numpy "
                "with a bad buffer) crashed the worker with a fatal signal such as SIGSEGV or "
                "SIGABRT. Python cannot catch it; the Python stack at the moment of the crash "
                "shows which call did it."
            ),
            fitted=(
                FittedFix(
                    ("opencv_in_stack",),
                    "The stack shows OpenCV: set `cv2.setNumThreads(0)` in the Dataset (or "
                    "worker_init_fn); OpenCV's thread pool does not survive a fork.",
                    replaces=(2,),
                ),
                FittedFix(
                    ("no_python_stack",),
                    "No Python stack was captured: load the sample named above in the main "
                    "process (`python -X faulthandler`, num_workers=0) to see the call that "
                    "crashes.",
                    replaces=(0,),
                ),
            ),
            fixes=(
                "Look at the Python stack above: the innermost call into a native library crashed.",
                "Check the sample named above with that library alone (a corrupt file often "
                "crashes a decoder); upgrade or replace the library.",
                "Set `cv2.setNumThreads(0)` in the Dataset when OpenCV is used with workers.",
            ),
            symptoms=(
                "DataLoader worker (pid N) is killed by signal: Segmentation fault.",
                "DataLoader worker (pid(s) N) exited unexpectedly",
                "ERROR: Unexpected segmentation fault encountered in worker.",
            ),
            proof=(
                "The worker's exit status says a fatal signal killed it (SIGSEGV, SIGABRT, SIGILL, "
                "SIGFPE, SIGSYS, SIGTRAP). faulthandler, armed in every worker, writes the Python "
                "stack of every thread to a per-worker log at the crash, and the flight recorder "
                "names the sample in flight. A SIGBUS counts as a native crash only when /dev/shm "
                "still had room."
            ),
        ),
        Cause(
            id="oom-killed",
            proven_by=(
                "SIGKILL plus `Killed process PID` in the kernel log, or the cgroup's `oom_kill` "
                "counter rising"
            ),
            heals=frozenset({ENVIRONMENTAL, SAMPLE_DEATH, PROCESS_KILLING}),
            title="The kernel OOM killer killed the worker",
            explanation=(
                "The machine or the container (memory cgroup) ran out of memory and the kernel "
                "killed the worker with SIGKILL. Each worker holds its own copy of what it "
                "touches, plus prefetch_factor batches in flight."
            ),
            fitted=(
                FittedFix(
                    ("worker_rss",),
                    "Lower num_workers or prefetch_factor (or the batch size): the worker held "
                    "{worker_rss} at its last report, and every worker holds its own.",
                    replaces=(0,),
                ),
                FittedFix(
                    ("cgroup_limit",),
                    "Or raise the container's memory limit, {cgroup_limit} now (docker --memory, "
                    "the Kubernetes resources.limits.memory).",
                    replaces=(2,),
                ),
            ),
            fixes=(
                "Lower num_workers or prefetch_factor, or the batch size.",
                "Keep per-sample metadata in numpy arrays or tensors instead of Python lists or "
                "dicts: reading Python objects in forked workers copies their pages "
                "(copy-on-read, PyTorch issue #13246).",
                "Raise the container's memory limit (docker --memory, the Kubernetes "
                "resources.limits.memory).",
            ),
            symptoms=(
                "DataLoader worker (pid N) is killed by signal: Killed.",
                "Out of memory: Killed process N (python)",
            ),
            proof=(
                "The worker died of SIGKILL and the kernel log (/dev/kmsg or dmesg) has an OOM "
                "kill record (`Killed process <pid>`) for that pid, or the memory cgroup's "
                "oom_kill counter rose between the start of the iterator and the death. Without "
                "either, a SIGKILL is reported as killed-by-signal, with oom-killed as the "
                "runner-up when the kernel log could not be read."
            ),
        ),
        Cause(
            id="shm-exhausted",
            proven_by=(
                "ENOSPC from torch's shared-memory allocation, or SIGBUS with `/dev/shm` nearly "
                "full"
            ),
            heals=frozenset({ENVIRONMENTAL, SAMPLE_DEATH}),
            title="/dev/shm is full",
            explanation=(
                "Workers hand batches to the main process through shared memory in /dev/shm. "
                "When it is too small (64 MiB is the Docker default) allocating a batch fails "
                "with ENOSPC, or touching a mapped page raises SIGBUS."
            ),
            fitted=(
                FittedFix(
                    ("small_shm",),
                    "/dev/shm holds only {small_shm}: give the container more shared memory "
                    "(`docker run --shm-size=8g`, or in Kubernetes an `emptyDir: {{medium: "
                    "Memory}}` at /dev/shm).",
                    replaces=(0,),
                ),
                FittedFix(
                    ("large_shm",),
                    "Lower num_workers × prefetch_factor × batch bytes: the batches in flight "
                    "filled all {large_shm} of /dev/shm.",
                    replaces=(1,),
                ),
            ),
            fixes=(
                "Give the container more shared memory: `docker run --shm-size=8g`, or in "
                "Kubernetes mount an `emptyDir: {medium: Memory}` at /dev/shm.",
                "Lower num_workers × prefetch_factor × batch bytes.",
                "Or switch the sharing strategy: "
                "`torch.multiprocessing.set_sharing_strategy('file_system')`.",
            ),
            symptoms=(
                "ERROR: Unexpected bus error encountered in worker. This might be caused by "
                "insufficient shared memory (shm).",
                "RuntimeError: unable to write to file </torch_...>: No space left on device (28)",
                "unable to allocate shared memory(shm) for file",
            ),
            proof=(
                "A worker's exception carries ENOSPC on a shared-memory file or torch's shm "
                "messages (`unable to allocate shared memory`, `No space left on device`, "
                "`bus error`), or the worker died of SIGBUS while /dev/shm had less than 16 MiB "
                "(or 5%) free. The free and total size of /dev/shm at the failure are part of the "
                "evidence."
            ),
        ),
        Cause(
            id="worker-hang",
            proven_by=(
                "no progress past `hang_timeout`; the stuck worker's stack is dumped before it is "
                "killed"
            ),
            heals=frozenset(),
            title="The worker stopped making progress",
            explanation=(
                "A worker spent longer than the hang timeout on one sample: a network read "
                "without a timeout, a deadlock (a lock held at fork time, OpenCV or another "
                "thread pool forked mid-operation), or an infinite loop."
            ),
            fitted=(
                FittedFix(
                    ("no_python_stack",),
                    "No stack of the stuck worker could be dumped here (the evidence says why): "
                    "run `py-spy dump --pid PID` on the worker while it is stuck to see where.",
                    replaces=(0,),
                ),
            ),
            fixes=(
                "Read the worker's Python stack above: it shows where it is stuck.",
                "Put timeouts on network and file-system reads in the Dataset.",
                "Avoid forking while threads hold locks: set `cv2.setNumThreads(0)`, or use the "
                "'spawn' or 'forkserver' start method (multiprocessing_context=...).",
            ),
            symptoms=(
                "The training loop stops with no error",
                "DataLoader timed out after N seconds",
            ),
            proof=(
                "Each worker stamps the start of every sample and collate in the flight recorder, "
                "and the main process looks at it every 0.1 s. When one stage lasts longer than "
                "hang_timeout (or torch's own timeout expires), the main process has the worker's "
                "faulthandler dump the Python stack of every thread (on a real-time signal), then "
                "kills the worker. The stack shows where it was stuck."
            ),
        ),
        Cause(
            id="worker-exit",
            proven_by=(
                "an exit status (0 included) with no exception; where the Dataset called "
                "`sys.exit()`, the frame that called it"
            ),
            heals=frozenset({SAMPLE_DEATH}),
            title="The worker exited by itself, without an exception",
            explanation=(
                "Code running in the worker called sys.exit() / os._exit() or a library aborted "
                "the process with an exit status, without a Python exception reaching the "
                "DataLoader."
            ),
            fitted=(
                FittedFix(
                    ("exit_frame",),
                    "`{exit_frame}` called sys.exit() in the worker: raise an exception there "
                    "instead (torch re-raises it in the training loop, and the verdict names "
                    "the sample), or catch SystemExit around that call.",
                    replaces=(0,),
                ),
                FittedFix(
                    ("exit_code_zero",),
                    "Exit status 0 is what `sys.exit()`, `sys.exit(0)` and `exit()` give: code "
                    "in the worker (a library, or argparse reading the worker's argv) ended it "
                    "on purpose. Search the Dataset and the libraries it calls for them.",
                    replaces=(0,),
                    unless=("exit_frame",),
                ),
            ),
            fixes=(
                "Search the Dataset and the libraries it calls for exit()/os._exit()/abort paths.",
                "Run the sample named above in the main process (num_workers=0) to see the message "
                "printed before the exit.",
            ),
            symptoms=(
                "DataLoader worker (pid(s) N) exited unexpectedly",
                "DataLoader worker (pid N) exited unexpectedly with exit code N. Details are lost "
                "due to multiprocessing.",
            ),
            proof=(
                "The worker ended with an exit code, not a signal (0 included: `sys.exit()`), and "
                "no Python exception reached the DataLoader; the flight recorder names the sample "
                "in flight, and a sys.exit() in the Dataset leaves the frame that called it. A worker that exits before it reaches worker_init_fn is checked for the "
                "start-up causes first (main guard, unpickling)."
            ),
        ),
        Cause(
            id="killed-by-signal",
            proven_by="SIGKILL/SIGTERM with no OOM evidence where it could be read",
            heals=frozenset({ENVIRONMENTAL, SAMPLE_DEATH, PROCESS_KILLING}),
            title="Something outside the worker killed it",
            explanation=(
                "The worker received SIGKILL or SIGTERM and the kernel log shows no OOM kill: "
                "a job scheduler, a watchdog, a user's kill command, or an OOM killer whose log "
                "cannot be read here."
            ),
            fitted=(
                FittedFix(
                    ("kernel_log_unread",),
                    "The kernel log could not be read here: run `dmesg | grep -i killed` as root "
                    "(or read the node's kernel log) to rule out the OOM killer.",
                    replaces=(1,),
                ),
            ),
            fixes=(
                "Check the scheduler's logs (Slurm, Kubernetes events: `kubectl describe pod`).",
                "If the kernel log could not be read, run `dmesg | grep -i killed` as root to rule "
                "out the OOM killer.",
            ),
            symptoms=("DataLoader worker (pid N) is killed by signal: Killed.", "Terminated"),
            proof=(
                "The worker died of SIGKILL, SIGTERM or another signal that is not a native "
                "crash, and neither the kernel log nor the memory cgroup's oom_kill counter shows "
                "an OOM kill. The confidence says how much could be read: high when both were "
                "readable and clean, low (with oom-killed listed as possible) when neither was."
            ),
        ),
        Cause(
            id="unpicklable",
            proven_by=(
                "the pickling error, with each of dataset/collate_fn/worker_init_fn tried alone; "
                "a batch lost in the worker's feeder thread"
            ),
            heals=frozenset({START_FAILURE}),
            title="Something that must cross between processes cannot be pickled",
            explanation=(
                "Two things are pickled: with the 'spawn' or 'forkserver' start method (the "
                "default on macOS, Windows, and on Linux from Python 3.14) the Dataset, "
                "collate_fn and worker_init_fn are pickled into each worker; and with every start "
                "method each batch a worker returns is pickled back to the main process. "
                "Lambdas, nested functions, local classes and open handles cannot be."
            ),
            fitted=(
                FittedFix(
                    ("unsendable_batch",),
                    "{unsendable_batch} cannot be pickled back to the main process: return "
                    "tensors, arrays, numbers, strings and lists or dicts of them from "
                    "collate_fn and __getitem__ (make a generator a list: `list(...)`).",
                    replaces=(0, 1, 2, 3, 4),
                ),
                FittedFix(
                    ("unpicklable_in_dataset", "unpicklable_object"),
                    "{unpicklable_object} cannot be pickled for a spawned worker: make it a "
                    "module-level function or class (functools.partial of one is fine), or build "
                    "it in the worker (in `__getitem__` or worker_init_fn).",
                    replaces=(0, 1, 3),
                ),
                FittedFix(
                    ("unpicklable_object",),
                    "{unpicklable_object} cannot be pickled for a spawned worker: define it as a "
                    "module-level function (functools.partial of one is fine), not a lambda or "
                    "a nested function.",
                    replaces=(0,),
                    unless=("unpicklable_in_dataset", "unsendable_batch"),
                ),
            ),
            fixes=(
                "Define collate_fn / worker_init_fn as module-level functions, not lambdas or "
                "nested functions (functools.partial of a module-level function is fine).",
                "Return only tensors, arrays, numbers, strings and containers of them from "
                "__getitem__ and collate_fn; apply callables inside the worker.",
                "Open files, database and network handles lazily in __getitem__ (or in "
                "worker_init_fn), not in __init__.",
                "In a notebook (Jupyter, Colab) or a script run by `python -c` or from stdin, move "
                "the Dataset, collate_fn and worker_init_fn into a .py file next to it and import "
                "them from there: spawn workers cannot import what a cell defines in __main__.",
                "Or choose fork explicitly: DataLoader(..., multiprocessing_context='fork') (Linux).",
            ),
            symptoms=(
                "Can't pickle <function <lambda>>: attribute lookup <lambda> on __main__ failed",
                "AttributeError: Can't pickle local object",
                "Can't get attribute 'X' on <module '__main__'",
            ),
            proof=(
                "At start-up, the pickling error raised while starting the workers, with each of "
                "dataset, collate_fn and worker_init_fn pickled on its own to name the part that "
                "fails. For a batch, the worker's queue feeder thread reports the pickling error "
                "to the flight recorder, so the lost batch becomes a verdict instead of a hang."
            ),
        ),
        Cause(
            id="batch-lost",
            proven_by=(
                "the worker's queue feeder thread failed to send a finished batch (where stock "
                "torch waits for it)"
            ),
            heals=frozenset(),
            title="A finished batch could not be sent to the main process",
            explanation=(
                "The worker built the batch, but its queue's background feeder thread failed to "
                "send it (pickling it, moving its tensors to shared memory, or opening the "
                "socket that passes their file descriptors). Stock PyTorch prints the error in "
                "the worker and waits for the batch forever."
            ),
            fitted=(
                FittedFix(
                    ("socket_path_too_long",),
                    "TMPDIR is too long for a socket path (108 bytes): point TMPDIR at a short "
                    "directory such as /tmp.",
                    replaces=(1,),
                ),
            ),
            fixes=(
                "Read the error above: it comes from the worker's queue feeder thread.",
                "An 'AF_UNIX path too long' error means TMPDIR is too long for a socket path "
                "(108 bytes): point TMPDIR at a short directory such as /tmp.",
                "Or switch the sharing strategy: "
                "`torch.multiprocessing.set_sharing_strategy('file_system')`.",
            ),
            symptoms=(
                "The training loop stops with no error",
                "Traceback (most recent call last):\n"
                '  File ".../multiprocessing/queues.py", line N, in _feed\n'
                "    obj = _ForkingPickler.dumps(obj)\n"
                "OSError: AF_UNIX path too long",
            ),
            proof=(
                "loaderdoctor hooks the worker's queue feeder thread: a failure there bumps the "
                "worker's row of the flight recorder and writes the traceback to its log, and "
                "the main process turns it into this verdict at its next poll."
            ),
        ),
        Cause(
            id="main-guard-missing",
            proven_by=(
                "a spawned worker that re-ran the script and reached a DataLoader while "
                "bootstrapping"
            ),
            heals=frozenset({START_FAILURE}),
            title='The script has no `if __name__ == "__main__":` guard',
            explanation=(
                "With 'spawn' or 'forkserver' each worker imports the main script again. Without "
                "the guard the worker re-runs the training code at import, tries to start its "
                "own workers and dies during bootstrapping."
            ),
            fitted=(
                FittedFix(
                    ("main_script",),
                    "In {main_script}: move the training code into a function and call it under "
                    '`if __name__ == "__main__":`.',
                    replaces=(0,),
                ),
            ),
            fixes=(
                "Move the training code into a function and call it under "
                '`if __name__ == "__main__":`.',
                "Run `loaderdoctor lint SCRIPT` to find the unguarded DataLoader.",
            ),
            symptoms=(
                "An attempt has been made to start a new process before the current process has "
                "finished its bootstrapping phase.",
            ),
            proof=(
                "A spawned worker that re-runs the main script and reaches a DataLoader at import "
                "leaves a marker naming the script and the line; the main process reads it when "
                "the worker dies before worker_init_fn. Failing that, the main script is checked "
                "statically (lint rule LD101) for a DataLoader outside "
                '`if __name__ == "__main__":`, and torch\'s bootstrapping-phase message is '
                "recognised."
            ),
        ),
        Cause(
            id="fd-exhausted",
            proven_by="EMFILE, and the process's open descriptors against its `RLIMIT_NOFILE`",
            heals=frozenset({ENVIRONMENTAL}),
            title="Too many open files (EMFILE)",
            explanation=(
                "A process hit its open-file limit (ulimit -n). Datasets that open files without "
                "closing them leak descriptors, and with the 'file_descriptor' sharing strategy "
                "every tensor in flight between processes holds one."
            ),
            fitted=(
                FittedFix(
                    ("low_open_files_limit",),
                    "Raise the open-file limit, {low_open_files_limit} here: `ulimit -n 65536` "
                    "before starting, or resource.setrlimit(RLIMIT_NOFILE, ...) at start-up.",
                    replaces=(1,),
                ),
                FittedFix(
                    ("file_descriptor_strategy",),
                    "Or switch torch's sharing strategy from 'file_descriptor' (a descriptor for "
                    "every tensor in flight): "
                    "`torch.multiprocessing.set_sharing_strategy('file_system')`.",
                    replaces=(2,),
                ),
            ),
            fixes=(
                "Close files in __getitem__ (use `with open(...)`).",
                "Raise the limit: `ulimit -n 65536` before starting, or "
                "resource.setrlimit(RLIMIT_NOFILE, ...) at start-up. macOS starts shells at 256, "
                "which a few workers passing tensors by file descriptor exhaust.",
                "Or `torch.multiprocessing.set_sharing_strategy('file_system')`.",
            ),
            symptoms=("OSError: [Errno 24] Too many open files", "received 0 items of ancdata"),
            proof=(
                "The exception carries errno 24 (EMFILE) or the messages `Too many open files` / "
                "`received 0 items of ancdata`. When the main process cannot receive a batch, "
                "loaderdoctor counts the open files of every worker and of itself against their "
                "RLIMIT_NOFILE and names the process at its limit."
            ),
        ),
        Cause(
            id="process-limit",
            proven_by=(
                'EAGAIN from fork/clone (or "can\'t start new thread") while starting workers, '
                "with `RLIMIT_NPROC` and the pids cgroup's `pids.max` where readable"
            ),
            heals=frozenset({START_FAILURE}),
            title="No more processes may start (EAGAIN): a process limit was reached",
            explanation=(
                "Starting a worker failed with EAGAIN ('Resource temporarily unavailable'): the "
                "user has as many processes and threads as RLIMIT_NPROC (ulimit -u) allows, or "
                "the container's pids cgroup (docker --pids-limit, Kubernetes podPidsLimit) is "
                "full. Every worker counts, and so does each thread of every process."
            ),
            fitted=(
                FittedFix(
                    ("thread_start_failed",),
                    "A thread could not start: use fewer threads per process (OMP_NUM_THREADS=1, "
                    "torch.set_num_threads(1) in worker_init_fn); every thread counts.",
                    replaces=(0,),
                ),
            ),
            fixes=(
                "Use fewer workers (num_workers), or fewer threads per process "
                "(OMP_NUM_THREADS=1, torch.set_num_threads).",
                "Raise the limit: `ulimit -u` before starting; in docker `--pids-limit`, in "
                "Kubernetes the kubelet's podPidsLimit.",
                "Look for leaked processes or threads of earlier loaders (persistent_workers, "
                "DataLoaders created in a loop).",
            ),
            symptoms=("BlockingIOError: [Errno 11] Resource temporarily unavailable",),
            proof=(
                "Starting a worker raised errno 11 (EAGAIN) from fork/clone; the evidence shows "
                "RLIMIT_NPROC and the pids cgroup's pids.max and pids.current where readable."
            ),
        ),
        Cause(
            id="cuda-in-worker",
            proven_by="CUDA's re-initialisation error in a forked worker",
            heals=frozenset(),
            title="CUDA was used in a forked worker",
            explanation=(
                "CUDA was initialised in the main process before the workers were forked, and a "
                "worker then touched CUDA. A forked child cannot re-initialise CUDA."
            ),
            fitted=(
                FittedFix(
                    ("cuda_stage",),
                    "Keep the {cuda_stage} on the CPU: it touched CUDA in a forked worker. Move "
                    "batches to the GPU in the training loop (`batch.to(device, "
                    "non_blocking=True)` with pin_memory=True).",
                    replaces=(0,),
                ),
            ),
            fixes=(
                "Keep the Dataset and collate_fn on the CPU; move batches to the GPU in the "
                "training loop (`batch.to(device, non_blocking=True)` with pin_memory=True).",
                "Or use the 'spawn' start method: DataLoader(..., multiprocessing_context='spawn').",
            ),
            symptoms=("RuntimeError: Cannot re-initialize CUDA in forked subprocess.",),
            proof=(
                "A worker's exception carries torch's message `Cannot re-initialize CUDA in forked "
                "subprocess`."
            ),
        ),
        Cause(
            id="paging-file-too-small",
            proven_by=(
                "Windows: `WinError 1455` while a spawned worker loads torch's DLLs (too many "
                "workers for the commit limit)"
            ),
            heals=frozenset({START_FAILURE}),
            title="Windows ran out of commit space while starting workers (WinError 1455)",
            explanation=(
                "Windows has no fork: each worker is a new process that loads torch's DLLs "
                "again, and Windows reserves commit space (RAM plus the paging file) for every "
                "one of them, used or not. With many workers the sum passes the commit limit and "
                "the next worker fails to load a DLL, before it ever reads a sample."
            ),
            fixes=(
                "Use fewer workers (num_workers=2 or 4 on a laptop), and persistent_workers=True "
                "so they start once per run, not once per epoch.",
                "Enlarge the paging file: System Properties > Advanced > Performance > Virtual "
                "memory, or let Windows manage it on a drive with free space.",
                "Close other programs that hold commit space (a second training run, a browser).",
            ),
            symptoms=(
                "OSError: [WinError 1455] The paging file is too small for this operation to "
                "complete",
                'Error loading "...torch\\lib\\...dll" or one of its dependencies',
            ),
            proof=(
                "Windows' own error code 1455 (ERROR_COMMITMENT_LIMIT), raised while a worker "
                "process loads torch's libraries; read from the worker's error or from a log by "
                "`loaderdoctor explain`."
            ),
        ),
        Cause(
            id="mps-in-worker",
            proven_by=(
                "macOS: an MPS tensor returned by a worker (`_share_filename_: only available on "
                "CPU`), or the Objective-C fork-safety abort"
            ),
            heals=frozenset(),
            title="Apple's GPU (MPS) or Objective-C state crossed into DataLoader workers (macOS)",
            explanation=(
                "On macOS the Dataset or collate_fn made MPS tensors (or `torch.set_default_device"
                "('mps')` was in force), which workers cannot share with the main process; or "
                "workers were forked (multiprocessing_context='fork') after the main process had "
                "initialised MPS or another Objective-C framework, and macOS kills a forked child "
                "that touches it."
            ),
            fitted=(
                FittedFix(
                    ("forked_objc",),
                    "Keep macOS's default 'spawn' start method: macOS kills a forked worker that "
                    "touches Objective-C state the main process set up.",
                    replaces=(2,),
                ),
            ),
            fixes=(
                "Keep the Dataset and collate_fn on the CPU; move each batch to the GPU in the "
                "training loop (`batch.to('mps')`).",
                "Do not set torch.set_default_device('mps') before the DataLoader's workers start.",
                "Keep macOS's default 'spawn' start method: do not force 'fork'.",
            ),
            symptoms=(
                "_share_filename_: only available on CPU",
                "may have been in progress in another thread when fork() was called",
            ),
            proof=(
                "The worker's exception carries torch's `_share_filename_: only available on CPU` "
                "(a non-CPU tensor returned by a worker), or a forked worker was aborted by the "
                "Objective-C runtime's fork-safety check, whose message names `fork()`."
            ),
        ),
        Cause(
            id="shared-failure",
            proven_by=(
                "the same exception (numbers and paths masked) on eight samples in a row with none "
                "delivered between, or more skipped samples than `max_skipped`: healing stops"
            ),
            heals=frozenset(),
            title="Healing stopped: many samples fail alike, so the samples are not to blame",
            explanation=(
                "While healing, the same failure hit sample after sample with none delivered "
                "between, or more samples failed than max_skipped allows. A failure every "
                "sample shares is not a bad sample: CUDA used in the Dataset where the workers "
                "have no GPU (no NVIDIA driver, or a forked worker), a data root that does not "
                "exist, a package the workers cannot import, a wrong transform argument. "
                "Skipping on would quarantine the whole dataset and call the run healed."
            ),
            fixes=(
                "Read the shared message and its likely cause above, and fix that one thing "
                "(the data path, the import, the device); no sample needs fixing.",
                "Load one of the samples named above in the main process (`dataset[i]`): failing "
                "there too, the cause is the code, the data path or the machine; loading fine "
                "there, it is what the workers inherit or share (a handle opened in __init__, a "
                "lock or semaphore, a server).",
                "If many samples really are bad, raise the budget: `DataLoader(..., "
                "max_skipped=0.9)` or `loaderdoctor run --heal --max-skipped 0.9`.",
            ),
            symptoms=(
                "loaderdoctor stopped healing: RuntimeError: Found no NVIDIA driver on your "
                "system.",
                "loaderdoctor stopped healing: FileNotFoundError: [Errno <n>] No such file or "
                "directory: '<path>'",
            ),
            proof=(
                "Each skipped sample's exception type and message are compared with numbers, "
                "paths and addresses masked. Eight different samples failing alike with no "
                "sample delivered between, or more skipped samples than max_skipped (a count, "
                "or a fraction of the dataset; default 0.5), stop healing; the verdict names "
                "the shared message and, from its wording, the likely cause. Before a sample "
                "that failed again alone is blamed, a control is re-tried the same way: a "
                "sample loaded whole earlier in this run or, before any has, two samples owed "
                "in other batches; the control failing too stops healing at once, nothing "
                "quarantined."
            ),
        ),
        Cause(
            id="internal-error",
            proven_by=(
                "an exception whose innermost frame is loaderdoctor's own code, not tagged as "
                "coming from your dataset, collate_fn or worker_init_fn: a bug of ours, never a "
                "verdict on your job"
            ),
            heals=frozenset(),
            title="loaderdoctor's own machinery failed (not your job's fault)",
            explanation=(
                "An exception was raised inside loaderdoctor's own code (a wrapper around your "
                "dataset, collate_fn or worker_init_fn, the flight recorder, an import it needs), "
                "not in your dataset, collate_fn or worker_init_fn. It says nothing about your "
                "data or your training job: it is a bug in loaderdoctor, please report it."
            ),
            fixes=(
                "Please report it to the loaderdoctor maintainers with the traceback shown under "
                "the evidence and the versions of loaderdoctor, torch and Python.",
                "Nothing to do to keep training: the loader falls back to plain torch loading and "
                "says so once (not a stream part delivered already: plain torch would start it "
                "again; there the error is raised).",
                "Or use torch.utils.data.DataLoader directly until it is fixed.",
            ),
            symptoms=("an exception whose innermost frame is in loaderdoctor's own source files",),
            proof=(
                "The innermost frame of the exception's traceback lies in loaderdoctor's own "
                "package (a wrapper, the recorder, an import it needs), not in the user's "
                "dataset, collate_fn or worker_init_fn, nor in torch code they called."
            ),
        ),
    )
}


def get_cause(cause_id: str) -> Cause:
    return CAUSES[cause_id]
