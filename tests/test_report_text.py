from __future__ import annotations

from loaderdoctor.forensics import Diagnosis
from loaderdoctor.report.text import crashing_thread_first, format_death_headline, format_verdict


def make_diagnosis(**overrides) -> Diagnosis:
    values = dict(
        cause="oom-killed",
        title="The kernel OOM killer killed the worker",
        confidence=0.98,
        worker_id=1,
        pid=4242,
        signal="SIGKILL",
        exit_code=None,
        indices=[37],
        evidence=["the kernel log names this pid as killed by the OOM killer"],
        fixes=["Lower num_workers."],
        sample_file="/data/img_037.jpg",
        batch=9,
        epoch=0,
        alternatives=[("killed-by-signal", 0.2)],
        docs="docs/causes/oom-killed.md",
    )
    values.update(overrides)
    return Diagnosis(**values)


def test_verdict_text() -> None:
    assert format_verdict(make_diagnosis()) == (
        "loaderdoctor verdict: The kernel OOM killer killed the worker [oom-killed, confidence 0.98]\n"
        "  worker 1 (pid 4242), sample 37 (/data/img_037.jpg), batch 9\n"
        "  evidence:\n"
        "    - the kernel log names this pid as killed by the OOM killer\n"
        "  fix:\n"
        "    - Lower num_workers.\n"
        "  more: loaderdoctor explain --cause oom-killed"
    )


def test_verdict_lists_likely_alternatives_and_the_stack() -> None:
    text = format_verdict(
        make_diagnosis(
            alternatives=[("oom-killed", 0.4)],
            python_stack='Thread 0x1 (most recent call first):\n  File "a.py", line 1 in run\n\n'
            'Current thread 0x2 (most recent call first):\n  File "ds.py", line 9 in __getitem__',
        )
    )
    assert "  also possible: oom-killed (0.40)" in text
    stack = text.split("Python stack of the worker:\n", 1)[1]
    assert stack.index("Current thread") < stack.index("Thread 0x1")


def test_headlines_keep_torch_wording() -> None:
    # torch's own first line, word for word; the verdict follows on the next lines
    assert format_death_headline(make_diagnosis()) == (
        "DataLoader worker (pid 4242) is killed by signal: Killed. "
    )
    bus = make_diagnosis(signal="SIGBUS", cause="shm-exhausted", title="Shm")
    assert format_death_headline(bus) == (
        "DataLoader worker (pid 4242) is killed by signal: Bus error. It is possible that "
        "dataloader's workers are out of shared memory. Please try to raise your shared memory "
        "limit."
    )
    exited = make_diagnosis(signal=None, exit_code=3, cause="worker-exit", title="Exited")
    assert format_death_headline(exited) == (
        "DataLoader worker (pid 4242) exited unexpectedly with exit code 3. Details are lost due "
        "to multiprocessing. Rerunning with num_workers=0 may give better error trace."
    )
    hang = make_diagnosis(signal=None, cause="worker-hang", title="Stuck")
    assert format_death_headline(hang) == (
        "DataLoader worker 1 (pid 4242) made no progress and was killed. Stuck."
    )


def test_crashing_thread_first_keeps_the_fatal_header_on_top() -> None:
    dump = "Fatal Python error: Segmentation fault\n\nThread 0x1:\n  a\n\nCurrent thread 0x2:\n  b"
    assert crashing_thread_first(dump) == (
        "Fatal Python error: Segmentation fault\n\nCurrent thread 0x2:\n  b\n\nThread 0x1:\n  a"
    )
