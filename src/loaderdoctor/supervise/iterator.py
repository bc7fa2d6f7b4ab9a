"""The supervised multiprocessing iterator: torch's own iterator with a watch on every worker.

A clean run takes exactly torch's code path (same sampler draws, same seeds, same batches); the
supervisor adds a flight recorder, a short poll that notices a dead or stuck worker within
``POLL_S``, and the evidence collection that turns a death into a ``Diagnosis``.

This module holds torch's overrides and the failure path; the rest comes from mixins, each in its
own module: the watch and hang watchdog (``worker_watch``), batches lost in transfer
(``lost_batches``), worker exceptions (``worker_exceptions``), start-up failures
(``start_failure``) and healing (``heal``). num_workers=0 is ``single_process``.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import shutil
import time
import warnings
import weakref
from typing import TYPE_CHECKING, Any, NoReturn

from loaderdoctor import torch_compat
from loaderdoctor.forensics import Evidence, diagnose
from loaderdoctor.recorder import FlightRecorder
from loaderdoctor.report.text import format_death_headline, format_verdict
from loaderdoctor.supervise import collect
from loaderdoctor.supervise.errors import LoaderError, WorkerDiedError, WorkerHangError
from loaderdoctor.supervise.heal import ENVIRONMENTAL, HealingMixin
from loaderdoctor.supervise.heal_policy import SkippedBatch
from loaderdoctor.supervise.loader_view import _LoaderView, wrap_dataset
from loaderdoctor.supervise.lost_batches import LostBatchMixin
from loaderdoctor.supervise.start_failure import StartFailureMixin
from loaderdoctor.supervise.worker_collate import SupervisedCollate
from loaderdoctor.supervise.worker_exceptions import WorkerExceptionMixin
from loaderdoctor.supervise.worker_hooks import BOOTSTRAP_DIR_ENV, SupervisedWorkerInit
from loaderdoctor.supervise.worker_watch import WorkerWatchMixin

if TYPE_CHECKING:
    from loaderdoctor.supervise.loader import DataLoader

# How often the main process looks at its workers while it waits for a batch. torch checks every
# MP_STATUS_CHECK_INTERVAL (5 s) and relies on a SIGCHLD handler for the rest.
POLL_S = 0.1
SHUTDOWN_GRACE_S = 2.0


def start_method_of(loader: Any) -> str:
    context = loader.multiprocessing_context or multiprocessing
    method = context.get_start_method(allow_none=True)
    return method or multiprocessing.get_all_start_methods()[0]


class _PoolRestarted(Exception):
    """Internal: the worker pool was rebuilt after a failure; fetch the next batch again."""


class SupervisedMultiProcessingIter(
    HealingMixin,
    StartFailureMixin,
    WorkerWatchMixin,
    LostBatchMixin,
    WorkerExceptionMixin,
    torch_compat.MultiProcessingIter,
):
    def __init__(self, loader: DataLoader) -> None:
        self._ld_loader = loader
        self._ld_failed: LoaderError | None = None
        self._ld_batch_indices: dict[int, Any] = {}
        self._ld_last_index: Any = None
        self._ld_epoch = loader._ld_epoch
        self._ld_hang_timeout = loader.hang_timeout
        self._ld_start_method = start_method_of(loader)
        self._ld_iterable = loader._dataset_kind == torch_compat.DatasetKind.Iterable
        self._ld_log_dir = collect.make_log_dir()
        self._ld_cleanup = weakref.finalize(
            self, shutil.rmtree, self._ld_log_dir, ignore_errors=True
        )
        self._ld_keep_log_dir = False
        self._ld_baseline = collect.read_baseline()
        self._ld_init_healing(loader)
        try:
            self._ld_start_pool(_LoaderView(loader, **self._ld_pool_overrides(loader.num_workers)))
        except Exception as error:
            self._ld_abort_start()
            if not self._ld_heal_start_failure(error):
                start_error = self._ld_start_failure(error)
                assert start_error.diagnosis is not None
                loader._ld_record(start_error.diagnosis, "raised")
                raise start_error from error

    def _ld_pool_overrides(self, num_workers: int) -> dict[str, Any]:
        loader = self._ld_loader
        self._ld_recorder = FlightRecorder(num_workers)
        for worker_id in range(num_workers):
            self._ld_recorder.reset_slot(worker_id)
        policy = loader._ld_policy()
        return {
            "dataset": wrap_dataset(loader.dataset, loader._dataset_kind, policy),
            "collate_fn": SupervisedCollate(loader.collate_fn, heal=policy is not None),
            "worker_init_fn": SupervisedWorkerInit(
                loader.worker_init_fn, self._ld_recorder, self._ld_log_dir, loader.dataset
            ),
            "num_workers": num_workers,
        }

    def _ld_start_pool(self, view: _LoaderView) -> None:
        previous = os.environ.get(BOOTSTRAP_DIR_ENV)
        os.environ[BOOTSTRAP_DIR_ENV] = self._ld_log_dir
        try:
            with warnings.catch_warnings():
                # torch's generic hint; the verdict names the part that cannot be pickled.
                warnings.filterwarnings("ignore", message="Got pickle error when attempting")
                torch_compat.MultiProcessingIter.__init__(self, view)
        finally:
            if previous is None:
                os.environ.pop(BOOTSTRAP_DIR_ENV, None)
            else:
                os.environ[BOOTSTRAP_DIR_ENV] = previous
        torch_compat.stop_sigchld_checks(self)

    # --- bookkeeping of what each batch holds ---------------------------------------------
    def _next_index(self) -> Any:
        index = super()._next_index()
        self._ld_last_index = index
        return index

    def _try_put_index(self) -> None:
        sent = self._send_idx
        super()._try_put_index()
        if self._send_idx != sent:
            self._ld_batch_indices[sent] = self._ld_last_index

    def _reset(self, loader: Any, first_iter: bool = False) -> None:
        if not first_iter:
            self._ld_epoch = getattr(loader, "_ld_epoch", self._ld_epoch)
            self._ld_batch_indices.clear()
        super()._reset(loader, first_iter)

    # --- waiting for data, watching the workers -------------------------------------------
    def _try_get_data(self, timeout: float = torch_compat.MP_STATUS_CHECK_INTERVAL) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            wait = min(POLL_S, max(0.0, deadline - time.monotonic()))
            receive_error: Exception | None = None
            try:
                return (True, self._data_queue.get(timeout=wait))
            except queue.Empty:
                pass
            except Exception as error:
                receive_error = error
            if receive_error is not None:
                # Handled outside the except block: a verdict raised here must not arrive
                # chained under the EOFError/ConnectionResetError of the dead sender.
                self._ld_on_receive_error(receive_error)
            self._ld_check_workers()
            if time.monotonic() >= deadline:
                return (False, None)

    def _get_data(self) -> Any:
        if self._timeout > 0:
            success, data = self._try_get_data(self._timeout)
            if success:
                return data
            info = self._task_info.get(self._rcvd_idx)
            worker_id = info[0] if info else 0
            self._ld_hang(worker_id, f"DataLoader timed out after {self._timeout} seconds")
        return super()._get_data()

    def _next_data(self) -> Any:
        while True:
            if self._ld_failed is not None:
                first = self._ld_failed
                raise LoaderError(
                    f"this DataLoader iterator stopped after an earlier failure: {first.args[0]}",
                    first.diagnosis,
                )
            try:
                if self._ld_delegate is not None:
                    data = self._ld_delegate._next_data()
                else:
                    self._ld_healing_allowed = True
                    try:
                        data = super()._next_data()
                    finally:
                        self._ld_healing_allowed = False
            except _PoolRestarted:
                continue
            except StopIteration:
                self._ld_drain_events()
                raise
            if isinstance(data, SkippedBatch):
                self._ld_dropped_batches += 1
                continue
            return data

    def _process_data(self, data: Any, worker_idx: int) -> Any:
        # The batch being handed over is the one torch just popped from _task_info.
        batch: int | None = None
        indices: Any = None
        for task in [t for t in self._ld_batch_indices if t not in self._task_info]:
            batch, indices = task, self._ld_batch_indices.pop(task)
        self._ld_drain_events_if_any()
        if torch_compat.is_exception_wrapper(data):
            self._workers_num_tasks[worker_idx] -= 1
            self._try_put_index()
            error = self._ld_worker_exception(data, worker_idx, batch, indices)
            diagnosis = getattr(error, "diagnosis", None)
            if (
                self._ld_loader.heal
                and diagnosis is not None
                and diagnosis.cause in ENVIRONMENTAL
                and batch is not None
                and self._ld_healing_allowed
            ):
                # Out of shared memory or descriptors: the batch is still owed; back off.
                self._ld_batch_indices[batch] = indices
                if self._ld_heal_environment(diagnosis):
                    raise _PoolRestarted()
            if diagnosis is not None:
                self._ld_loader._ld_record(diagnosis, "raised")
            raise error
        if batch is not None and not isinstance(data, SkippedBatch):
            self._ld_count_delivered(indices)
        return super()._process_data(data, worker_idx)

    def _shutdown_workers(self) -> None:
        super()._shutdown_workers()
        cleanup = getattr(self, "_ld_cleanup", None)
        keep = getattr(self, "_ld_keep_log_dir", False)
        if cleanup is not None and getattr(self, "_shutdown", False) and not keep:
            self._ld_drain_events()
            cleanup()

    # --- failures -------------------------------------------------------------------------
    def _ld_fail(self, ev: Evidence) -> NoReturn:
        diagnosis = diagnose(ev)
        if self._ld_healing_allowed and self._ld_heal_failure(ev, diagnosis):
            raise _PoolRestarted()
        self._ld_loader._ld_record(diagnosis, "raised")
        message = f"{format_death_headline(diagnosis)}\n{format_verdict(diagnosis)}"
        error_type = WorkerHangError if ev.kind == "hang" else WorkerDiedError
        error = error_type(message, diagnosis)
        self._ld_failed = error
        self._ld_shutdown_now()
        raise error

    def _ld_shutdown_now(self) -> None:
        """Stop every worker within SHUTDOWN_GRACE_S, healthy ones cleanly, stuck ones by force.

        torch's own shutdown joins each worker with a 5 s timeout in turn; a worker blocked on a
        lock that a dead worker held (the result queue's) would cost 5 s each.
        """
        self._workers_done_event.set()
        for worker_id, index_queue in enumerate(self._index_queues):
            if self._workers_status[worker_id]:
                try:
                    index_queue.put(None)
                except (OSError, ValueError):
                    pass
        deadline = time.monotonic() + SHUTDOWN_GRACE_S
        for process in self._workers:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
        for process in self._workers:
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
        self._ld_remove_worker_temp_dirs()
        self._shutdown_workers()

    def _ld_remove_worker_temp_dirs(self) -> None:
        """A killed worker leaves its multiprocessing temp dir behind; remove those that remain."""
        try:
            names = [n for n in os.listdir(self._ld_log_dir) if n.startswith("tempdir-")]
        except OSError:
            return
        for name in names:
            try:
                with open(os.path.join(self._ld_log_dir, name)) as handle:
                    temp_dir = handle.read().strip()
            except OSError:
                continue
            if os.path.basename(temp_dir).startswith("pymp-"):
                shutil.rmtree(temp_dir, ignore_errors=True)
