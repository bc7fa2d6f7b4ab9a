"""What ``env``'s checks measure against: the machine's facts and the loader's settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from loaderdoctor.env.findings import EnvCheck, make_check
from loaderdoctor.env.probe import LoadProbe
from loaderdoctor.system.cgroup import MemoryCgroup, memory_cgroup
from loaderdoctor.system.container import ContainerInfo, detect_container
from loaderdoctor.system.cpu import CpuInfo, cpu_info
from loaderdoctor.system.kmsg import KernelLog, read_kernel_log
from loaderdoctor.system.limits import OpenFiles, open_files
from loaderdoctor.system.memory import HostMemory, host_memory
from loaderdoctor.system.platform import Capability, capabilities
from loaderdoctor.system.shm import ShmUsage, shm_usage


@dataclass
class Machine:
    shm: ShmUsage
    cgroup: MemoryCgroup
    host: HostMemory
    files: OpenFiles
    cpu: CpuInfo
    container: ContainerInfo
    kernel_log: KernelLog
    # what this platform lets loaderdoctor read (system.platform); empty: all of it
    capabilities: tuple[Capability, ...] = ()

    def lacks(self, name: str) -> Capability | None:
        """The probe named ``name`` when it is not available here."""
        return next((c for c in self.capabilities if c.name == name and not c.available), None)


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


@dataclass
class Inputs:
    """Everything a check may measure against; every check is ``check(inputs) -> EnvCheck``."""

    machine: Machine
    settings: Settings
    probe: LoadProbe | None  # None: no target given
    requested_workers: int | None  # --num-workers as the user gave it (None: not given)
    target_imports: TargetImports | None = None  # None: no target given


@dataclass
class TargetImports:
    """The modules the target's source imports, and those of them that cannot be imported."""

    source: str | None  # the file that was read, None when it could not be found
    modules: list[str] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)  # module -> why it does not import
    load_error: str | None = None  # the spec did not load (a missing import, say): why


def probe_machine() -> Machine:
    return Machine(
        shm_usage(),
        memory_cgroup(),
        host_memory(),
        open_files(),
        cpu_info(),
        detect_container(),
        read_kernel_log(),
        tuple(capabilities()),
    )


def no_target(check_id: str, what: str) -> EnvCheck:
    return make_check(check_id, "unknown", None, f"give --target to measure {what}")


def probe_failed(check_id: str, probe: LoadProbe) -> EnvCheck:
    return make_check(
        check_id, "unknown", None, f"could not load a batch: {probe.error}", {"error": probe.error}
    )
