"""Container detection: docker, podman, kubernetes, and the flag that sizes their /dev/shm."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from loaderdoctor.system._files import read_text


@dataclass(frozen=True)
class ContainerInfo:
    runtime: str | None  # "kubernetes", "docker", "podman", "containerd", "lxc" or None
    evidence: list[str] = field(default_factory=list)
    note: str | None = None


# Markers in /proc/1/cgroup or /proc/self/mountinfo, most specific first.
_CGROUP_MARKERS: tuple[tuple[str, str], ...] = (
    ("kubepods", "kubernetes"),
    ("libpod", "podman"),
    ("docker", "docker"),
    ("containerd", "containerd"),
    ("lxc", "lxc"),
)


def detect_container(environ: dict[str, str] | None = None, root: str = "/") -> ContainerInfo:
    environ = dict(os.environ) if environ is None else environ
    found: list[tuple[str, str]] = []  # (runtime, evidence)
    if "KUBERNETES_SERVICE_HOST" in environ:
        found.append(("kubernetes", "KUBERNETES_SERVICE_HOST is set"))
    if os.path.exists(os.path.join(root, "var/run/secrets/kubernetes.io/serviceaccount")):
        found.append(("kubernetes", "a kubernetes service-account token is mounted"))
    if os.path.exists(os.path.join(root, "run/.containerenv")):
        found.append(("podman", "/run/.containerenv exists"))
    if os.path.exists(os.path.join(root, ".dockerenv")):
        found.append(("docker", "/.dockerenv exists"))
    container_variable = environ.get("container")
    if container_variable:
        found.append((container_variable, f"container={container_variable} is set"))
    notes: list[str] = []
    for source in ("proc/1/cgroup", "proc/self/mountinfo"):
        result = read_text(os.path.join(root, source))
        if result.text is None:
            notes.append(result.error or source)
            continue
        for marker, runtime in _CGROUP_MARKERS:
            if marker in result.text:
                found.append((runtime, f"/{source} mentions {marker}"))
                break
    if not found:
        return ContainerInfo(None, [], "; ".join(notes) or None)
    # kubernetes runs on docker/containerd: the orchestrator decides how /dev/shm is sized
    ranking = [runtime for _, runtime in _CGROUP_MARKERS]
    runtimes = [runtime for runtime, _ in found]
    runtime = min(
        runtimes, key=lambda name: ranking.index(name) if name in ranking else len(ranking)
    )
    return ContainerInfo(runtime, [evidence for _, evidence in found], "; ".join(notes) or None)
