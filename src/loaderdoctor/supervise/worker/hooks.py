"""Start-up hooks: what runs first in every worker, and what a spawned worker's bootstrap leaves.

``SupervisedWorkerInit`` builds the worker's ``WorkerContext`` and gives it to the worker's
wrappers, attaches the recorder and arms faulthandler and the lost-batch hook; the bootstrap
marker lets the parent name an unguarded main script that a spawned worker re-ran.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from torch.utils.data import get_worker_info

from loaderdoctor import boundary, cpython_compat, torch_compat
from loaderdoctor.recorder import FlightRecorder, Stage
from loaderdoctor.supervise import sharing
from loaderdoctor.supervise.live_quarantine import NO_LIVE_QUARANTINE, LiveQuarantine
from loaderdoctor.supervise.pickle_path import unpicklable_path
from loaderdoctor.supervise.worker import rng_states, shared_handles, sharer_guard
from loaderdoctor.supervise.worker.context import WorkerContext
from loaderdoctor.supervise.worker.exception_tags import tag_exception
from loaderdoctor.supervise.worker.loader_view import attach_context
from loaderdoctor.system import platform
from loaderdoctor.system.oom_priority import raise_oom_score

# Each worker says how the parent gets its stack when it is stuck (see ``platform.stack_dump``)
# in ``boundary.stack_dump_how``: "signal N" (send N), "timer" (read ``boundary.hang_log``), "none: why".
# Without a dump signal the worker dumps its own stack this far into a stage that has not ended,
# so that the dump is written before the parent calls the stage a hang (at ``hang_timeout``).
TIMER_DUMP_FRACTION = 0.8
TIMER_POLL_S = 0.1
ORPHAN_POLL_S = 0.5


def _handles(dataset: Any) -> dict[str, tuple[int, str]]:
    try:
        return shared_handles.find_handles(dataset)
    except Exception:  # a dataset whose attributes cannot be read: nothing to say about them
        return {}


def _tell_inherited_handles(
    context: WorkerContext, dataset: Any, before: dict[str, tuple[int, str]]
) -> None:
    """Send the main process the handles this worker shares with it (it warns once)."""
    if not before:
        return
    after = _handles(dataset)
    paths = shared_handles.inherited(before, after)
    if paths:
        kinds = {path: after[path][1] for path in paths}
        context.outbox.record(shared_handles.event(dataset, paths, kinds))
        context.outbox.flush()


class SupervisedWorkerInit:
    """Runs first in every worker: build its context and give it to the worker's wrappers,
    attach the recorder, arm faulthandler, then the user's init."""

    def __init__(
        self,
        user_init: Callable[[int], Any] | None,
        recorder: FlightRecorder,
        log_dir: str,
        dataset: Any,
        hang_timeout: float | None = None,
        stream_resumes: dict[int, Any] | None = None,
        oom_score_adj: int | None = None,
        live_quarantine: LiveQuarantine | None = None,
        collate: Any = None,
        sharing_strategy: str | None = None,
    ) -> None:
        self.user_init = user_init
        # What the main process quarantines while this worker runs, read before each sample
        self.live_quarantine = live_quarantine
        # The parent raises it right after the start too; here it is in place before the
        # first sample whichever comes first (``system.oom_priority``).
        self.oom_score_adj = oom_score_adj
        # IterableDataset pools re-started after a death: where each worker's stream resumes
        self.stream_resumes = stream_resumes or {}
        self.recorder = recorder
        self.log_dir = log_dir
        self.dataset = dataset  # the user's
        # The collate_fn wrapper the workers load with (the same object in each worker: torch
        # sends it with this init); the dataset wrapper is the one torch hands each worker
        self.collate = collate
        self.hang_timeout = hang_timeout
        # Healing switched the sharing strategy: a spawned worker must too (a forked one has it)
        self.sharing_strategy = sharing_strategy

    def __call__(self, worker_id: int) -> None:
        _OrphanGuard(os.getppid()).start()
        sharing.apply_in_worker(self.sharing_strategy)
        if self.oom_score_adj is not None:
            raise_oom_score(os.getpid(), self.oom_score_adj)
        slot = self.recorder.attach(worker_id)
        stack_log = _open_stack_log(self.log_dir, worker_id)
        context = WorkerContext(
            worker_id,
            slot,
            quarantine=(
                self.live_quarantine.reader()
                if self.live_quarantine is not None
                else NO_LIVE_QUARANTINE
            ),
            stream_resume=self.stream_resumes.get(worker_id),
            stack_log=stack_log,  # the context keeps it open
        )
        info = get_worker_info()
        attach_context(context, info.dataset if info is not None else None, self.collate)
        self._arm_stack_dump(worker_id, stack_log)
        _report_lost_batches(context)
        _announce_temp_dir(self.log_dir, worker_id)
        try:
            context.outbox.log = open(
                boundary.events_file(self.log_dir, worker_id, os.getpid()), "w"
            )
        except OSError:
            context.outbox.log = None
        torch_compat.show_user_dataset_in_worker_info(self.dataset)
        handles_before = _handles(self.dataset)
        if self.user_init is not None:
            try:
                self.user_init(worker_id)
            except Exception as error:  # the user's worker_init_fn raises anything
                tag_exception(error, worker_id, index=None, stage="init")
                raise
        _tell_inherited_handles(context, self.dataset, handles_before)
        # After the user's init, where a per-worker seed belongs; the main process compares
        context.outbox.record(rng_states.event(self.dataset))
        context.outbox.flush()
        slot.stage(Stage.IDLE)

    def _arm_stack_dump(self, worker_id: int, stack_log: Any) -> None:
        """Make this worker's stack reachable when it is stuck, and tell the parent how."""
        sigusr2 = getattr(signal, "SIGUSR2", None)
        user_owns_sigusr2 = sigusr2 is not None and signal.getsignal(sigusr2) not in (
            signal.SIG_DFL,
            None,
        )
        dump = platform.stack_dump(user_owns_sigusr2)
        how = "none: the stack log could not be opened"
        try:
            number = dump.signal_number
            if dump.method == "signal" and number is not None and stack_log is not None:
                faulthandler.register(  # type: ignore[attr-defined,unused-ignore]
                    number, file=stack_log, all_threads=True, chain=False
                )
                how = f"signal {number}"
            elif dump.method == "timer" and self.hang_timeout:
                # the timer thread writes to it until the worker exits
                hang_log = open(boundary.hang_log(self.log_dir, worker_id, os.getpid()), "w")
                _StageTimer(self.recorder, worker_id, hang_log, self.hang_timeout).start()
                how = "timer"
            elif dump.method == "timer":
                how = "none: no hang_timeout to arm faulthandler.dump_traceback_later with"
        except (OSError, RuntimeError, ValueError) as error:
            how = f"none: {type(error).__name__}: {error}"
        try:
            with open(boundary.stack_dump_how(self.log_dir, worker_id, os.getpid()), "w") as handle:
                handle.write(f"{how}\n{dump.description}\n")
        except OSError:
            pass


