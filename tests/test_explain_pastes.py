"""``loaderdoctor explain`` on logs as users paste them: cut short, from schedulers, from streams,
from stock torch's own runs, and failures that are not the DataLoader's (controls)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from conftest import run_python
from loaderdoctor.forensics.explain import explain_text
from loaderdoctor.report.explain import format_json, format_text

FIXTURES = Path(__file__).parent / "fixtures" / "explain"
ACCURACY_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "explain_accuracy.py"
TOP1_FLOOR = 0.95
KILLED = "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed."
CTRL_C_IN_THE_WAIT = """\
^CTraceback (most recent call last):
  File "train.py", line 96, in <module>
    for j, data in enumerate(loader):
  File "/usr/lib/python3/site-packages/torch/utils/data/dataloader.py", line 1163, in _try_get_data
    data = self._data_queue.get(timeout=timeout)
  File "/usr/lib/python3.10/multiprocessing/connection.py", line 216, in recv_bytes
    buf = self._recv_bytes(maxlength)
"""
STREAM_INNER_TRACEBACK = """\
Original Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py", line 349, in _worker_loop
    data = fetcher.fetch(index)
  File "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py", line 33, in fetch
    data.append(next(self.dataset_iter))
  File "/home/me/shards.py", line 40, in __iter__
    yield json.loads(line)
json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)
"""
TQDM_ITER_KILLED = """\
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/tqdm/std.py", line 1181, in __iter__
    for obj in iterable:
  File "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1291, in _try_get_data
    data = self._data_queue.get(timeout=timeout)
  File "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/signal_handling.py", line 73, in handler
    _error_if_any_worker_fails()
RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed.
"""


def top(text: str) -> list[str]:
    return [guess.cause for guess in explain_text(text).causes]


@pytest.mark.parametrize(
    "line",
    [
        "srun: error: gpu001: task 0: Out Of Memory",
        "slurmstepd: error: Detected 1 oom_kill event in StepId=11300781.0. Some of the step tasks "
        "have been OOM Killed.",
        "slurmstepd: error: Job 4242 exceeded memory limit (8437312 > 8388608), being killed",
        "    Reason:       OOMKilled",
        "TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.",
        "=>> PBS: job killed: mem 8437312kb exceeded limit 8388608kb",
        "Some of your processes may have been killed by the cgroup out-of-memory handler.",
    ],
)
def test_a_schedulers_memory_kill_is_an_oom_kill(line: str) -> None:
    assert top(line) == ["oom-killed"]


@pytest.mark.parametrize(
    "line",
    [
        "trainer exited with code 137",
        "CONTAINER ID   IMAGE   STATUS                       NAMES\n"
        "4f2a           train   Exited (137) 2 minutes ago   trainer",
        "Training task exit with status code 137",
        "Process finished with exit code 137 (interrupted by signal 9: SIGKILL)",
        "ERROR: Service 'web' failed to build : The command '/bin/sh -c pip3 install -r "
        "requirements.txt' returned a non-zero code: 137",
    ],
)
def test_a_container_or_ide_exit_status_137_is_a_sigkill(line: str) -> None:
    assert top(line) == ["oom-killed", "killed-by-signal"]


@pytest.mark.parametrize(
    ("line", "causes"),
    [
        ("段错误 (核心已转储)", ["native-crash"]),
        ("Speicherzugriffsfehler (Speicherabzug geschrieben)", ["native-crash"]),
        ("Erreur de segmentation (core dumped)", ["native-crash"]),
        ("セグメンテーション違反です (コアダンプ)", ["native-crash"]),
        ("总线错误 (核心已转储)", ["shm-exhausted", "native-crash"]),
        ("Bus-Zugriffsfehler (Speicherabzug geschrieben)", ["shm-exhausted", "native-crash"]),
        ("已杀死", ["oom-killed", "killed-by-signal"]),
        ("Getötet", ["oom-killed", "killed-by-signal"]),
        (
            "/bin/bash: line 27:   318 Killed                  sh start.sh",
            ["oom-killed", "killed-by-signal"],
        ),
        ("好像设置num_worker就会抛出double free的错误", ["native-crash"]),
    ],
)
def test_the_shells_words_for_a_signal_in_other_languages(line: str, causes: list[str]) -> None:
    assert top(line) == causes


def test_a_ctrl_c_paste_cut_in_the_wait_is_a_partial_hang() -> None:
    assert format_text(explain_text(CTRL_C_IN_THE_WAIT)).splitlines() == [
        "loaderdoctor explain: most likely causes, from the message alone (partial: the log is "
        "cut short)",
        "1. worker-hang (70%): The worker stopped making progress",
        "   line 7: buf = self._recv_bytes(maxlength)",
        "     Ctrl-C on a run waiting for its next batch (the paste stops before "
        "KeyboardInterrupt): no worker delivered one.",
        "     The paste stops inside the main process's wait for a batch, before the error: a "
        "stuck worker, unless the lines after it name another cause.",
        "   next checks:",
        "     $ py-spy dump --pid PID   (PID of the stuck worker)",
        "     - Rerun it under `loaderdoctor run -- COMMAND`: the report names the cause and the "
        "sample.",
        "   more: loaderdoctor explain --cause worker-hang",
        "partial: the log stops inside a traceback at line 7, before its error line: the answer "
        "above is what the lines before it support.",
        "  to settle it: paste the lines after line 7 (`buf = self._recv_bytes(maxlength)`): the "
        "error line that ends this traceback decides",
    ]


def test_json_says_where_a_cut_paste_stops() -> None:
    data = json.loads(format_json(explain_text(CTRL_C_IN_THE_WAIT)))
    assert data["partial"] == {
        "line_number": 7,
        "line": "buf = self._recv_bytes(maxlength)",
        "settle": "paste the lines after line 7 (`buf = self._recv_bytes(maxlength)`): the error "
        "line that ends this traceback decides",
    }
    assert json.loads(format_json(explain_text(KILLED)))["partial"] is None


def test_a_cut_paste_without_ctrl_c_is_a_weaker_hang() -> None:
    cut = CTRL_C_IN_THE_WAIT.removeprefix("^C")
    guesses = explain_text(cut).causes
    assert [(g.cause, g.likelihood) for g in guesses] == [("worker-hang", 0.4)]


def test_the_error_line_settles_a_cut_paste() -> None:
    complete = explain_text(CTRL_C_IN_THE_WAIT + "KeyboardInterrupt\n")
    assert complete.partial is None
    assert top(CTRL_C_IN_THE_WAIT + "KeyboardInterrupt\n") == ["worker-hang"]
    # The error line that ends it names the cause: the wait it was in is no hang then.
    ended = explain_text(CTRL_C_IN_THE_WAIT.removeprefix("^C") + KILLED + "\n")
    assert ended.partial is None
    assert [g.cause for g in ended.causes] == ["oom-killed", "killed-by-signal"]


def test_a_streams_error_without_torchs_wrapper_is_a_sample_error() -> None:
    explanation = explain_text(STREAM_INNER_TRACEBACK)
    assert [g.cause for g in explanation.causes] == ["sample-error"]
    assert [line.symptom for line in explanation.causes[0].lines] == ["in-stream"]
    # `__iter__` is a stream's stage only in a worker's own traceback, never in the main loop.
    assert top(TQDM_ITER_KILLED) == ["oom-killed", "killed-by-signal"]


def test_a_worker_that_exits_zero_is_read_from_stock_torchs_log() -> None:
    log = (FIXTURES / "corpus" / "stock-worker-sys-exit.log").read_text().split("# ---\n")[1]
    guesses = explain_text(log).causes
    assert [(g.cause, g.likelihood) for g in guesses] == [
        ("worker-exit", 0.6),
        ("oom-killed", 0.25),
    ]
    assert guesses[0].lines[0].line == "FileNotFoundError: [Errno 2] No such file or directory"


def test_a_timed_out_wait_for_a_gone_worker_points_at_its_own_exit_on_posix_only() -> None:
    log = (FIXTURES / "corpus" / "stock-worker-sys-exit-queue-empty.log").read_text()
    body = log.split("# ---\n")[1]
    assert [(g.cause, g.likelihood) for g in explain_text(body).causes][:2] == [
        ("worker-exit", 0.56),
        ("oom-killed", 0.35),
    ]
    # Windows has no SIGCHLD: every worker death reads this way there, so the path decides.
    windows = re.sub(r'File "/\S+/', r'File "C:\\Python311\\Lib\\', body)
    assert "C:\\Python311" in windows
    assert top(windows)[:3] == ["oom-killed", "shm-exhausted", "native-crash"]


def test_a_none_sample_is_named_in_a_collate_error() -> None:
    text = (
        "TypeError: default_collate: batch must contain tensors, numpy arrays, numbers, dicts "
        "or lists; found <class 'NoneType'>"
    )
    guesses = explain_text(text).causes
    assert [g.cause for g in guesses] == ["collate-error"]
    assert guesses[0].lines[0].note == (
        "default_collate found None where a sample should be: `__getitem__` returned None."
    )


def test_a_gpu_error_is_not_a_dataloader_failure_and_says_so() -> None:
    line = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 240.00 MiB"
    assert format_text(explain_text(line)).splitlines() == [
        "loaderdoctor explain: not a DataLoader failure: a GPU out-of-memory error (the model's "
        "memory on the GPU, not the workers' RAM).",
        f"  line 1: {line}",
        "  Lower the batch size or the model's memory (mixed precision, gradient checkpointing); "
        "num_workers does not change GPU memory.",
    ]
    data = json.loads(format_json(explain_text(line)))
    assert data["causes"] == []
    assert [other["kind"] for other in data["elsewhere"]] == ["cuda-oom"]


def test_a_loader_cause_beside_a_gpu_error_keeps_both() -> None:
    text = f"{KILLED}\nRuntimeError: CUDA error: device-side assert triggered"
    explanation = explain_text(text)
    assert [g.cause for g in explanation.causes] == ["oom-killed", "killed-by-signal"]
    assert format_text(explanation).splitlines()[-1] == (
        "also in the log, not a DataLoader failure: a device-side assert in a CUDA kernel (an "
        "index out of range: a label >= the number of classes, a token id >= the vocabulary) "
        "(line 2)"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "cause"),
    [("worker_sys_exit.py", "worker-exit"), ("getitem_none.py", "collate-error")],
)
def test_stock_torchs_own_log_names_the_cause(script: str, cause: str) -> None:
    # The real run, with stock torch: its wording is what users paste.
    result = run_python([str(FIXTURES / "stock" / script)], timeout=60)
    assert result.returncode == 1, result.stderr
    assert top(result.stderr)[:1] == [cause]


def test_the_corpus_is_above_the_floor() -> None:
    spec = importlib.util.spec_from_file_location("explain_accuracy", ACCURACY_SCRIPT)
    assert spec is not None and spec.loader is not None
    accuracy = importlib.util.module_from_spec(spec)
    sys.modules["explain_accuracy"] = accuracy  # dataclasses look their module up by name
    spec.loader.exec_module(accuracy)
    rates = accuracy.rates(accuracy.score_corpus())
    assert rates["top1"] >= TOP1_FLOOR, rates
    assert rates["top3"] >= rates["top1"]
    assert rates["controls"] == 1.0, rates
