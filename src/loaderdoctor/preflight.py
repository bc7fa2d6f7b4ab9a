"""``env``'s core: measure the machine (and, with a target, the dataset) against the check catalog.

No torch import unless a target is given, so ``loaderdoctor env`` answers in well under a second.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import platform
import sys
from dataclasses import dataclass, field

from loaderdoctor._loadprobe import LoaderParts, LoadProbe, loader_parts, run_load_probe
from loaderdoctor.envchecks import CATALOG, EnvCheck, EnvReport, Status, human_bytes, make_check
from loaderdoctor.system.cgroup import MemoryCgroup, memory_cgroup
from loaderdoctor.system.container import ContainerInfo, detect_container
from loaderdoctor.system.cpu import CpuInfo, cpu_info
from loaderdoctor.system.kmsg import KernelLog, oom_kills, read_kernel_log
from loaderdoctor.system.limits import OpenFiles, open_files
from loaderdoctor.system.memory import HostMemory, host_memory
from loaderdoctor.system.shm import CONTAINER_DEFAULT_SHM_BYTES, ShmUsage, shm_usage

MiB = 1024 * 1024
GiB = 1024 * MiB
# A batch being consumed by the main process and the one a worker is writing are in /dev/shm too.
SHM_HEADROOM = 1.25
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


@dataclass
class Machine:
    shm: ShmUsage
    cgroup: MemoryCgroup
    host: HostMemory
    files: OpenFiles
    cpu: CpuInfo
    container: ContainerInfo
    kernel_log: KernelLog


@dataclass
class Settings:
    batch_size: int | None
    num_workers: int
    prefetch_factor: int
    assumed: list[str] = field(default_factory=list)

    def describe(self) -> str:
        text = f"num_workers={self.num_workers}, prefetch_factor={self.prefetch_factor}"
        if self.batch_size is not None:
            text = f"batch_size={self.batch_size}, {text}"
        return f"{text} (assumed: {', '.join(self.assumed)})" if self.assumed else text


def probe_machine() -> Machine:
    return Machine(
        shm_usage(),
        memory_cgroup(),
        host_memory(),
        open_files(),
        cpu_info(),
        detect_container(),
        read_kernel_log(),
    )


def run_env_checks(
    target: object | None = None,
    batch_size: int | None = None,
    num_workers: int | None = None,
    prefetch_factor: int | None = None,
    probe_timeout_s: float = 8.0,
) -> EnvReport:
    """Run every check of the catalog. ``target``: a dataset or DataLoader, or a spec string."""
    label: str | None = None
    if isinstance(target, str):
        from loaderdoctor.spec import load_dataset

        label, target = target, load_dataset(target)
    elif target is not None:
        label = type(target).__name__
    machine = probe_machine()
    parts = loader_parts(target, batch_size) if target is not None else None
    settings = _settings(machine, parts, batch_size, num_workers, prefetch_factor)
    probe = run_load_probe(parts, timeout_s=probe_timeout_s) if parts else None

    checks: dict[str, EnvCheck] = {}
    checks["shm-size"] = check_shm_size(machine)
    checks["shm-need"] = check_shm_need(machine, settings, probe)
    checks["memory-limit"] = check_memory_limit(machine)
    checks["worker-memory"] = check_worker_memory(machine, settings, probe)
    checks["open-files"] = check_open_files(machine, settings, probe)
    checks["cpu"] = check_cpu(machine, num_workers)
    checks["start-method"] = check_start_method(probe)
    checks["container"] = check_container(machine, settings, probe)
    checks["threads"] = check_threads(machine, settings)
    checks["kernel-log"] = check_kernel_log(machine)
    checks["versions"] = check_versions()
    settings_json = {
        "batch_size": settings.batch_size,
        "num_workers": settings.num_workers,
        "prefetch_factor": settings.prefetch_factor,
        "assumed": settings.assumed,
    }
    return EnvReport([checks[spec.id] for spec in CATALOG], label, settings_json)


def _settings(
    machine: Machine,
    parts: LoaderParts | None,
    batch_size: int | None,
    num_workers: int | None,
    prefetch_factor: int | None,
) -> Settings:
    assumed: list[str] = []
    if num_workers is None and parts is not None and parts.is_dataloader:
        num_workers = parts.num_workers
    if num_workers is None:
        # what people set when they do not know better: one worker per usable core
        num_workers = machine.cpu.usable_cores or 1
        assumed.append("num_workers")
    if prefetch_factor is None and parts is not None and parts.prefetch_factor:
        prefetch_factor = parts.prefetch_factor
    if prefetch_factor is None:
        prefetch_factor = 2  # torch's default
        assumed.append("prefetch_factor")
    if parts is not None:
        batch_size = parts.batch_size
        if batch_size is not None and not parts.is_dataloader and batch_size == 1:
            assumed.append("batch_size")
    return Settings(batch_size, num_workers, prefetch_factor, assumed)


def _available(machine: Machine) -> int | None:
    """Bytes this process tree may still allocate: the least of host and cgroup headroom."""
    candidates = []
    if machine.host.available_bytes is not None:
        candidates.append(machine.host.available_bytes)
    limit, usage = machine.cgroup.limit_bytes, machine.cgroup.usage_bytes
    if limit is not None and usage is not None:
        candidates.append(max(0, limit - usage))
    return min(candidates) if candidates else None


def _shm_fix(machine: Machine, need: int | None = None) -> str | None:
    """The exact flag for this container runtime; ``None``: the catalog's general fix."""
    suggested = max(GiB, math.ceil(2 * need / GiB) * GiB) if need else 2 * GiB
    size = f"{suggested // GiB}g"
    runtime = machine.container.runtime
    if runtime == "kubernetes":
        return (
            "Mount a memory-backed emptyDir at /dev/shm: volumes: [{name: dshm, emptyDir: "
            f"{{medium: Memory, sizeLimit: {size[:-1]}Gi}}}}], volumeMounts: "
            "[{name: dshm, mountPath: /dev/shm}]."
        )
    if runtime in ("docker", "podman"):
        return (
            f"Restart the container with `{runtime} run --shm-size={size} ...` "
            f"(compose: `shm_size: {size}`)."
        )
    return None


