"""The env check catalog: data, one row per check (id, title, why, fix).

Every check has a stable id: JSON consumers, docs and tests key on it. Add a check by adding a row
here and its measurement to ``env.core.CHECKS``; a test fails if either is missing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EnvCheckSpec:
    id: str
    title: str
    why: str
    fix: str
    unit: str = "text"  # how renderers show ``value``: "bytes", "count", "text" or "mapping"


CATALOG: tuple[EnvCheckSpec, ...] = (
    EnvCheckSpec(
        "shm-size",
        "Size and free space of /dev/shm",
        "Workers hand every batch to the parent through /dev/shm. Docker and podman give a "
        "container 64 MiB unless told otherwise; a few batches of images fill it and workers die "
        "with 'Bus error' or 'unable to allocate shared memory'.",
        "Give /dev/shm more room: `docker run --shm-size=8g` (podman: the same flag), or in "
        "kubernetes mount an emptyDir with `medium: Memory` at /dev/shm.",
        unit="bytes",
    ),
    EnvCheckSpec(
        "shm-need",
        "Shared memory one epoch needs in flight",
        "Up to num_workers × prefetch_factor collated batches sit in /dev/shm at once; when they "
        "do not fit, a worker dies mid-epoch.",
        "Lower num_workers, prefetch_factor or batch_size, or enlarge /dev/shm (see shm-size).",
        unit="bytes",
    ),
    EnvCheckSpec(
        "memory-limit",
        "Host memory, cgroup limit, usage and swap",
        "The kernel OOM killer enforces the container or cgroup limit, not the host's RAM; a worker "
        "killed this way leaves only 'killed by signal: Killed'.",
        "Raise the container's memory limit (`docker run --memory=...`, kubernetes "
        "`resources.limits.memory`), or use fewer workers.",
        unit="bytes",
    ),
    EnvCheckSpec(
        "worker-memory",
        "Memory each worker grows to, times workers",
        "Each worker is a process: its private memory (copy-on-write pages touched by refcounts, "
        "decoded samples, caches) adds up across workers against the memory limit.",
        "Use fewer workers; keep dataset metadata in numpy arrays rather than Python lists and "
        "dicts (copy-on-write, pytorch/pytorch#13246); open files lazily in each worker.",
        unit="bytes",
    ),
    EnvCheckSpec(
        "open-files",
        "Open-file limit (RLIMIT_NOFILE)",
        "With the default 'file_descriptor' sharing strategy every tensor in flight holds a file "
        "descriptor, and each worker keeps the files its samples open: past the limit workers "
        "fail with 'Too many open files'.",
        "Raise the limit (`ulimit -n 65536`, docker `--ulimit nofile=65536:65536`), or call "
        "`torch.multiprocessing.set_sharing_strategy('file_system')`.",
        unit="count",
    ),
    EnvCheckSpec(
        "cpu",
        "Cores, affinity and cgroup CPU quota",
        "os.cpu_count() reports the host; affinity and the cgroup quota decide how many workers "
        "really run at once. More workers than usable cores only add memory and contention.",
        "Set num_workers to at most the usable cores (leave one for the main process).",
        unit="count",
    ),
    EnvCheckSpec(
        "start-method",
        "Default multiprocessing start method",
        "fork shares the dataset copy-on-write; spawn and forkserver pickle it into each worker and "
        "re-import the main module. Python 3.14 moves Linux from fork to forkserver, so datasets "
        "must be picklable and scripts need `if __name__ == '__main__':`.",
        "Make the dataset picklable (no lambdas, open handles or local classes), guard the script "
        "with `if __name__ == '__main__':`, or pass `multiprocessing_context='fork'` explicitly.",
    ),
    EnvCheckSpec(
        "container",
        "Container runtime",
        "Containers bring their own /dev/shm and memory limits; the fix for each is a runtime flag.",
        "Outside a container nothing to do; inside one, size /dev/shm with the flag shown.",
    ),
    EnvCheckSpec(
        "threads",
        "Thread pools per worker",
        "OpenMP, MKL, OpenBLAS and OpenCV each start one thread per core in every worker unless "
        "told otherwise: workers × cores threads fight over the same cores.",
        "Export OMP_NUM_THREADS=1 (and MKL_NUM_THREADS, OPENBLAS_NUM_THREADS), or call "
        "`cv2.setNumThreads(0)` in worker_init_fn.",
        unit="count",
    ),
    EnvCheckSpec(
        "kernel-log",
        "Kernel log readable for OOM evidence",
        "After a SIGKILL only the kernel log says whether the OOM killer did it and which cgroup "
        "limit was hit; without read access that evidence is lost.",
        "Run as root or with CAP_SYSLOG, or set `sysctl kernel.dmesg_restrict=0`; in docker, the "
        "host's `dmesg` has the evidence.",
    ),
    EnvCheckSpec(
        "oom-priority",
        "Workers go before the training process when memory runs out",
        "When memory runs out the kernel's OOM killer takes the process with the highest "
        "badness, and a spawned worker holds as much as the training process: healing an OOM "
        "kill could get the training process killed. Supervised workers run at oom_score_adj "
        "900 and samples re-tried alone at 1000, so the kernel takes them first.",
        "Start the training process at oom_score_adj 0 (check the launcher's "
        "`/proc/PID/oom_score_adj`, Kubernetes sets it by QoS class); on Linux nothing else is "
        "needed.",
    ),
    EnvCheckSpec(
        "versions",
        "Python, torch, numpy and pillow versions",
        "Bug reports and fixes depend on versions; some worker bugs are fixed only in newer torch.",
        "Include these versions in any bug report.",
        unit="mapping",
    ),
    EnvCheckSpec(
        "dependencies",
        "Modules loaderdoctor and the dataset import",
        "A module that is not installed fails where it is first imported: an import inside "
        "__getitem__ kills every worker at its first sample, and loaderdoctor without one of its "
        "own dependencies gives verdicts about its own machinery instead of the job.",
        "Install what is missing in this environment (`pip install NAME`), and declare it in the "
        "project's dependencies so that every environment gets it.",
        unit="count",
    ),
)

CATALOG_BY_ID: dict[str, EnvCheckSpec] = {spec.id: spec for spec in CATALOG}
