"""``env``'s checks of what a worker pool multiplies: open files, cores, threads per worker."""

from __future__ import annotations

import os
import sys

from loaderdoctor.env.facts import Inputs
from loaderdoctor.env.findings import EnvCheck, Status, make_check

_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def check_open_files(inputs: Inputs) -> EnvCheck:
    machine, settings, probe = inputs.machine, inputs.settings, inputs.probe
    files = machine.files
    workers, prefetch = settings.num_workers, settings.prefetch_factor
    details: dict[str, object] = {
        "soft_limit": files.soft_limit,
        "hard_limit": files.hard_limit,
        "open_now": files.open_now,
    }
    if files.soft_limit is None:
        message = files.note or "no limit on open files"
        return make_check("open-files", "unknown" if files.note else "pass", None, message, details)
    # Per worker: its queues and pipes, plus one fd per shared tensor of each batch in flight
    # (the 'file_descriptor' sharing strategy), plus the files its samples keep open.
    storages = probe.storages_per_batch if probe and probe.storages_per_batch else 4
    kept_open = 0
    if probe and probe.fds_start is not None and probe.fds_end is not None:
        kept_open = max(0, probe.fds_end - probe.fds_start)
    need = (files.open_now or 0) + workers * (8 + prefetch * storages + kept_open)
    details.update(
        {"need": need, "storages_per_batch": storages, "files_kept_open_per_worker": kept_open}
    )
    text = f"soft limit {files.soft_limit} (hard {files.hard_limit or 'unlimited'}); about {need} needed for {settings.describe()}"
    if kept_open:
        text += f", each worker keeps {kept_open} file(s) open"
    status: Status = "pass"
    if need > files.soft_limit:
        status = "fail"
    elif files.soft_limit < 1024 or need > files.soft_limit / 2:
        status, text = "warn", f"{text}; a low limit for tensors shared by file descriptor"
    return make_check("open-files", status, files.soft_limit, text, details)


def check_cpu(inputs: Inputs) -> EnvCheck:
    machine, num_workers = inputs.machine, inputs.requested_workers
    cpu = machine.cpu
    details = {
        "logical_cores": cpu.logical_cores,
        "affinity_cores": cpu.affinity_cores,
        "quota_cores": cpu.quota_cores,
        "usable_cores": cpu.usable_cores,
        "num_workers": num_workers,
    }
    if cpu.usable_cores is None:
        return make_check("cpu", "unknown", None, f"cannot count cores: {cpu.note}", details)
    quota = f"{cpu.quota_cores:g}" if cpu.quota_cores is not None else "none"
    status: Status = "pass"
    lacking = machine.lacks("cgroups")
    if cpu.quota_cores is None and lacking is not None:
        quota = f"unknown ({lacking.why_not})" if not lacking.absent else "none (no cgroups)"
        if not lacking.absent:
            status = "unknown"  # a container's CPU quota may be hiding in the unread cgroup
    text = f"{cpu.logical_cores} cores, affinity {cpu.affinity_cores}, cgroup quota {quota}: {cpu.usable_cores} usable"
    if num_workers is not None and num_workers > cpu.usable_cores:
        status = "warn"  # more workers than cores is too many, whatever the quota
        text += f"; num_workers={num_workers} is more than the usable cores"
    elif num_workers is None and cpu.logical_cores and cpu.usable_cores < cpu.logical_cores:
        text += (
            f"; size num_workers from {cpu.usable_cores}, not os.cpu_count()={cpu.logical_cores}"
        )
    return make_check("cpu", status, cpu.usable_cores, text, details)


def check_threads(inputs: Inputs) -> EnvCheck:
    machine, settings = inputs.machine, inputs.settings
    cores = machine.cpu.usable_cores or 1
    variables = {name: os.environ.get(name) for name in _THREAD_VARIABLES}
    per_worker = cores
    numbers = [int(v) for v in variables.values() if v and v.strip().isdigit()]
    if variables["OMP_NUM_THREADS"] and variables["OMP_NUM_THREADS"].strip().isdigit():
        per_worker = int(variables["OMP_NUM_THREADS"])
    elif numbers:
        per_worker = max(numbers)
    opencv_threads = None
    cv2 = sys.modules.get("cv2")  # only if the target imported it: importing cv2 here costs seconds
    if cv2 is not None and hasattr(cv2, "getNumThreads"):
        opencv_threads = int(cv2.getNumThreads())
        per_worker = max(per_worker, opencv_threads)
    total = settings.num_workers * per_worker
    details = {
        "variables": variables,
        "opencv_threads": opencv_threads,
        "threads_per_worker": per_worker,
        "total_threads": total,
        "usable_cores": cores,
    }
    shown = ", ".join(f"{k}={v}" for k, v in variables.items() if v) or "no thread variables set"
    text = f"{shown}: up to {per_worker} thread(s) per worker × {settings.num_workers} workers = {total} on {cores} core(s)"
    if opencv_threads is not None:
        text += f" (OpenCV uses {opencv_threads})"
    status: Status = "warn" if settings.num_workers > 1 and total > 2 * cores else "pass"
    return make_check("threads", status, total, text, details)
