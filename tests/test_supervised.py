"""The supervised loader in this process: cleanup after failures, re-raising, epochs, num_workers=0."""

from __future__ import annotations

import os
import select
import signal
import tempfile
import time
from pathlib import Path

import psutil
import pytest
import torch

import loaderdoctor
from conftest import run_python
from ld_datasets import Faulty, FaultyStream
from loaderdoctor import LoaderError, WorkerDiedError, WorkerHangError

pytestmark = pytest.mark.slow


def shm_entries(pids: set[int]) -> set[str]:
    """What processes ``pids`` hold in /dev/shm: torch names its shared memory
    ``torch_<pid>_<random>_<n>``. Other processes' entries are not this test's (another test's
    spawn-context semaphores, ``sem.mp-*``, come and go meanwhile); this one's fork-context
    semaphores are unlinked as soon as they are made."""
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return set()
    return {name for name in names for pid in pids if name.startswith(f"torch_{pid}_")}


def live_children() -> list[psutil.Process]:
    return [c for c in psutil.Process().children(recursive=True) if c.status() != "zombie"]


def test_death_leaves_no_worker_no_zombie_no_shm_and_no_log_dir() -> None:
    before_shm = shm_entries({os.getpid()})
    loader = loaderdoctor.DataLoader(Faulty("segv"), batch_size=2, num_workers=2)
    iterator = iter(loader)
    pids = {worker.pid for worker in iterator._workers}
    log_dir = iterator._ld.log_dir
    with pytest.raises(WorkerDiedError) as caught:
        for _ in iterator:
            pass
    assert caught.value.diagnosis.cause == "native-crash"
    assert caught.value.diagnosis.sample_file == "/data/img_005.jpg"
    assert not Path(log_dir).exists()
    # its workers only: another test's process may still wait to be reaped
    assert not any(c.status() == "zombie" for c in psutil.Process().children() if c.pid in pids)
    assert pids.isdisjoint(c.pid for c in live_children())
    assert shm_entries({os.getpid(), *pids}) - before_shm == set()
    assert [i.action for i in loader.incidents] == ["raised"]
    # The dead iterator never silently skips the lost batches: it keeps saying why it stopped.
    with pytest.raises(LoaderError, match="stopped after an earlier failure"):
        next(iterator)


def test_persistent_workers_start_fresh_after_a_death(tmp_path: Path) -> None:
    dataset = Faulty("segv", once_flag=str(tmp_path / "crashed"))
    loader = loaderdoctor.DataLoader(dataset, batch_size=2, num_workers=2, persistent_workers=True)
    with pytest.raises(WorkerDiedError):
        list(loader)
    second_epoch = torch.cat(list(loader)).flatten().tolist()
    assert sorted(second_epoch) == list(range(24))


def test_key_error_keeps_its_type_and_gains_the_index() -> None:
    loader = loaderdoctor.DataLoader(Faulty("key"), batch_size=4, num_workers=2)
    with pytest.raises(KeyError) as caught:
        list(loader)
    assert caught.value.diagnosis.indices == [5]
    assert "no label for 5" in str(caught.value)


def test_a_python_exception_does_not_stop_the_iterator() -> None:
    # Stock torch lets a caller skip a batch that raised; so does loaderdoctor.
    iterator = iter(loaderdoctor.DataLoader(Faulty("key"), batch_size=4, num_workers=2))
    delivered, errors = 0, 0
    while True:
        try:
            next(iterator)
            delivered += 1
        except StopIteration:
            break
        except KeyError:
            errors += 1
    assert (delivered, errors) == (5, 1)


def test_num_workers_zero_names_the_index() -> None:
    loader = loaderdoctor.DataLoader(Faulty("key"), batch_size=4)
    with pytest.raises(KeyError) as caught:
        list(loader)
    assert caught.value.diagnosis.cause == "sample-error"
    assert caught.value.diagnosis.indices == [5]
    assert any("loaderdoctor verdict" in note for note in caught.value.__notes__)


def test_iterable_dataset_names_the_stream_position() -> None:
    loader = loaderdoctor.DataLoader(FaultyStream(), batch_size=2, num_workers=1)
    with pytest.raises(OSError) as caught:
        list(loader)
    assert any("item #4" in line for line in caught.value.diagnosis.evidence)


def test_user_timeout_becomes_a_hang_verdict_with_the_stack() -> None:
    loader = loaderdoctor.DataLoader(Faulty("sleep"), batch_size=2, num_workers=2, timeout=3)
    started = time.monotonic()
    iterator = iter(loader)
    with pytest.raises(WorkerHangError) as caught:
        list(iterator)
    assert time.monotonic() - started < 100  # the 120 s sleep was cut short, at any load
    diagnosis = caught.value.diagnosis
    assert diagnosis.cause == "worker-hang" and diagnosis.indices == [5]
    assert "DataLoader timed out after 3 seconds" in str(caught.value)
    assert "in __getitem__" in (diagnosis.python_stack or "")
    assert not any(worker.is_alive() for worker in iterator._workers)


def test_killed_parent_leaks_no_shared_memory_and_no_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A temp folder of this test's own: any supervised iterator on the machine (another test run)
    # prunes the log folders of dead owners it finds in the shared one.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    script = (
        "import time, torch, loaderdoctor\n"
        "class Slow(torch.utils.data.Dataset):\n"
        "    def __len__(self): return 10_000\n"
        "    def __getitem__(self, i):\n"
        "        time.sleep(0.01); return torch.zeros(1000)\n"
        "if __name__ == '__main__':\n"
        "    for n, batch in enumerate(loaderdoctor.DataLoader(Slow(), batch_size=4, num_workers=2)):\n"
        "        if n == 3: print('running', flush=True)\n"
    )
    import subprocess
    import sys

    process = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    pids = {process.pid}  # the killed parent and its workers: the names their shm would have
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], 120)
        assert ready, "the child did not start loading within 120 s"
        assert process.stdout.readline().strip() == "running"
        workers = psutil.Process(process.pid).children()
        assert len(workers) == 2
        pids |= {worker.pid for worker in workers}
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        _gone, alive = psutil.wait_procs(workers, timeout=20)
        assert alive == [], "workers outlived their parent"
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert shm_entries(pids) == set()
    # The dead parent could not remove its log directory; the next supervised iterator does.
    leftovers = list(Path(tempfile.gettempdir()).glob(f"loaderdoctor-{process.pid}-*"))
    assert leftovers, "the killed parent's log directory was expected to remain"
    iterator = iter(loaderdoctor.DataLoader(Faulty("key"), batch_size=4, num_workers=1))
    del iterator
    assert not any(path.exists() for path in leftovers)


def test_hang_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="hang_timeout"):
        loaderdoctor.DataLoader(Faulty("key"), hang_timeout=0)


def test_run_python_helper_is_bounded() -> None:
    result = run_python(["-c", "print('ok')"], timeout=30)
    assert result.stdout.strip() == "ok"
