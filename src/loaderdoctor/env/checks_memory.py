"""``env``'s memory checks: the memory this process tree may use, and what the workers grow to."""

from __future__ import annotations

from loaderdoctor.env.facts import Inputs, Machine, no_target, probe_failed
from loaderdoctor.env.findings import EnvCheck, Status, make_check
from loaderdoctor.units import GiB, MiB, format_bytes


def _available(machine: Machine) -> int | None:
    """Bytes this process tree may still allocate: the least of host and cgroup headroom."""
    candidates = []
    if machine.host.available_bytes is not None:
        candidates.append(machine.host.available_bytes)
    limit, usage = machine.cgroup.limit_bytes, machine.cgroup.usage_bytes
    if limit is not None and usage is not None:
        candidates.append(max(0, limit - usage))
    return min(candidates) if candidates else None


def check_memory_limit(inputs: Inputs) -> EnvCheck:
    machine = inputs.machine
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
        f"host {format_bytes(host.total_bytes)} ({format_bytes(host.available_bytes)} available)"
    ]
    if cgroup.limit_bytes is not None:
        parts.append(
            f"cgroup v{cgroup.version} limit {format_bytes(cgroup.limit_bytes)}, "
            f"{format_bytes(cgroup.usage_bytes)} used"
        )
    status: Status = "pass"
    lacking = machine.lacks("cgroups")
    if cgroup.limit_bytes is None and lacking is not None and not lacking.absent:
        # Linux with cgroups this process cannot read: a container limit may be hiding there
        status = "unknown"
        parts.append(f"cgroup limit unknown: {lacking.why_not}")
    elif lacking is not None:
        parts.append(f"no cgroup limit: {lacking.why_not}, so the host's memory is the limit")
    else:
        parts.append(
            f"no cgroup memory limit ({cgroup.note})" if cgroup.note else "no cgroup memory limit"
        )
    parts.append(f"swap {format_bytes(host.swap_total_bytes)}")
    if available < 256 * MiB:
        status = "fail"
        parts.append(f"only {format_bytes(available)} left")
    elif available < 2 * GiB:
        status = "warn"
        parts.append(f"{format_bytes(available)} left for workers")
    if cgroup.oom_kill_count:
        status = "fail" if status == "fail" else "warn"
        parts.append(f"this cgroup already OOM-killed {cgroup.oom_kill_count} process(es)")
    return make_check("memory-limit", status, limit, "; ".join(parts), details)


def check_worker_memory(inputs: Inputs) -> EnvCheck:
    machine, settings, probe = inputs.machine, inputs.settings, inputs.probe
    if probe is None:
        return no_target("worker-memory", "what a worker grows to")
    if probe.rss_peak is None or probe.uss_peak is None or probe.batches == 0:
        return probe_failed("worker-memory", probe)
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
        f"a worker grew to {format_bytes(probe.rss_peak)} RSS ({format_bytes(probe.uss_peak)} private) "
        f"over {probe.batches} batch(es); × {settings.num_workers} workers = {format_bytes(projected)}"
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
        f"{text} against {format_bytes(available)} available",
        details,
    )
