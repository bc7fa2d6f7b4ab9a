"""Unit tests of the system/ probes: real file contents in, dataclasses out."""

from __future__ import annotations

import os
import sys

import psutil
import pytest

from loaderdoctor.system import _files, cgroup, container, cpu, kmsg, limits, memory, shm

MEMINFO = """\
MemTotal:       24683656 kB
MemFree:        24226560 kB
MemAvailable:   24363404 kB
Buffers:            5868 kB
Cached:           315244 kB
SwapCached:            0 kB
SwapTotal:       2097148 kB
SwapFree:        2097000 kB
HugePages_Total:       0
"""

MEMORY_EVENTS_V2 = "low 0\nhigh 0\nmax 17\noom 3\noom_kill 2\noom_group_kill 0\n"
OOM_CONTROL_V1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n"

KMSG_MEMCG = (
    "[ 5123.123456] Memory cgroup out of memory: Killed process 4242 (python) "
    "total-vm:8123456kB, anon-rss:1048576kB, file-rss:10240kB, shmem-rss:0kB, UID:0 "
    "pgtables:4096kB oom_score_adj:0"
)
KMSG_HOST = (
    "[  812.000001] Out of memory: Killed process 123 (python3) total-vm:123456kB, "
    "anon-rss:65536kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:512kB oom_score_adj:0"
)
KMSG_SUMMARY = (
    "[ 5123.123400] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
    "oom_memcg=/docker/abc,task_memcg=/docker/abc/worker,task=python,pid=4242,uid=0"
)
KMSG_OLD = "[  99.5] Out of memory: Kill process 77 (python) score 912 or sacrifice child"


def test_meminfo_parses_to_bytes() -> None:
    host = memory.host_memory_from_meminfo(MEMINFO)
    assert host.total_bytes == 24683656 * 1024
    assert host.available_bytes == 24363404 * 1024
    assert host.swap_total_bytes == 2097148 * 1024
    assert host.swap_free_bytes == 2097000 * 1024
    assert host.note is None
    assert memory.parse_meminfo(MEMINFO)["HugePages_Total"] == 0


def test_meminfo_missing_keys_are_noted() -> None:
    host = memory.host_memory_from_meminfo("MemTotal: 1024 kB\n")
    assert host.total_bytes == 1024 * 1024
    assert host.available_bytes is None
    assert host.note is not None and "MemAvailable" in host.note


def test_counters_of_memory_events_and_oom_control() -> None:
    assert _files.parse_key_values(MEMORY_EVENTS_V2)["oom_kill"] == 2
    assert _files.parse_key_values(MEMORY_EVENTS_V2)["oom"] == 3
    assert _files.parse_key_values(OOM_CONTROL_V1) == {
        "oom_kill_disable": 0,
        "under_oom": 0,
        "oom_kill": 5,
    }


def test_proc_cgroup_and_mountinfo() -> None:
    proc = "4:memory:/process_api/abc\n1:cpu,cpuacct:/\n9:name=systemd:/\n0::/user.slice\n"
    assert cgroup.parse_proc_cgroup(proc) == {
        "memory": "/process_api/abc",
        "cpu": "/",
        "cpuacct": "/",
        "systemd": "/",
        "": "/user.slice",
    }
    mountinfo = (
        "30 24 0:26 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
        "35 24 0:31 /docker/abc /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n"
        "36 24 0:32 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
        "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
    )
    mounts = cgroup.parse_mountinfo(mountinfo)
    assert [(m.version, m.mount_point, m.root) for m in mounts] == [
        (2, "/sys/fs/cgroup/unified", "/"),
        (1, "/sys/fs/cgroup/memory", "/docker/abc"),
        (1, "/sys/fs/cgroup/cpu,cpuacct", "/"),
    ]
    assert "memory" in mounts[1].controllers
    # inside a container the mount's root is the container's cgroup: the files are at the top
    assert cgroup._directory(mounts[1], "/docker/abc") == "/sys/fs/cgroup/memory"
    assert cgroup._directory(mounts[1], "/docker/abc/child") == "/sys/fs/cgroup/memory/child"


def test_cpu_max() -> None:
    assert cgroup.parse_cpu_max("200000 100000\n") == 2.0
    assert cgroup.parse_cpu_max("50000 100000") == 0.5
    assert cgroup.parse_cpu_max("max 100000") is None


def test_limit_values() -> None:
    assert cgroup._limit("9223372036854771712\n") is None  # v1's "no limit"
    assert cgroup._limit("max\n") is None
    assert cgroup._limit("1073741824\n") == 1 << 30


@pytest.mark.parametrize(
    ("line", "pid", "comm", "memcg"),
    [
        (KMSG_MEMCG, 4242, "python", "?"),
        (KMSG_HOST, 123, "python3", None),
        (KMSG_SUMMARY, 4242, "python", "/docker/abc/worker"),
        (KMSG_OLD, 77, "python", None),
    ],
)
def test_oom_kill_forms(line: str, pid: int, comm: str, memcg: str | None) -> None:
    [kill] = kmsg.oom_kills([line])
    assert (kill.pid, kill.comm, kill.memcg, kill.line) == (pid, comm, memcg, line)


