"""Evidence in, first fix out: the fix a user reads first is the one this failure's facts point at.

Every cause appears with at least two shapes of evidence; where a fact of the evidence selects a
fitted fix (``catalog.FittedFix``), the first fix names the object the evidence names.
"""

from __future__ import annotations

import re

import pytest

from loaderdoctor.forensics import CAUSES, Evidence, diagnose
from loaderdoctor.forensics.facts import FACTS

MIB = 1024 * 1024
EXIT_STACK = (
    "loaderdoctor: the worker called exit\n"
    "Traceback (most recent call last):\n"
    '  File "/site-packages/lib/cli.py", line 40, in main\n'
    "    sys.exit(0)\n"
    "SystemExit: 0\n"
)


def exception(**facts: object) -> Evidence:
    return Evidence(kind="exception", worker_id=0, pid=4242, **facts)  # type: ignore[arg-type]


def death(**facts: object) -> Evidence:
    return Evidence(kind="death", worker_id=1, pid=4243, **facts)  # type: ignore[arg-type]


CASES: list[tuple[str, Evidence, str, str]] = [
    (
        "len-past-data",
        exception(
            exception_type="IndexError",
            exception_message="IndexError: list index out of range",
            stage="fetch",
            in_flight_index=992,
            batch_indices=[992, 993, 994, 995],
            dataset_length=1000,
            last_loaded_index=983,
        ),
        "sample-error",
        "`__len__` returns 1000, but `dataset[992]` raised IndexError (the last sample this "
        "worker loaded before it: `dataset[983]`): `__len__` counts more items than the data "
        "holds. Make it return the real count (`len(self.files)`), or drop the missing entries "
        "from the list it counts.",
    ),
    (
        "missing-file",
        exception(
            exception_type="FileNotFoundError",
            exception_message="FileNotFoundError: [Errno 2] No such file or directory: 'x.jpg'",
            stage="fetch",
            in_flight_index=7,
            dataset_length=1000,
        ),
        "sample-error",
        CAUSES["sample-error"].fixes[0],
    ),
    (
        "index-error-past-len",  # an index the sampler never draws: not a __len__ question
        exception(
            exception_type="IndexError",
            exception_message="IndexError: list index out of range",
            stage="fetch",
            in_flight_index=1200,
            dataset_length=1000,
        ),
        "sample-error",
        CAUSES["sample-error"].fixes[0],
    ),
    (
        "none-samples",
        exception(
            exception_type="AttributeError",
            exception_message="AttributeError: 'NoneType' object has no attribute 'numel'",
            stage="collate",
            odd_indices=[17, 88],
        ),
        "collate-error",
        "`__getitem__` returned None for samples 17, 88 (a path without `return`, or a bad file "
        "skipped by returning None): return a sample or raise there, or drop the Nones in a "
        "collate_fn: `default_collate([s for s in batch if s is not None])`.",
    ),
    (
        "ragged",
        exception(
            exception_type="RuntimeError",
            exception_message="RuntimeError: stack expects each tensor to be equal size",
            stage="collate",
            odd_indices=[27],
        ),
        "collate-error",
        CAUSES["collate-error"].fixes[0],
    ),
    (
        "init-raised",
        exception(exception_type="ValueError", exception_message="ValueError: no", stage="init"),
        "init-error",
        CAUSES["init-error"].fixes[0],
    ),
    (
        "init-raised-key",
        exception(exception_type="KeyError", exception_message="KeyError: 'RANK'", stage="init"),
        "init-error",
        CAUSES["init-error"].fixes[0],
    ),
    (
        "segfault-with-stack",
        death(signal="SIGSEGV", python_stack='  File "decode.py", line 3 in load'),
        "native-crash",
        CAUSES["native-crash"].fixes[0],
    ),
    (
        "segfault-in-opencv",
        death(
            signal="SIGSEGV",
            python_stack='  File "/site-packages/cv2/__init__.py", line 9 in imread',
        ),
        "native-crash",
        "The stack shows OpenCV: set `cv2.setNumThreads(0)` in the Dataset (or worker_init_fn); "
        "OpenCV's thread pool does not survive a fork.",
    ),
    (
        "segfault-without-stack",
        death(signal="SIGSEGV"),
        "native-crash",
        "No Python stack was captured: load the sample named above in the main process "
        "(`python -X faulthandler`, num_workers=0) to see the call that crashes.",
    ),
    (
        "oom-host",
        death(signal="SIGKILL", oom_kill_for_pid=True, kernel_log_readable=True),
        "oom-killed",
        CAUSES["oom-killed"].fixes[0],
    ),
    (
        "oom-cgroup-with-rss",
        death(
            signal="SIGKILL",
            cgroup_oom_kills_before=0,
            cgroup_oom_kills_after=1,
            cgroup_limit_bytes=512 * MIB,
            worker_rss_bytes=300 * MIB,
        ),
        "oom-killed",
        "Lower num_workers or prefetch_factor (or the batch size): the worker held 300.0 MiB at "
        "its last report, and every worker holds its own.",
    ),
    (
        "small-shm",
        exception(
            exception_type="RuntimeError",
            exception_message="RuntimeError: unable to allocate shared memory(shm) for file "
            "</torch_1_2_3>: No space left on device (28)",
            stage="send",
            shm_total_bytes=64 * MIB,
            shm_free_bytes=0,
        ),
        "shm-exhausted",
        "/dev/shm holds only 64.0 MiB: give the container more shared memory (`docker run "
        "--shm-size=8g`, or in Kubernetes an `emptyDir: {medium: Memory}` at /dev/shm).",
    ),
    (
        "large-shm-sigbus",
        death(signal="SIGBUS", shm_total_bytes=32 * 1024 * MIB, shm_free_bytes=MIB),
        "shm-exhausted",
        "Lower num_workers × prefetch_factor × batch bytes: the batches in flight filled all "
        "32.0 GiB of /dev/shm.",
    ),
    (
        "hang-with-stack",
        Evidence(kind="hang", worker_id=0, python_stack='  File "net.py", line 5 in read'),
        "worker-hang",
        CAUSES["worker-hang"].fixes[0],
    ),
    (
        "hang-without-stack",
        Evidence(kind="hang", worker_id=0, seconds_without_progress=30.0),
        "worker-hang",
        "No stack of the stuck worker could be dumped here (the evidence says why): run `py-spy "
        "dump --pid PID` on the worker while it is stuck to see where.",
    ),
    (
        "exit-0-with-frame",
        death(
            exit_code=0, python_stack=EXIT_STACK, exit_frame="/site-packages/lib/cli.py:40 in main"
        ),
        "worker-exit",
        "`/site-packages/lib/cli.py:40 in main` called sys.exit() in the worker: raise an "
        "exception there instead (torch re-raises it in the training loop, and the verdict names "
        "the sample), or catch SystemExit around that call.",
    ),
    (
        "exit-0-no-frame",
        death(exit_code=0),
        "worker-exit",
        "Exit status 0 is what `sys.exit()`, `sys.exit(0)` and `exit()` give: code in the worker "
        "(a library, or argparse reading the worker's argv) ended it on purpose. Search the "
        "Dataset and the libraries it calls for them.",
    ),
    ("exit-3", death(exit_code=3), "worker-exit", CAUSES["worker-exit"].fixes[0]),
    (
        "sigterm",
        death(signal="SIGTERM", kernel_log_readable=True),
        "killed-by-signal",
        CAUSES["killed-by-signal"].fixes[0],
    ),
    (
        "sigkill-unread-kernel-log",
        death(signal="SIGKILL", kernel_log_readable=False),
        "killed-by-signal",
        "The kernel log could not be read here: run `dmesg | grep -i killed` as root (or read the "
        "node's kernel log) to rule out the OOM killer.",
    ),
    (
        "lambda-in-transform",
        Evidence(
            kind="start",
            start_method="spawn",
            exception_type="PicklingError",
            exception_message="Can't pickle <function <lambda>>: attribute lookup failed",
            unpicklable_parts=["dataset (PicklingError: ...)"],
            unpicklable_path="dataset.transform.transforms[0]",
            unpicklable_type="lambda",
        ),
        "unpicklable",
        "`dataset.transform.transforms[0]` (a lambda) cannot be pickled for a spawned worker: "
        "make it a module-level function or class (functools.partial of one is fine), or build "
        "it in the worker (in `__getitem__` or worker_init_fn).",
    ),
    (
        "lambda-collate",
        Evidence(
            kind="start",
            start_method="spawn",
            exception_type="AttributeError",
            exception_message="Can't pickle local object 'main.<locals>.<lambda>'",
            unpicklable_parts=["collate_fn (AttributeError: ...)"],
            unpicklable_path="collate_fn",
            unpicklable_type="lambda",
        ),
        "unpicklable",
        "`collate_fn` (a lambda) cannot be pickled for a spawned worker: define it as a "
        "module-level function (functools.partial of one is fine), not a lambda or a nested "
        "function.",
    ),
    (
        "generator-batch",
        exception(
            exception_type="TypeError",
            exception_message="TypeError: cannot pickle 'generator' object",
            stage="send",
            unpicklable_path="batch",
            unpicklable_type="generator",
        ),
        "unpicklable",
        "The batch collate_fn returned (a generator) cannot be pickled back to the main "
        "process: return tensors, arrays, numbers, strings and lists or dicts of them from "
        "collate_fn and __getitem__ (make a generator a list: `list(...)`).",
    ),
    (
        "generator-batch-message-only",
        exception(
            exception_type="TypeError",
            exception_message="TypeError: cannot pickle 'generator' object",
            stage="send",
        ),
        "unpicklable",
        "A generator in the batch collate_fn returned cannot be pickled back to the main process: "
        "return tensors, arrays, numbers, strings and lists or dicts of them from collate_fn and "
        "__getitem__ (make a generator a list: `list(...)`).",
    ),
    (
        "socket-path",
        exception(
            exception_type="OSError",
            exception_message="OSError: AF_UNIX path too long",
            stage="send",
        ),
        "batch-lost",
        "TMPDIR is too long for a socket path (108 bytes): point TMPDIR at a short directory such "
        "as /tmp.",
    ),
    (
        "send-other",
        exception(exception_type="OSError", exception_message="OSError: broken", stage="send"),
        "batch-lost",
        CAUSES["batch-lost"].fixes[0],
    ),
    (
        "unguarded-script",
        Evidence(
            kind="start", start_method="spawn", main_script="train.py", main_guard_missing=True
        ),
        "main-guard-missing",
        "In train.py: move the training code into a function and call it under "
        '`if __name__ == "__main__":`.',
    ),
    (
        "bootstrapping-message",
        Evidence(
            kind="start",
            exception_type="RuntimeError",
            exception_message="An attempt has been made to start a new process before the "
            "current process has finished its bootstrapping phase.",
        ),
        "main-guard-missing",
        CAUSES["main-guard-missing"].fixes[0],
    ),
    (
        "fd-low-limit-fd-strategy",
        exception(
            exception_type="OSError",
            exception_message="OSError: [Errno 24] Too many open files",
            errno=24,
            stage="send",
            open_files_limit=64,
            sharing_strategy="file_descriptor",
        ),
        "fd-exhausted",
        "Raise the open-file limit, 64 here: `ulimit -n 65536` before starting, or "
        "resource.setrlimit(RLIMIT_NOFILE, ...) at start-up.",
    ),
    (
        "fd-fd-strategy-limit-unknown",
        exception(
            exception_type="OSError",
            exception_message="OSError: [Errno 24] Too many open files",
            errno=24,
            sharing_strategy="file_descriptor",
        ),
        "fd-exhausted",
        "Or switch torch's sharing strategy from 'file_descriptor' (a descriptor for every tensor "
        "in flight): `torch.multiprocessing.set_sharing_strategy('file_system')`.",
    ),
    (
        "fd-leak-high-limit",
        exception(
            exception_type="OSError",
            exception_message="OSError: [Errno 24] Too many open files: 'a.jpg'",
            errno=24,
            stage="fetch",
            open_files_limit=1048576,
            sharing_strategy="file_system",
        ),
        "fd-exhausted",
        CAUSES["fd-exhausted"].fixes[0],
    ),
    (
        "eagain",
        Evidence(
            kind="start",
            exception_type="BlockingIOError",
            exception_message="[Errno 11] Resource temporarily unavailable",
            errno=11,
        ),
        "process-limit",
        CAUSES["process-limit"].fixes[0],
    ),
    (
        "thread-start",
        Evidence(
            kind="start", exception_type="RuntimeError", exception_message="can't start new thread"
        ),
        "process-limit",
        "A thread could not start: use fewer threads per process (OMP_NUM_THREADS=1, "
        "torch.set_num_threads(1) in worker_init_fn); every thread counts.",
    ),
    (
        "cuda-in-collate",
        exception(
            exception_type="RuntimeError",
            exception_message="RuntimeError: Cannot re-initialize CUDA in forked subprocess.",
            stage="collate",
        ),
        "cuda-in-worker",
        "Keep the collate_fn on the CPU: it touched CUDA in a forked worker. Move batches to the "
        "GPU in the training loop (`batch.to(device, non_blocking=True)` with pin_memory=True).",
    ),
    (
        "cuda-from-log",
        Evidence(
            kind="exception",
            exception_type="RuntimeError",
            exception_message="Cannot re-initialize CUDA in forked subprocess.",
        ),
        "cuda-in-worker",
        CAUSES["cuda-in-worker"].fixes[0],
    ),
    (
        "paging-file",
        Evidence(
            kind="start",
            exception_type="OSError",
            exception_message="[WinError 1455] The paging file is too small",
        ),
        "paging-file-too-small",
        CAUSES["paging-file-too-small"].fixes[0],
    ),
    (
        "paging-file-dll",
        exception(
            exception_type="OSError",
            exception_message="OSError: [WinError 1455] The paging file is too small for this "
            'operation to complete. Error loading "c:\\torch\\lib\\cudnn.dll"',
        ),
        "paging-file-too-small",
        CAUSES["paging-file-too-small"].fixes[0],
    ),
    (
        "mps-tensor",
        exception(
            exception_type="RuntimeError",
            exception_message="RuntimeError: _share_filename_: only available on CPU",
        ),
        "mps-in-worker",
        CAUSES["mps-in-worker"].fixes[0],
    ),
    (
        "objc-fork",
        exception(
            exception_type="RuntimeError",
            exception_message="objc: +[NSValue initialize] may have been in progress in another "
            "thread when fork() was called.",
        ),
        "mps-in-worker",
        "Keep macOS's default 'spawn' start method: macOS kills a forked worker that touches "
        "Objective-C state the main process set up.",
    ),
    (
        "ours",
        exception(exception_type="KeyError", internal_origin="supervise/x.py:3 in f"),
        "internal-error",
        CAUSES["internal-error"].fixes[0],
    ),
    (
        "ours-at-start",
        Evidence(kind="start", exception_type="ImportError", internal_origin="recorder.py:9 in g"),
        "internal-error",
        CAUSES["internal-error"].fixes[0],
    ),
]