class _OrphanGuard(threading.Thread):
    """Ends this worker once the process that started it is gone.

    torch's worker loop checks its parent only between two samples (its ``ManagerWatchdog``), so
    a worker stuck inside a sample (a sleep, a deadlock, a network read) outlived a training
    process killed by its launcher, for ever. This thread looks every ``ORPHAN_POLL_S``: a
    worker's parent pid changes when the parent dies (it is re-parented to init or a
    subreaper). Not the kernel's parent-death signal: that fires when the *thread* that forked
    the worker ends, and loaders are iterated from threads that end while training goes on.
    A main thread stuck in C code that holds the GIL keeps this thread from running.
    """

    def __init__(self, parent_pid: int) -> None:
        super().__init__(name="loaderdoctor-orphan-guard", daemon=True)
        self.parent_pid = parent_pid

    def run(self) -> None:
        self._orphan_guard_loop()

    def _orphan_guard_loop(self) -> None:
        while True:
            time.sleep(ORPHAN_POLL_S)
            if os.getppid() != self.parent_pid:
                kill = getattr(signal, "SIGKILL", None)
                if kill is None:  # Windows
                    os._exit(1)
                os.kill(os.getpid(), kill)


class _StageTimer(threading.Thread):
    """Where no signal can ask for a stack (Windows, or no real-time signal and SIGUSR2 taken):
    arm ``faulthandler.dump_traceback_later`` for each fetch/collate/init stage this worker starts.

    faulthandler's own C thread writes the dump, so a main thread stuck in C code still gets one;
    this thread only re-arms the timer when the recorder shows a new stage.
    """

    def __init__(
        self, recorder: FlightRecorder, worker_id: int, log: Any, hang_timeout: float
    ) -> None:
        super().__init__(name="loaderdoctor-stage-timer", daemon=True)
        self.recorder = recorder
        self.worker_id = worker_id
        self.log = log
        self.dump_after_s = max(hang_timeout * TIMER_DUMP_FRACTION, 0.05)

    def run(self) -> None:
        self._stage_timer_loop()

    def _stage_timer_loop(self) -> None:
        armed_for: tuple[Any, ...] | None = None
        while True:
            snapshot = self.recorder.snapshot(self.worker_id)
            key = (snapshot.stage, snapshot.samples_started, snapshot.batches_done)
            if key != armed_for:
                armed_for = key
                faulthandler.cancel_dump_traceback_later()
                if snapshot.stage in ("fetch", "collate", "init"):
                    remaining = max(self.dump_after_s - snapshot.stage_age_s, 0.01)
                    faulthandler.dump_traceback_later(remaining, repeat=False, file=self.log)
            time.sleep(TIMER_POLL_S)


def _announce_temp_dir(log_dir: str, worker_id: int) -> None:
    """Tell the parent where multiprocessing keeps this worker's temp dir (its fd-passing socket).

    A worker that is SIGKILLed cannot remove it; the parent does, after the death.
    """
    import multiprocessing
    import multiprocessing.util

    if cpython_compat.temp_dir_inherited():
        return  # inherited from the parent through fork: the parent's, not ours to remove
    try:
        temp_dir = multiprocessing.util.get_temp_dir()
        path = boundary.tempdir_file(log_dir, worker_id, os.getpid())
        with open(path, "w") as handle:
            handle.write(temp_dir)
    except OSError:
        pass


