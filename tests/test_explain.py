"""``loaderdoctor explain``: causes from the message alone, table rows as data."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import run_python
from loaderdoctor.forensics import CAUSES
from loaderdoctor.forensics.elsewhere import ELSEWHERE
from loaderdoctor.forensics.explain import explain_lines, explain_text
from loaderdoctor.forensics.log_messages import MAX_LINE, read_log_lines
from loaderdoctor.forensics.symptoms import (
    CHILD_RUNS_SCRIPT,
    CTRL_C,
    FRAME_TAGS,
    PAGING_TEXTS,
    PRIORS,
    STALLED,
    SYMPTOMS,
    TELLS,
)
from loaderdoctor.report.explain import format_json, format_text

KILLED = "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed."
BUS = (
    "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient "
    "shared memory (shm).\nRuntimeError: DataLoader worker (pid(s) 31337) exited unexpectedly"
)
BARE_EXIT = "RuntimeError: DataLoader worker (pid(s) 4242) exited unexpectedly"
BOOTSTRAPPING = """\
RuntimeError:
        An attempt has been made to start a new process before the
        current process has finished its bootstrapping phase.

        This probably means that you are not using fork to start your
        child processes and you have forgotten to use the proper idiom
        in the main module:

            if __name__ == '__main__':
                freeze_support()
                ...
"""
SPAWN_UNPICKLE = """\
Traceback (most recent call last):
  File "<string>", line 1, in <module>
  File "C:\\Python311\\Lib\\multiprocessing\\spawn.py", line 120, in spawn_main
    exitcode = _main(fd, parent_sentinel)
  File "C:\\Python311\\Lib\\multiprocessing\\spawn.py", line 130, in _main
    self = reduction.pickle.load(from_parent)