def test_oom_summary_and_killed_line_merge() -> None:
    lines = ["[ 1.0] unrelated", KMSG_SUMMARY, KMSG_MEMCG, KMSG_HOST]
    kills = kmsg.oom_kills(lines)
    assert [(k.pid, k.comm, k.memcg) for k in kills] == [
        (4242, "python", "/docker/abc/worker"),
        (123, "python3", None),
    ]
    assert kills[0].line == KMSG_MEMCG


def test_kmsg_record_format() -> None:
    record = "6,1234,5123123456,-;Out of memory: Killed process 123 (python3)\n SUBSYSTEM=mem\n"
    assert kmsg.parse_kmsg_record(record) == (
        "[ 5123.123456] Out of memory: Killed process 123 (python3)"
    )
    assert kmsg.parse_kmsg_record("no separator") is None
    assert kmsg.parse_kmsg_record("3,1,0,-;a\\x0ab") == "[    0.000000] a b"


def test_lines_for_pid() -> None:
    segfault = "[ 7.1] python[4242]: segfault at 0 ip 00007f sp 00007f error 4 in libc.so.6"
    table = "[ 7.2] [   4242]     0  4242   123456    65536   524288        0             0 python"
    other = "[ 7.3] Killed process 42420 (python) total-vm:1kB"
    timestamp_only = "[ 4242.000000] something else"
    lines = [KMSG_SUMMARY, KMSG_MEMCG, KMSG_HOST, segfault, table, other, timestamp_only]
    assert kmsg.lines_for_pid(lines, 4242) == [KMSG_SUMMARY, KMSG_MEMCG, segfault, table]


def test_kernel_log_reads_real_device_or_says_why() -> None:
    log = kmsg.read_kernel_log()
    assert isinstance(log.lines, list)
    if log.readable:
        assert log.source in ("/dev/kmsg", "dmesg")
    else:
        assert log.note


@pytest.mark.slow
def test_kernel_log_missing_device_falls_back_or_says_why() -> None:
    log = kmsg.read_kernel_log("/nonexistent/kmsg")
    assert log.note is not None and "/nonexistent/kmsg does not exist" in log.note
    assert log.source in ("dmesg", None)


def test_missing_sources_give_notes_not_exceptions(tmp_path: object) -> None:
    usage = shm.shm_usage("/nonexistent/shm")
    assert usage.total_bytes is None and usage.note == "/nonexistent/shm does not exist"
    # no /proc/meminfo (macOS, Windows): psutil asks the kernel instead
    host = memory.host_memory("/nonexistent/meminfo")
    assert host.total_bytes == psutil.virtual_memory().total and host.note is None
    gone = cgroup.memory_cgroup(pid=2**22 + 12345)  # above pid_max: no such process
    assert gone.version is None and gone.note is not None and "no such file" in gone.note


def test_live_probes_return_their_dataclasses() -> None:
    usage = shm.shm_usage()
    if usage.total_bytes is not None:
        assert usage.free_bytes is not None and 0 <= usage.free_bytes <= usage.total_bytes
    files = limits.open_files()
    assert files.open_now is None or files.open_now > 0
    info = cpu.cpu_info()
    assert info.usable_cores is None or info.usable_cores >= 1
    memcg = cgroup.memory_cgroup()
    assert memcg.version in (1, 2, None)
    assert memcg.version is not None or memcg.note
    assert isinstance(container.detect_container().evidence, list)


def test_container_detection_from_markers(tmp_path: os.PathLike[str]) -> None:
    root = os.fspath(tmp_path)
    os.makedirs(os.path.join(root, "proc/1"))
    os.makedirs(os.path.join(root, "proc/self"))
    with open(os.path.join(root, "proc/1/cgroup"), "w") as handle:
        handle.write("0::/kubepods/burstable/pod123/abc\n")
    with open(os.path.join(root, "proc/self/mountinfo"), "w") as handle:
        handle.write("22 1 8:1 / / rw - overlay overlay rw\n")
    open(os.path.join(root, ".dockerenv"), "w").close()
    found = container.detect_container(environ={}, root=root)
    assert found.runtime == "kubernetes"
    assert "/.dockerenv exists" in found.evidence
    assert (
        container.detect_container(environ={}, root=os.path.join(root, "nothing")).runtime is None
    )


@pytest.mark.slow
def test_system_imports_no_torch() -> None:
    import subprocess

    code = (
        "import sys, loaderdoctor.system.shm, loaderdoctor.system.cgroup, loaderdoctor.system.kmsg,"
        " loaderdoctor.system.cpu, loaderdoctor.system.container, loaderdoctor.system.limits,"
        " loaderdoctor.system.memory, loaderdoctor.env.core; print('torch' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip() == "False", result.stderr
