"""The structure reader of ``loaderdoctor explain`` (forensics/paste.py), and the shapes of paste
it exists for: each answered as the thread behind it was resolved."""

from __future__ import annotations

import json

import pytest

from loaderdoctor.forensics.explain import WORDS, explain_text
from loaderdoctor.forensics.paste import Line, rebuild
from loaderdoctor.report.explain import format_json, format_text


def rebuilt(text: str) -> list[tuple[int, str, str]]:
    return [(line.number, line.text, line.process) for line in rebuild(text.splitlines(), WORDS)]


def top(text: str) -> list[str]:
    return [guess.cause for guess in explain_text(text).causes]


# The reader, one reshaping at a time.


def test_a_word_the_terminal_wrapped_is_rejoined_on_one_line_and_over_two() -> None:
    padded = (
        "RuntimeError: DataLoader worker (pid 31) is killed by signal: Segment      ation fault."
    )
    assert rebuilt(padded) == [
        (1, "RuntimeError: DataLoader worker (pid 31) is killed by signal: Segmentation fault.", "")
    ]
    assert rebuilt("killed by signal: Segment\nation fault.\nepoch 2") == [
        (1, "killed by signal: Segmentation fault.", ""),
        (3, "epoch 2", ""),
    ]
    # Only into a word the rules know: two words that merely sit apart stay apart.
    assert rebuilt("step      loss\nthe end\nof it") == [
        (1, "step      loss", ""),
        (2, "the end", ""),
        (3, "of it", ""),
    ]


def test_a_split_error_head_waits_for_its_tail_past_another_processes_lines() -> None:
    assert rebuilt(
        "ValueError\n"
        "epoch 3 step 10 loss 0.2\n"
        ": Caught ValueError in DataLoader worker process 2.\n"
        "Original Traceback (most recent call last):"
    ) == [
        (2, "epoch 3 step 10 loss 0.2", ""),
        (1, "ValueError: Caught ValueError in DataLoader worker process 2.", ""),
        (4, "Original Traceback (most recent call last):", ""),
    ]
    assert rebuilt("ValueError: Caught ValueError in DataLoader worker process\nlr 0.1\n: 0.") == [
        (2, "lr 0.1", ""),
        (1, "ValueError: Caught ValueError in DataLoader worker process 0.", ""),
    ]
    # No tail within a few lines: the head stays where it was.
    assert [text for _, text, _ in rebuilt("ValueError\na\nb\nc\nd")] == [
        "ValueError",
        "a",
        "b",
        "c",
        "d",
    ]


def test_launcher_prefixes_name_the_process() -> None:
    assert rebuilt(
        "[rank1]: Traceback (most recent call last):\n"
        "[1,0]<stderr>: epoch 1\n"
        "(RayTrainWorker pid=4242) loss 0.3\n"
        "trainer/0 [2]: done"
    ) == [
        (1, "[rank1]: Traceback (most recent call last):", "1"),
        (2, "[1,0]<stderr>: epoch 1", "1,0"),
        (3, "(RayTrainWorker pid=4242) loss 0.3", "4242"),
        (4, "trainer/0 [2]: done", "trainer/0"),
    ]


def test_a_traceback_pasted_as_an_escaped_string_is_unfolded() -> None:
    escaped = (
        '\'Traceback (most recent call last):\\r\\n  File "C:\\\\new\\\\nets\\\\t.py", '
        "line 1, in <module>\\r\\nRuntimeError: boom'"
    )
    assert rebuilt(escaped) == [
        (1, "Traceback (most recent call last):", ""),
        (1, '  File "C:\\new\\nets\\t.py", line 1, in <module>', ""),
        (1, "RuntimeError: boom", ""),
    ]
    # A Windows path's `\n` alone is no escaped newline.
    path = '  File "C:\\new\\nets\\train.py", line 4, in <module>'
    assert rebuilt(path) == [(1, path, "")]


def test_typographic_quotes_become_pythons() -> None:
    assert rebuilt("AttributeError: Can’t pickle local object ‘f.<locals>.g’") == [
        (1, "AttributeError: Can't pickle local object 'f.<locals>.g'", "")
    ]