AttributeError: 'SegDataset' object has no attribute '_collate_fn'
"""
CORPUS = Path(__file__).parent / "fixtures" / "explain" / "corpus"
PLATFORM_LOGS = Path(__file__).parent / "fixtures" / "explain"


def top(text: str) -> list[str]:
    return [guess.cause for guess in explain_text(text).causes]


def test_killed_points_at_oom_first_then_an_external_kill() -> None:
    assert top(KILLED) == ["oom-killed", "killed-by-signal"]
    guess = explain_text(KILLED).causes[0]
    assert guess.checks[0] == "dmesg -T | grep -i -E 'killed process|out of memory'"
    assert guess.checks[-1].startswith("Rerun it under `loaderdoctor run -- COMMAND`")


def test_bus_error_and_exited_unexpectedly_is_shm() -> None:
    guess = explain_text(BUS).causes[0]
    assert guess.cause == "shm-exhausted"
    assert guess.checks[0] == "df -h /dev/shm"
    assert [line.line_number for line in guess.lines] == [1, 2]


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        ("OSError: [Errno 24] Too many open files", "fd-exhausted"),
        (
            "RuntimeError: DataLoader worker (pid 7) is killed by signal: Segmentation fault.",
            "native-crash",
        ),
        ("ValueError: Caught ValueError in DataLoader worker process 0.", "sample-error"),
        (
            "RuntimeError: stack expects each tensor to be equal size, but got [3] at entry 0",
            "collate-error",
        ),
        ("RuntimeError: DataLoader timed out after 60 seconds", "worker-hang"),
        ("RuntimeError: Cannot re-initialize CUDA in forked subprocess.", "cuda-in-worker"),
        (
            "RuntimeError: unable to allocate shared memory(shm) for file </torch_1_2>",
            "shm-exhausted",
        ),
        (BOOTSTRAPPING, "main-guard-missing"),
    ],
)
def test_one_line_symptoms(text: str, cause: str) -> None:
    assert top(text)[0] == cause


# The shapes users paste most, each named top-1.
@pytest.mark.parametrize(
    ("text", "cause"),
    [
        ("AttributeError: Can't get local object 'main.<locals>.worker_init_fn'", "unpicklable"),
        ("AttributeError: Can't pickle local object 'main.<locals>.worker_init_fn'", "unpicklable"),
        (
            "_pickle.PicklingError: Can't pickle local object <function main.<locals>.f at 0x7f>\n"
            "when serializing dict item '_worker_init_fn'",
            "unpicklable",
        ),
        ("RuntimeError: CUDA error: initialization error", "cuda-in-worker"),
        (
            "RuntimeError: cuda runtime error (3) : initialization error at THCGeneral.cpp:50",
            "cuda-in-worker",
        ),
        (SPAWN_UNPICKLE, "unpicklable"),
        ("OSError: image file is truncated (7 bytes not processed)", "sample-error"),
        (
            "PIL.UnidentifiedImageError: cannot identify image file '/data/train/cat_0042.jpg'",
            "sample-error",
        ),
        (
            "PIL.Image.DecompressionBombError: Image size (213633600 pixels) exceeds limit of "
            "178956970 pixels, could be decompression bomb DOS attack.",
            "sample-error",
        ),
        ("training is stuck at the first epoch", "worker-hang"),
        ("it hangs with no error", "worker-hang"),
        ("The DataLoader just stops. No other message.", "worker-hang"),
        ("ImportError: DLL load failed: 页面文件太小，无法完成操作。", "paging-file-too-small"),
        (
            '  File "/usr/lib/python3.10/multiprocessing/synchronize.py", line 57, in __init__\n'
            "    sl = self._semlock = _multiprocessing.SemLock(\n"
            "OSError: [Errno 28] No space left on device",
            "shm-exhausted",
        ),
    ],
)
def test_issue_25_shapes_are_named_first(text: str, cause: str) -> None:
    assert top(text)[0] == cause


def test_spawn_unpickling_error_is_not_a_collate_error() -> None:
    # collate_fn is only part of an attribute's name: no collate-error at all.
    assert top(SPAWN_UNPICKLE) == ["unpicklable"]
    line = explain_text(SPAWN_UNPICKLE).causes[0].lines[0]
    assert (line.line_number, line.symptom) == (7, "spawn-unpickle")


@pytest.mark.parametrize(
    "text",
    [
        # Words of a pattern in a path, an attribute name, a variable or a file name.
        'Traceback (most recent call last):\n  File "/home/u/collate_fn/sigbus_oom_killed.py", '
        "line 3, in <module>\n    import yaml\nModuleNotFoundError: No module named 'yaml'",
        "AttributeError: 'Config' object has no attribute 'collate_fn'",
        "KeyError: 'worker_init_fn'",
        "saved checkpoint to /runs/oom-killed-retry/Killed/segmentation fault/ckpt.pt",
        "loading /data/shm_exhausted/Bus error/too_many_open_files.json",
        "    batch = default_collate(samples)  # stack expects each tensor to be equal size",
        "epoch 3 step 1200 loss 0.0042 lr 3e-4",
        "INFO: validation finished, no error",
        "`Trainer.fit` stopped: `max_epochs=10` reached.",
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    ],
)
def test_no_cause_from_a_substring_alone(text: str) -> None:
    assert top(text) == []


def test_one_message_counts_once() -> None:
    # Seven lines of one message (two of them match its pattern) weigh what one line weighs,
    # and eight workers printing the same traceback weigh what one does.
    assert [(g.cause, g.likelihood) for g in explain_text(BOOTSTRAPPING).causes] == [
        ("main-guard-missing", 0.95)
    ]
    once = explain_text(SPAWN_UNPICKLE).causes
    eight = explain_text(SPAWN_UNPICKLE * 8).causes
    assert [(g.cause, g.likelihood) for g in eight] == [(g.cause, g.likelihood) for g in once]
    assert eight[0].lines_matched == 8


def test_a_bare_exit_is_ambiguous_and_says_how_to_decide() -> None:
    explanation = explain_text(BARE_EXIT)
    assert [tie.cause for tie in explanation.ambiguous] == [
        "oom-killed",
        "shm-exhausted",
        "native-crash",
    ]
    assert explanation.deciding_check == "dmesg -T | grep -i -E 'killed process|out of memory'"
    assert format_text(explanation).splitlines()[:6] == [
        "loaderdoctor explain: ambiguous: these 3 causes fit the log equally well; here is how "
        "to tell them apart:",
        "  oom-killed: `dmesg -T | grep -i -E 'killed process|out of memory'` shows a 'Killed "
        "process' line naming a worker's pid",
        "  shm-exhausted: `df -h /dev/shm` shows a Size of 64M, or Use% near 100% while it runs",
        "  native-crash: `python -X faulthandler your_script.py` shows (with num_workers=0) "
        "'Fatal Python error: Segmentation fault' and the crash's stack",
        "  decide first with: $ dmesg -T | grep -i -E 'killed process|out of memory'   "
        "(oom-killed is the most common cause of this message in public reports)",
        "ranked, from the message alone:",
    ]


def test_ties_are_broken_by_the_prior_not_the_alphabet() -> None:
    ranked = [g.cause for g in explain_text(BARE_EXIT).causes]
    assert ranked == sorted(ranked, key=lambda cause: -PRIORS[cause])
    assert ranked[:3] != sorted(ranked[:3])


def test_a_tiny_pid_points_at_a_containers_shm() -> None:
    explanation = explain_text("RuntimeError: DataLoader worker (pid(s) 25) exited unexpectedly")
    assert [(g.cause, g.likelihood) for g in explanation.causes[:2]] == [
        ("shm-exhausted", 0.577),
        ("oom-killed", 0.35),
    ]
    # First, but below what decides: the answer lists the candidates and checks shm first.
    assert explanation.undecided
    assert explanation.deciding_check == "df -h /dev/shm"
    notes = [line.symptom for line in explanation.causes[0].lines]
    assert notes == ["exited-unexpectedly", "container-pid"]
    # A host's pid is no evidence.
    assert explain_text(BARE_EXIT).causes[1].likelihood == 0.35


def test_advice_names_the_users_script() -> None:
    log = (
        "Traceback (most recent call last):\n"
        '  File "/home/kim/vit/finetune_vit.py", line 88, in <module>\n'
        "    for images, labels in loader:\n"
        '  File "/opt/venv/lib/python3.12/site-packages/torch/utils/data/dataloader.py", line 1,'
        " in __next__\n"
        "    data = self._next_data()\n"
        "AttributeError: Can't pickle local object 'main.<locals>.<lambda>'\n"
    )
    explanation = explain_text(log)
    assert explanation.script == "finetune_vit.py"
    assert explanation.causes[0].checks[0] == "loaderdoctor lint finetune_vit.py"
    assert "train.py" not in format_text(explanation)


def test_json_lists_the_matched_lines_per_cause() -> None:
    data = json.loads(format_json(explain_text(BUS)))
    assert data["causes"][0]["cause"] == "shm-exhausted"
    assert [(m["line_number"], m["symptom"]) for m in data["causes"][0]["lines"]] == [
        (1, "shm-bus-error"),
        (2, "exited-unexpectedly"),
    ]
    assert data["lines_read"] == 2
    assert data["ambiguous"] == []


def test_every_row_names_catalog_causes_and_compiles() -> None:
    tags = {tag.tag for tag in FRAME_TAGS} | {CTRL_C, STALLED, CHILD_RUNS_SCRIPT}
    for symptom in SYMPTOMS:
        re.compile(symptom.pattern)
        assert symptom.causes and all(cause in CAUSES for cause, _ in symptom.causes), symptom.id
        assert symptom.where in {"error", "text", "cut", "stack"}, symptom.id
        assert symptom.where != "stack" or symptom.needs, symptom.id
        assert not symptom.needs or symptom.needs in tags, symptom.id
        # A text row names the words that let the per-line filter keep its lines.
        assert (symptom.where == "text") == bool(symptom.words), symptom.id
    assert set(TELLS) <= set(CAUSES) and set(PRIORS) == set(CAUSES)


def instantiate(symptom: str) -> str:
    return re.sub(r"\bN\b", "4242", symptom).replace("<Exception>", "ValueError")


def test_every_catalog_symptom_is_recognised() -> None:
    for cause in CAUSES.values():
        if cause.id == "internal-error":  # its symptom describes a traceback, it is not one
            continue
        named_first = False
        for text in cause.symptoms:
            causes = top(instantiate(text))
            assert cause.id in causes, (cause.id, text, causes)
            named_first = named_first or causes[0] == cause.id
        assert named_first, cause.id


@pytest.mark.parametrize("text", PAGING_TEXTS)
def test_paging_file_in_every_windows_language(text: str) -> None:
    assert top(f"ImportError: DLL load failed: {text}") == ["paging-file-too-small"]


def test_nothing_matched() -> None:
    assert explain_text("all is well\nloss 0.1").causes == []
    assert format_text(explain_text("ok\nfine")).splitlines() == [
        "loaderdoctor explain: no known DataLoader failure in these 2 lines.",
        "  Rerun the command under `loaderdoctor run -- COMMAND` to catch the next failure.",
    ]


def _corpus() -> list[tuple[str, dict[str, str], str]]:
    cases = []
    for path in sorted(CORPUS.glob("*.log")):
        head, body = path.read_text(encoding="utf-8").split("# ---\n", 1)
        meta = dict(line[2:].split(": ", 1) for line in head.splitlines())
        cases.append((path.stem, meta, body))
    return cases


@pytest.mark.parametrize(("name", "meta", "body"), _corpus(), ids=[c[0] for c in _corpus()])
def test_corpus_case_is_named_first(name: str, meta: dict[str, str], body: str) -> None:
    explanation = explain_text(body)
    if meta["cause"] == "none":  # a control: no DataLoader cause, and what failed instead
        assert top(body) == []
        named = [other.kind for other in explanation.elsewhere][:1] or ["nothing"]
        assert named == [meta["control"]]
    elif meta.get("undecided") == "yes":  # a log that cannot decide: the cause is a candidate
        assert explanation.undecided
        assert meta["cause"] in [tie.cause for tie in explanation.ambiguous]
    else:
        assert top(body)[:1] == [meta["cause"]]
    # The per-line filter only skips lines no row could match.
    unfiltered = explain_lines(body.splitlines(), prefilter=False)
    assert top(body) == [g.cause for g in unfiltered.causes]
    assert explanation.elsewhere == unfiltered.elsewhere


def test_corpus_covers_the_shapes_users_paste() -> None:
    cases = _corpus()
    assert len(cases) >= 148
    kinds = {other.id for other in ELSEWHERE} | {"nothing"}
    for name, meta, body in cases:
        source = meta["source"]
        assert source.startswith(("https://github.com/", "stock torch ")), name
        assert meta["cause"] in CAUSES or meta["control"] in kinds, name
        assert meta["established"] and meta["held-out"] in {"yes", "no"}
        assert len(body.splitlines()) <= 20, name  # a shape, not a copied log
    assert sum(meta["cause"] == "none" for _, meta, _ in cases) >= 8
    assert sum(not body.isascii() for _, _, body in cases) >= 4  # system messages not in English
    platforms = {meta["platform"].split("-")[0] for _, meta, _ in cases}
    assert {"linux", "windows", "macos", "colab", "slurm", "lsf", "k8s"} <= platforms
    assert sum("container" in meta["platform"] for _, meta, _ in cases) >= 5
    versions = {meta["python"] for _, meta, _ in cases}
    assert {"3.8", "3.9", "3.10", "3.11", "3.12", "3.13", "3.14"} <= versions
    assert (
        sum(meta["cause"] == "worker-hang" and "Traceback" not in body for _, meta, body in cases)
        >= 4
    )


@pytest.mark.parametrize(
    ("log", "causes"),
    [
        ("windows-paging-file.log", ["paging-file-too-small"]),
        ("windows-main-guard.log", ["main-guard-missing", "unpicklable"]),
        ("windows-lambda.log", ["unpicklable", "main-guard-missing"]),
        ("notebook-spawn.log", ["unpicklable"]),
        ("macos-too-many-open-files.log", ["fd-exhausted"]),
        ("macos-objc-fork.log", ["mps-in-worker"]),
        ("macos-mps-share.log", ["mps-in-worker"]),
    ],
)
def test_spawn_platform_logs_name_their_cause(log: str, causes: list[str]) -> None:
    # Logs shaped as Windows and macOS users post them; a cause that explains the worker's death
    # explains torch's `exited unexpectedly` away.
    assert top((PLATFORM_LOGS / log).read_text()) == causes


def test_notebook_classes_get_the_notebook_note() -> None:
    text = (PLATFORM_LOGS / "notebook-spawn.log").read_text()
    line = explain_text(text).causes[0].lines[0]
    assert (line.line_number, line.symptom) == (6, "notebook-main")
    assert (
        line.note
        == "A class or function defined in a notebook cell: spawned workers cannot import it."
    )


def test_reading_is_streaming_decoded_and_bounded() -> None:
    utf16 = ("\ufeff" + KILLED + "\r\n").encode("utf-16-le")  # PowerShell's `>`
    assert top("".join(read_log_lines(io.BytesIO(utf16)))) == ["oom-killed", "killed-by-signal"]
    endless = b"#" * (5 * MAX_LINE) + b"\nKilled\n"
    pieces = list(read_log_lines(io.BytesIO(endless)))
    assert max(len(piece) for piece in pieces) <= 2 * MAX_LINE
    assert pieces[-1] == "Killed\n"
    assert list(read_log_lines(io.BytesIO(b"bad \xff byte\n"))) == ["bad \ufffd byte\n"]


def _log(lines: int) -> Iterator[str]:
    for step in range(lines):
        if step % 1000 == 999:
            yield f"RuntimeError: DataLoader worker (pid {step}) is killed by signal: Killed.\n"
        else:
            yield f"epoch {step // 10000} step {step:>8} loss {1 / (1 + step):.6f} lr 3e-4\n"


def _peak_bytes(lines: int) -> int:
    tracemalloc.start()
    try:
        explanation = explain_lines(_log(lines))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert explanation.lines_read == lines
    assert explanation.causes[0].lines_matched == lines // 1000
    return peak


def test_memory_does_not_grow_with_the_log() -> None:
    # 25,000 and 200,000 lines (about 1.5 and 12 MB): the peak is that of the bounded state
    # (one message, the first 20 matched lines per cause), not of the log. A log kept whole, or
    # a byte per line kept, would exceed them; more lines prove no more, and tracemalloc
    # makes each one slow.
    small, large = _peak_bytes(25_000), _peak_bytes(200_000)
    assert large < small + 64 * 1024, (small, large)
    assert large < 1024 * 1024, large


@pytest.mark.slow
def test_cli_file_stdin_and_exit_status(tmp_path) -> None:
    log = tmp_path / "train.log"
    log.write_text(f"epoch 3\n{KILLED}\n")
    result = run_python(["-m", "loaderdoctor", "explain", str(log)])
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1] == (
        "1. oom-killed (70%): The kernel OOM killer killed the worker"
    )
    assert "   line 2: " + KILLED in result.stdout.splitlines()
    piped = subprocess.run(
        [sys.executable, "-m", "loaderdoctor", "explain", "-", "--json"],
        input=BUS,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout)["causes"][0]["cause"] == "shm-exhausted"
    empty = tmp_path / "empty.log"
    empty.write_text("nothing here\n")
    assert run_python(["-m", "loaderdoctor", "explain", str(empty)]).returncode == 1
    missing = run_python(["-m", "loaderdoctor", "explain", str(tmp_path / "nope.log")])
    assert missing.returncode == 2
    assert (
        missing.stderr
        == f"loaderdoctor explain: error: cannot read {tmp_path / 'nope.log'}: No such file or directory\n"
    )
    helped = run_python(["-m", "loaderdoctor", "explain", "--help"]).stdout.splitlines()
    assert helped[helped.index("exit status:") + 1 :][:5] == [
        '  0  a cause was named (one, or several ranked; "ambiguous" or "undecided" when the log',
        "     cannot decide)",
        "  1  nothing found: no known DataLoader failure in the text",
        "  2  the log cannot be read (a missing file, a directory, closed standard input) or is",
        "     binary (a core dump, an archive), not a log",
    ]


def test_text_shows_a_line_once_with_the_note_of_each_row() -> None:
    text = format_text(
        explain_text("RuntimeError: DataLoader worker (pid(s) 25) exited unexpectedly")
    )
    assert text.splitlines()[7:11] == [
        "1. shm-exhausted (58%): /dev/shm is full",
        "   line 1: RuntimeError: DataLoader worker (pid(s) 25) exited unexpectedly",
        "     torch's catch-all: a worker is gone. The lines above it often say why; alone, it "
        "cannot.",
        "     A worker pid this small means a PID namespace: a container, whose /dev/shm is 64 MB "
        "unless --shm-size (or a memory-backed volume) says otherwise.",
    ]


@pytest.mark.parametrize(
    ("command", "script"),
    [
        ("$ python3 tools/finetune_seg.py --cfg seg.yaml", "finetune_seg.py"),
        ("!python train_vae.py --epochs 3", "train_vae.py"),
        ("torchrun --nproc_per_node 8 tools/train_net.py --cfg x.yaml", "train_net.py"),
    ],
)
def test_the_command_line_names_the_script(command: str, script: str) -> None:
    explanation = explain_text(f"{command}\n{KILLED.replace('Killed', 'Segmentation fault')}")
    assert explanation.script == script
    assert explanation.causes[0].checks[0] == (
        f"python -X faulthandler {script}   (prints the Python stack of the crash)"
    )