def _report_lost_batches(context: WorkerContext) -> None:
    """Make a batch that fails to leave the worker a recorded failure instead of a silent hang.

    The worker hands each batch to a multiprocessing.Queue whose feeder thread pickles it in the
    background. When that fails (an unpicklable object in the sample, EMFILE or ENOSPC while
    moving tensors to shared memory) the stock hook only prints a traceback: the batch is gone
    and the main process waits for it forever. This worker-local hook also bumps the recorder
    and writes the traceback where the parent looks. The same record is made when the worker's
    resource sharer runs out of descriptors while the main process fetches a tensor
    (``sharer_guard``), before the worker exits.
    """
    original = cpython_compat.feeder_error_hook()

    def on_feeder_error(error: BaseException, obj: object) -> None:
        _record_send_failure(context, error, _unpicklable_in(error, obj))
        original(error, obj)

    cpython_compat.set_feeder_error_hook(on_feeder_error)
    sharer_guard.install(lambda error: _record_send_failure(context, error, _sharer_failure()))


def _unpicklable_in(error: BaseException, obj: object) -> str | None:
    """Where in the batch the object pickle refused lies (``batch[1]``, ``batch`` itself when
    collate_fn returned a generator), as ``boundary.UNPICKLABLE_PREFIX`` + "PATH (TYPE)"; None when
    sending failed for another reason."""
    if "pickl" not in str(error).lower():  # "cannot pickle", "Can't pickle", PicklingError
        return None
    from multiprocessing.reduction import ForkingPickler

    # torch's worker puts ``(task index, batch)`` on its result queue.
    batch = obj[1] if isinstance(obj, tuple) and len(obj) == 2 else obj
    try:
        path, kind = unpicklable_path(batch, "batch", ForkingPickler.dumps)
    except Exception:  # the walk is a courtesy: the send error itself is already recorded
        return None
    return f"{boundary.UNPICKLABLE_PREFIX}{path} ({kind})"


def _sharer_failure() -> str:
    try:
        import resource  # POSIX only, as the file_descriptor strategy is

        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return boundary.SHARER_FAILED
    return f"{boundary.SHARER_FAILED} (its open-file limit is {soft})"


def _open_stack_log(log_dir: str, worker_id: int) -> Any:
    """This worker's stack log, where faulthandler writes the Python stack of every thread at a
    fatal signal (SIGSEGV, SIGBUS, ...) and on the stack-dump signal; None where it cannot be
    (no stack on a crash; every other piece of evidence still works)."""
    try:
        log = open(boundary.stack_log(log_dir, worker_id, os.getpid()), "w")
    except OSError:
        return None
    try:
        # A forked worker inherits "enabled" from a parent run under pytest or -X
        # faulthandler; enable() would then only switch files and leave torch's SIGSEGV
        # handler in front. Disable first so faulthandler's handler is installed for real.
        faulthandler.disable()
        faulthandler.enable(file=log, all_threads=True)
    except (OSError, RuntimeError, ValueError):
        pass  # the file still takes the exit and send-failure records
    return log


def _record_send_failure(
    context: WorkerContext, error: BaseException, what: str | None = None
) -> None:
    """Write why a batch did not reach the main process where the parent looks for it
    (``SEND_ERROR_HEADER`` in the stack log), and count it in the recorder."""
    slot = context.slot
    log = context.stack_log
    if log is not None:
        try:
            log.write(boundary.SEND_ERROR_HEADER + "\n")
            if what:
                log.write(what + "\n")
            log.write("".join(traceback.format_exception(error)))
            log.flush()
        except (OSError, ValueError):
            pass
    if slot is not None:
        slot.send_error()


def write_bootstrap_marker() -> None:
    """Called when a spawned worker re-runs an unguarded main script and reaches a DataLoader.

    The parent names the missing ``if __name__ == "__main__":`` guard from this file.
    """
    directory = os.environ.get(boundary.BOOTSTRAP_DIR_ENV)
    if not directory or not os.path.isdir(directory):
        return
    main = sys.modules.get("__mp_main__") or sys.modules.get("__main__")
    script = getattr(main, "__file__", None) or "the main script"
    where = ""
    for frame in reversed(traceback.extract_stack()[:-1]):
        if script and os.path.abspath(frame.filename) == os.path.abspath(script):
            where = f" (line {frame.lineno}: {(frame.line or '').strip()})"
            break
    text = (
        f"worker pid {os.getpid()} re-ran {script} while starting and reached a DataLoader "
        f"at import{where}"
    )
    try:
        with open(boundary.bootstrap_marker(directory, os.getpid()), "w") as handle:
            handle.write(text)
    except OSError:
        pass


def is_spawn_bootstrapping() -> bool:
    return cpython_compat.spawn_bootstrapping()