def check_shm_size(machine: Machine) -> EnvCheck:
    shm = machine.shm
    details = {"path": shm.path, "total_bytes": shm.total_bytes, "free_bytes": shm.free_bytes}
    if shm.total_bytes is None or shm.free_bytes is None:
        return make_check(
            "shm-size", "unknown", None, f"cannot measure {shm.path}: {shm.note}", details
        )
    text = f"{shm.path}: {human_bytes(shm.total_bytes)} total, {human_bytes(shm.free_bytes)} free"
    status: Status = "pass"
    if shm.total_bytes <= CONTAINER_DEFAULT_SHM_BYTES * 1.1:
        status, text = "fail", f"{text}: the 64 MiB container default, too small for most loaders"
    elif shm.free_bytes < 512 * MiB or shm.total_bytes < GiB:
        status, text = "warn", f"{text}: little room for batches in flight"
    return make_check("shm-size", status, shm.total_bytes, text, details, _shm_fix(machine))


def _no_target(check_id: str, what: str) -> EnvCheck:
    return make_check(check_id, "unknown", None, f"give --target to measure {what}")


def _probe_failed(check_id: str, probe: LoadProbe) -> EnvCheck:
    return make_check(
        check_id, "unknown", None, f"could not load a batch: {probe.error}", {"error": probe.error}
    )


def check_shm_need(machine: Machine, settings: Settings, probe: LoadProbe | None) -> EnvCheck:
    if probe is None:
        return _no_target("shm-need", "the bytes of one batch")
    if probe.batch_bytes is None:
        return _probe_failed("shm-need", probe)
    in_flight = settings.num_workers * settings.prefetch_factor
    need = int(probe.batch_bytes * in_flight * SHM_HEADROOM)
    free = machine.shm.free_bytes
    details = {
        "batch_bytes": probe.batch_bytes,
        "batches_in_flight": in_flight,
        "need_bytes": need,
        "free_bytes": free,
    }
    text = (
        f"one batch is {human_bytes(probe.batch_bytes)}; {settings.describe()} keeps "
        f"{in_flight} in flight: {human_bytes(need)} with headroom"
    )
    if settings.num_workers == 0:
        return make_check(
            "shm-need", "pass", 0, "num_workers=0: batches never leave the main process", details
        )
    if free is None:
        return make_check("shm-need", "unknown", need, f"{text}; free shm unknown", details)
    status: Status = "pass"
    if need > free:
        status = "fail"
    elif need > free / 2:
        status = "warn"
    text = f"{text} against {human_bytes(free)} free in {machine.shm.path}"
    return make_check(
        "shm-need",
        status,
        need,
        text,
        details,
        _shm_fix(machine, need) if status != "pass" else None,
    )