@pytest.mark.parametrize(
    ("evidence", "cause", "first_fix"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_the_first_fix_fits_the_evidence(evidence: Evidence, cause: str, first_fix: str) -> None:
    diagnosis = diagnose(evidence)
    assert diagnosis.cause == cause
    assert diagnosis.fixes[0] == first_fix


def test_every_cause_has_two_shapes_of_evidence() -> None:
    shapes: dict[str, int] = {}
    for _name, _evidence, cause, _fix in CASES:
        shapes[cause] = shapes.get(cause, 0) + 1
    assert {cause for cause, count in shapes.items() if count < 2} == set()
    # shared-failure is no reading of one failure's evidence: healing builds it from a streak of
    # failures (supervise.shared_failure), with the streak's own message in its first fix
    assert set(shapes) == set(CAUSES) - {"shared-failure"}


def _longest_literal(template: str) -> str:
    return max(re.split(r"\{\w+\}", template.replace("{{", "{").replace("}}", "}")), key=len)


def test_every_fitted_fix_is_selected_by_a_case() -> None:
    """A row no evidence reaches is a fix nobody reads."""
    firsts = {diagnose(evidence).fixes[0] for _n, evidence, _c, _f in CASES}
    fitted_firsts = {fix for _n, _e, _c, fix in CASES}
    assert firsts == fitted_firsts
    reached = {
        (cause.id, number)
        for cause in CAUSES.values()
        for number, fitted in enumerate(cause.fitted)
        for _n, evidence, cause_id, _f in CASES
        if cause_id == cause.id and fitted.text.split("{")[0] in " ".join(diagnose(evidence).fixes)
    }
    expected = {(c.id, n) for c in CAUSES.values() for n in range(len(c.fitted))}
    assert expected - reached == set()


def test_the_rows_name_known_facts_and_real_fixes() -> None:
    for cause in CAUSES.values():
        for fitted in cause.fitted:
            assert set(fitted.when) | set(fitted.unless) <= set(FACTS), cause.id
            assert all(0 <= n < len(cause.fixes) for n in fitted.replaces), cause.id
    used = {name for c in CAUSES.values() for f in c.fitted for name in (*f.when, *f.unless)}
    assert set(FACTS) - used == set()


def test_a_moot_fix_is_left_out_and_the_rest_keep_their_order() -> None:
    diagnosis = diagnose(CASES[0][1])
    assert diagnosis.fixes[1:] == list(CAUSES["sample-error"].fixes[1:])


def test_a_lambda_in_the_dataset_gets_no_collate_or_worker_init_advice() -> None:
    (evidence,) = [case[1] for case in CASES if case[0] == "lambda-in-transform"]
    fixes = diagnose(evidence).fixes
    own = CAUSES["unpicklable"].fixes
    assert fixes[1:] == [own[2], own[4]]  # open handles lazily; or fork
    assert not any("collate_fn /" in fix or "notebook" in fix for fix in fixes)