def test_ctrl_c_on_its_own_line_marks_the_traceback_after_it() -> None:
    assert rebuilt("200/423 loss 0.3\n^C\nTraceback (most recent call last):") == [
        (1, "200/423 loss 0.3", ""),
        (3, "^CTraceback (most recent call last):", ""),
    ]


def test_two_children_printing_one_traceback_in_step_read_as_one() -> None:
    assert rebuilt(
        "Traceback (most recent call last):\n"
        "Traceback (most recent call last):\n"
        '  File "<string>", line 1, in <module>\n'
        '  File "<string>", line 1, in <module>\n'
        "epoch 1\n"
        "epoch 1"
    ) == [
        (1, "Traceback (most recent call last):", ""),
        (3, '  File "<string>", line 1, in <module>', ""),
        (5, "epoch 1", ""),
        (6, "epoch 1", ""),  # a log line printed twice is two events
    ]


PY_SPY = """\
Thread 918233 (idle): "MainThread"
    wait (threading.py:359)
    get (queue.py:180)
    _try_get_data (torch/utils/data/dataloader.py:1310)
        Arguments:
            self: <_MultiProcessingDataLoaderIter at 0x7f3e>
    main (train.py:40)
loss 0.2"""

GDB = """\
#3 Frame 0x7f29b9fec850, for file /opt/lib/python3.8/multiprocessing/queues.py, line 107, in get (self=<Queue at remote 0x7f29>, block=True)
    if not self._poll(timeout):
#7 Frame 0x7f29b9fed0a0, for file /opt/lib/python3.8/site-packages/torch/utils/data/dataloader.py, line 1011, in _try_get_data (self=<...>)
    data = self._data_queue.get(timeout=timeout)
(gdb) """

FAULTHANDLER = """\
Fatal Python error: Segmentation fault

Current thread 0x00007f0112b4f740 (most recent call first):
  File "/home/u/ds.py", line 12 in __getitem__
  File "/venv/torch/utils/data/_utils/fetch.py", line 51 in fetch
"""


@pytest.mark.parametrize(
    ("dump", "expected"),
    [
        (
            PY_SPY,
            [
                (1, 'Stack dump of "MainThread" (most recent call last):', ""),
                (7, '  File "train.py", line 40, in main', ""),
                (4, '  File "torch/utils/data/dataloader.py", line 1310, in _try_get_data', ""),
                (3, '  File "queue.py", line 180, in get', ""),
                (2, '  File "threading.py", line 359, in wait', ""),
                (8, "loss 0.2", ""),
            ],
        ),
        (
            GDB,
            [
                (1, "Stack dump (most recent call last):", ""),
                (
                    3,
                    '  File "/opt/lib/python3.8/site-packages/torch/utils/data/dataloader.py", '
                    "line 1011, in _try_get_data",
                    "",
                ),
                (3, "    data = self._data_queue.get(timeout=timeout)", ""),
                (1, '  File "/opt/lib/python3.8/multiprocessing/queues.py", line 107, in get', ""),
                (1, "    if not self._poll(timeout):", ""),
                (5, "(gdb) ", ""),
            ],
        ),
        (
            FAULTHANDLER,
            [
                (1, "Fatal Python error: Segmentation fault", ""),
                (2, "", ""),
                (3, "Stack dump (most recent call last):", ""),
                (5, '  File "/venv/torch/utils/data/_utils/fetch.py", line 51, in fetch', ""),
                (4, '  File "/home/u/ds.py", line 12, in __getitem__', ""),
            ],
        ),
    ],
    ids=["py-spy", "gdb", "faulthandler"],
)
def test_a_tools_stack_becomes_a_stack_dump_outermost_first(
    dump: str, expected: list[tuple[int, str, str]]
) -> None:
    assert rebuilt(dump) == expected


def test_a_kubectl_record_becomes_one_line() -> None:
    assert rebuilt(
        "    State:          Terminated\n"
        "      Reason:       Error\n"
        "      Exit Code:    137\n"
        "      Started:      Mon, 27 Mar 2023 01:53:04 +0100\n"
        "    Ready:          False"
    ) == [
        (1, "container terminated (Reason Error, Exit Code 137)", ""),
        (5, "    Ready:          False", ""),
    ]