def check_memory_limit(machine: Machine) -> EnvCheck:
    host, cgroup = machine.host, machine.cgroup
    available = _available(machine)
    limit = cgroup.limit_bytes if cgroup.limit_bytes is not None else host.total_bytes
    details = {
        "host_total_bytes": host.total_bytes,
        "host_available_bytes": host.available_bytes,
        "swap_total_bytes": host.swap_total_bytes,
        "swap_free_bytes": host.swap_free_bytes,
        "cgroup_version": cgroup.version,
        "cgroup_path": cgroup.path,
        "cgroup_limit_bytes": cgroup.limit_bytes,
        "cgroup_usage_bytes": cgroup.usage_bytes,
        "cgroup_oom_kills": cgroup.oom_kill_count,
        "available_bytes": available,
    }
    if limit is None or available is None:
        return make_check(
            "memory-limit",
            "unknown",
            None,
            f"cannot read memory: {host.note or cgroup.note}",
            details,
        )
    parts = [
        f"host {human_bytes(host.total_bytes)} ({human_bytes(host.available_bytes)} available)"
    ]
    if cgroup.limit_bytes is not None:
        parts.append(
            f"cgroup v{cgroup.version} limit {human_bytes(cgroup.limit_bytes)}, "
            f"{human_bytes(cgroup.usage_bytes)} used"
        )
    else:
        parts.append(
            f"no cgroup memory limit ({cgroup.note})" if cgroup.note else "no cgroup memory limit"
        )
    parts.append(f"swap {human_bytes(host.swap_total_bytes)}")
    status: Status = "pass"
    if available < 256 * MiB:
        status = "fail"
        parts.append(f"only {human_bytes(available)} left")
    elif available < 2 * GiB:
        status = "warn"
        parts.append(f"{human_bytes(available)} left for workers")
    if cgroup.oom_kill_count:
        status = "fail" if status == "fail" else "warn"
        parts.append(f"this cgroup already OOM-killed {cgroup.oom_kill_count} process(es)")
    return make_check("memory-limit", status, limit, "; ".join(parts), details)


def check_worker_memory(machine: Machine, settings: Settings, probe: LoadProbe | None) -> EnvCheck:
    if probe is None:
        return _no_target("worker-memory", "what a worker grows to")
    if probe.rss_peak is None or probe.uss_peak is None or probe.batches == 0:
        return _probe_failed("worker-memory", probe)
    projected = probe.uss_peak * settings.num_workers
    available = _available(machine)
    details = {
        "batches_loaded": probe.batches,
        "worker_rss_start_bytes": probe.rss_start,
        "worker_rss_bytes": probe.rss_peak,
        "worker_private_bytes": probe.uss_peak,
        "projected_bytes": projected,
        "available_bytes": available,
    }
    text = (
        f"a worker grew to {human_bytes(probe.rss_peak)} RSS ({human_bytes(probe.uss_peak)} private) "
        f"over {probe.batches} batch(es); × {settings.num_workers} workers = {human_bytes(projected)}"
    )
    if available is None:
        return make_check(
            "worker-memory", "unknown", probe.rss_peak, f"{text}; available memory unknown", details
        )
    status: Status = "pass"
    if projected > available:
        status = "fail"
    elif projected > available / 2:
        status = "warn"
    return make_check(
        "worker-memory",
        status,
        probe.rss_peak,
        f"{text} against {human_bytes(available)} available",
        details,
    )


def check_open_files(machine: Machine, settings: Settings, probe: LoadProbe | None) -> EnvCheck:
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


def check_cpu(machine: Machine, num_workers: int | None) -> EnvCheck:
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
    text = f"{cpu.logical_cores} cores, affinity {cpu.affinity_cores}, cgroup quota {quota}: {cpu.usable_cores} usable"
    status: Status = "pass"
    if num_workers is not None and num_workers > cpu.usable_cores:
        status = "warn"
        text += f"; num_workers={num_workers} is more than the usable cores"
    elif num_workers is None and cpu.logical_cores and cpu.usable_cores < cpu.logical_cores:
        text += (
            f"; size num_workers from {cpu.usable_cores}, not os.cpu_count()={cpu.logical_cores}"
        )
    return make_check("cpu", status, cpu.usable_cores, text, details)


def check_start_method(probe: LoadProbe | None) -> EnvCheck:
    default = multiprocessing.get_all_start_methods()[0]  # documented: the first is the default
    configured = multiprocessing.get_start_method(allow_none=True)
    method = configured or default
    details = {
        "default": default,
        "configured": configured,
        "python": platform.python_version(),
        "picklable": probe.picklable if probe else None,
        "pickle_bytes": probe.pickle_bytes if probe else None,
    }
    text = f"{method} ({'set explicitly' if configured else f'the default on {sys.platform}, Python {platform.python_version()}'})"
    if sys.platform.startswith("linux") and sys.version_info < (3, 14) and default == "fork":
        text += "; Python 3.14 makes forkserver the default on Linux"
    status: Status = "pass"
    if probe is not None and probe.picklable is False:
        text += f"; the dataset does not pickle ({probe.pickle_error})"
        status = "warn" if method == "fork" else "fail"
    elif probe is not None and probe.picklable:
        text += f"; the dataset pickles ({human_bytes(probe.pickle_bytes)} per worker under spawn/forkserver)"
    return make_check("start-method", status, method, text, details)


def check_container(machine: Machine, settings: Settings, probe: LoadProbe | None) -> EnvCheck:
    container, shm = machine.container, machine.shm
    details = {"runtime": container.runtime, "evidence": container.evidence}
    if container.runtime is None:
        return make_check(
            "container", "pass", None, "not in a container", details, "Nothing to do."
        )
    text = f"{container.runtime} ({'; '.join(container.evidence)})"
    need = None
    if probe is not None and probe.batch_bytes is not None:
        need = int(
            probe.batch_bytes * settings.num_workers * settings.prefetch_factor * SHM_HEADROOM
        )
    status: Status = "pass"
    if shm.total_bytes is not None and (shm.total_bytes < GiB or (need and need > shm.total_bytes)):
        status = "warn"
        text += f"; its /dev/shm is {human_bytes(shm.total_bytes)}"
    fix = (
        _shm_fix(machine, need)
        or "Give the container a larger /dev/shm with its runtime's shm-size option."
    )
    return make_check("container", status, container.runtime, text, details, fix)


def check_threads(machine: Machine, settings: Settings) -> EnvCheck:
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


def check_kernel_log(machine: Machine) -> EnvCheck:
    log, cgroup = machine.kernel_log, machine.cgroup
    kills = oom_kills(log.lines)
    details = {
        "source": log.source,
        "records": len(log.lines),
        "oom_kills": len(kills),
        "note": log.note,
    }
    if not log.readable:
        text = f"not readable: {log.note}"
        if cgroup.oom_kill_count is not None:
            text += "; the cgroup's oom_kill counter still tells an OOM kill apart"
        return make_check("kernel-log", "warn", None, text, details)
    text = f"readable from {log.source} ({len(log.lines)} records)"
    if kills:
        last = kills[-1]
        text += f"; {len(kills)} OOM kill(s) on record, the last pid {last.pid} ({last.comm})"
    return make_check("kernel-log", "pass", log.source, text, details)


def check_versions() -> EnvCheck:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    versions.update(installed_versions(("torch", "numpy", "pillow")))
    text = ", ".join(f"{name} {version or 'not installed'}" for name, version in versions.items())
    status: Status = "pass" if versions["torch"] else "warn"
    return make_check("versions", status, versions, text, versions)


def installed_versions(names: tuple[str, ...]) -> dict[str, str | None]:
    """Versions from the ``NAME-VERSION.dist-info`` folders on sys.path, without importing them.

    Reading folder names costs a millisecond; ``importlib.metadata`` costs some 50 ms to import
    and is only the fallback (egg-info and other layouts).
    """
    found: dict[str, str | None] = dict.fromkeys(names)
    wanted = {name.lower(): name for name in names}
    for entry in sys.path:
        try:
            children = os.listdir(entry or ".")
        except OSError:
            continue
        for child in children:
            if not child.endswith(".dist-info"):
                continue
            name, _, version = child[: -len(".dist-info")].partition("-")
            key = wanted.get(name.lower().replace("_", "-"))
            if key is not None and found[key] is None:
                found[key] = version
        if all(found.values()):
            return found
    missing = [name for name, version in found.items() if version is None]
    if missing:
        import importlib.metadata

        for name in missing:
            try:
                found[name] = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                pass
    return found