def test_the_reader_streams_and_counts_the_pastes_lines() -> None:
    lines = iter(["a", "b"])
    first = next(rebuild(lines, WORDS))
    assert first == Line(1, "a")  # handed on before the paste ends
    assert explain_text("a\nb\n\nc").lines_read == 4


# The shapes, read through to an answer.


def test_a_split_and_interleaved_caught_line_is_the_workers_error() -> None:
    paste = (
        "ValueError\n"
        "Epoch 12 step 1201 loss 0.0187\n"
        ": Caught ValueError in DataLoader worker process 0.\n"
        "Original Traceback (most recent call last):\n"
        '  File "/venv/torch/utils/data/_utils/worker.py", line 308, in _worker_loop\n'
        "    data = fetcher.fetch(index)\n"
        '  File "/home/sj/pcn/dataset.py", line 40, in __getitem__\n'
        "    partial = resample(partial, self.num_input)\n"
        "ValueError: Range cannot be empty (low >= high) unless no samples are taken\n"
    )
    assert top(paste) == ["sample-error"]


def test_a_segfault_the_terminal_wrapped_is_a_native_crash() -> None:
    paste = "RuntimeError: DataLoader worker (pid 28041) is killed by signal: Segment          ation fault."
    assert top(paste) == ["native-crash"]


def test_openblas_out_of_threads_is_the_process_limit_without_a_torch_line() -> None:
    paste = (
        "OpenBLAS blas_thread_init: pthread_create failed for thread 41 of 64: Resource "
        "temporarily unavailable\n"
        "OpenBLAS blas_thread_init: RLIMIT_NPROC 4096 current, 510211 max\n"
        "RuntimeError: One or more background workers are no longer alive. Exiting. Please check "
        "the print statements above for the actual error message\n"
    )
    explanation = explain_text(paste)
    assert [(g.cause, g.likelihood) for g in explanation.causes] == [("process-limit", 0.85)]
    # OpenMP's and bash's words for the same limit.
    assert top("libgomp: Thread creation failed: Resource temporarily unavailable") == [
        "process-limit"
    ]
    assert top("bash: fork: retry: Resource temporarily unavailable") == ["process-limit"]


def test_a_py_spy_dump_waiting_in_the_loaders_get_is_a_hang() -> None:
    explanation = explain_text("$ py-spy dump --pid 918233\n" + PY_SPY)
    assert [(g.cause, g.likelihood) for g in explanation.causes] == [("worker-hang", 0.75)]
    assert explanation.partial is None  # a live stack is whole: no error line is missing
    assert explain_text(GDB).causes[0].cause == "worker-hang"


def test_a_crash_traceback_through_the_same_frames_is_no_live_stack() -> None:
    cut = PY_SPY.replace('Thread 918233 (idle): "MainThread"', "x").splitlines()[1:5]
    assert top("\n".join(cut)) == []  # frames that no traceback or tool frames are just text


def test_a_ctrl_c_cut_in_the_wait_after_200_iterations_is_a_hang() -> None:
    paste = (
        "12/300  5.21G  1.203  1.586: 47%|####7  | 200/423 [01:42<01:53, 1.97it/s]\n"
        "^C\n"
        "Traceback (most recent call last):\n"
        '  File "/mnt/u/ultralytics/yolo/engine/trainer.py", line 291, in _do_train\n'
        "    for i, batch in pbar:\n"
        '  File "/venv/torch/utils/data/dataloader.py", line 1133, in _try_get_data\n'
        "    data = self._data_queue.get(timeout=timeout)\n"
    )
    explanation = explain_text(paste)
    assert [(g.cause, g.likelihood) for g in explanation.causes] == [("worker-hang", 0.7)]


def test_a_cut_windows_paste_of_a_child_rerunning_the_script_is_no_main_guard() -> None:
    paste = (
        "Traceback (most recent call last):\n"
        '  File "<string>", line 1, in <module>\n'
        '  File "D:\\py\\lib\\multiprocessing\\spawn.py", line 125, in _main\n'
        "    prepare(preparation_data)\n"
        '  File "D:\\py\\lib\\multiprocessing\\spawn.py", line 236, in prepare\n'
        "    _fixup_main_from_path(data['init_main_from_path'])\n"
        '  File "D:\\py\\lib\\runpy.py", line 87, in _run_code\n'
        "    exec(code, run_globals)\n"
        '  File "E:\\yolo\\temp.py", line 8, in <module>\n'
        '    results = model.train(data="coco8.yaml", epochs=100)\n'
        '  File "D:\\py\\lib\\site-packages\\ultralytics\\engine\\trainer.py", line 363, in _do_train\n'
        "    for i, batch in pbar:\n"
    )
    assert top(paste) == ["main-guard-missing"]
    # The child only importing the script's modules is no sign.
    importing = paste.replace('results = model.train(data="coco8.yaml", epochs=100)', "import cv2")
    assert "main-guard-missing" not in top(importing)


WORKERS_WARNING = (
    "/venv/torch/utils/data/dataloader.py:557: UserWarning: This DataLoader will create 40 worker "
    "processes in total. Our suggested max number of worker in current system is 8, which is "
    "smaller than what this DataLoader is going to create. Please be aware that excessive worker "
    "creation might get DataLoader running slow or even freeze, lower the worker number to avoid "
    "potential slowness/freeze if necessary.\n"
    "  warnings.warn(_create_warning_msg(\n"
)


def test_a_gpu_error_outranks_torchs_worker_warning() -> None:
    paste = WORKERS_WARNING + (
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 23.64 GiB of which 1.12 GiB is free.\n"
    )
    explanation = explain_text(paste)
    assert explanation.causes == []
    assert [other.kind for other in explanation.elsewhere] == ["cuda-oom"]


def test_a_run_that_only_warned_did_not_fail() -> None:
    paste = WORKERS_WARNING + "Epoch 1/10: 100%|##########| 412/412 [03:11<00:00, loss=0.81]\n"
    explanation = explain_text(paste)
    assert explanation.causes == [] and explanation.elsewhere == []
    # Beside a report of a stop, the warning supports the hang.
    hang = explain_text(WORKERS_WARNING + "The run froze for me shortly after.\n")
    assert [(g.cause, g.likelihood) for g in hang.causes] == [
        ("worker-hang", 0.72),
        ("batch-lost", 0.2),
    ]


def test_a_bare_exit_code_1_lists_its_candidates_and_the_check_that_decides() -> None:
    explanation = explain_text(
        "RuntimeError: DataLoader worker (pid 7948) exited unexpectedly with exit code 1."
    )
    assert explanation.undecided
    assert [(g.cause, g.likelihood) for g in explanation.causes] == [
        ("worker-exit", 0.55),
        ("shm-exhausted", 0.3),
        ("unpicklable", 0.15),
        ("main-guard-missing", 0.1),
    ]
    assert format_text(explanation).splitlines()[:6] == [
        "loaderdoctor explain: undecided: the log supports 3 causes, none at 60% or more; how "
        "likely each is from the message alone, and how to tell:",
        "  worker-exit (55%): `grep -B 30 'exited unexpectedly' YOUR_LOG` shows the worker's own "
        "error or exit message, printed above torch's line",
        "  shm-exhausted (30%): `df -h /dev/shm` shows a Size of 64M, or Use% near 100% while it "
        "runs",
        "  unpicklable (15%): `loaderdoctor lint your_script.py` shows a lambda or local function "
        "handed over",
        "  decide first with: $ grep -B 30 'exited unexpectedly' YOUR_LOG   (the most likely first)",
        "ranked, from the message alone:",
    ]
    data = json.loads(format_json(explanation))
    assert (data["undecided"], data["deciding_check"]) == (
        True,
        "grep -B 30 'exited unexpectedly' YOUR_LOG",
    )


def test_two_ranks_interleaved_are_read_apart() -> None:
    paste = (
        "[rank0]: Traceback (most recent call last):\n"
        "[rank1]: Traceback (most recent call last):\n"
        '[rank0]:   File "/venv/torch/utils/data/_utils/worker.py", line 308, in _worker_loop\n'
        '[rank1]:   File "/home/u/train.py", line 40, in main\n'
        '[rank0]:   File "/home/u/data.py", line 12, in __getitem__\n'
        "[rank1]:     for batch in loader:\n"
        "[rank0]: KeyError: 'label'\n"
        "[rank1]: RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed.\n"
    )
    assert top(paste) == ["sample-error", "oom-killed", "killed-by-signal"]
