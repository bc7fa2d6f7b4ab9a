"""Real training stacks, unchanged, under ``loaderdoctor run`` and ``run --heal``.

Each stack script (``stacks/``) trains a tiny model on 192 samples with the real library's own
loading code and writes a ledger of the samples its training loop received. A plan (``eco_plan``)
plants a fault in one sample: a Python exception, a worker SIGKILLed once, a real SIGSEGV. Under
``run`` a fault is a run of its own (the first one ends the job), one per stack (``RUN_FAULT``):
the verdict's cause, culprit and name must be exact, and the loop must never have received the culprit or a sample twice. Under
``run --heal`` the three faults share one run: three incidents, exact, and the ledger holds every
healthy sample exactly once.

The packages come from the ``eco`` extra (``pip install -e '.[dev,eco]'``); a stack whose package
is missing skips with the reason. timm needs torchvision, which has no wheel for the CPU torch
2.13.0 of CI: it runs under torch 2.14.1 (``LOADERDOCTOR_CI_TORCH=2.14.1``, see the README).
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import random
import sys
import tarfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conftest import run_python

pytestmark = [pytest.mark.slow, pytest.mark.ecosystem]
STACKS_DIR = Path(__file__).parent / "stacks"
SAMPLES = 192
# The planted culprits of map-style stacks: indices in different batches of 8.
RAISE, KILL, SEGV = 37, 101, 150
CAUSES = {"raise": "sample-error", "kill": "killed-by-signal", "segv": "native-crash"}


@dataclass
class Stack:
    """How to run one stack, and what its samples are called."""

    script: str
    needs: tuple[str, ...]
    args: Callable[[Path], list[str]] = lambda folder: []
    name: Callable[[Any, Path], str | None] = lambda sample, folder: None
    culprits: dict[str, Any] = field(
        default_factory=lambda: {"raise": RAISE, "kill": KILL, "segv": SEGV}
    )
    every: Callable[[], list[Any]] = lambda: list(range(SAMPLES))
    prepare: Callable[[Path, dict[str, Any]], None] = lambda folder, culprits: None
    # fault -> a line its verdict's evidence must hold (the root of a wrapped exception)
    evidence: dict[str, str] = field(default_factory=dict)
    # under heal, the samples that cannot arrive: the raised and the segfaulting culprits, and
    # for a stream whatever its generator cannot read past (said in the incident)
    lost: Callable[[dict[str, Any]], set[Any]] = lambda culprits: {
        culprits[fault] for fault in ("raise", "segv") if fault in culprits
    }
    # (mode, fault) -> the issue item that keeps that cell from passing today (strict xfail)
    known: dict[tuple[str, str], str] = field(default_factory=dict)
    # the dataset fetches a batch at once (its own __getitems__): a sample that killed its worker
    # once and loads fine alone cannot be told from its batch-mates, and is said to be one of them
    batched: bool = False
    # under heal: "healed-with-loss" where the stack loses healthy samples by design (a stream's
    # generator cannot be read past an item that raises), said in the report's status
    heal_status: str = "healed"
    # under heal, faults that kill every time on a stream: the item is re-tried once in a
    # respawned worker (one incident, "respawned"), then its worker's stream ends before it
    # (a second incident, "lost")
    retried: tuple[str, ...] = ()
    # the faults planted together in one heal run
    heal_groups: tuple[tuple[str, ...], ...] = (("raise", "kill", "segv"),)


def write_pngs(folder: Path, culprits: dict[str, Any]) -> None:
    from PIL import Image

    noise = random.Random(0)
    for i in range(SAMPLES):
        path = folder / f"{i:04d}.png"
        Image.frombytes("L", (64, 64), noise.randbytes(64 * 64)).save(path)
        if i == culprits["raise"]:  # cut inside its pixel data: "image file is truncated"
            path.write_bytes(path.read_bytes()[:-200])


def write_class_folders(folder: Path, culprits: dict[str, Any]) -> None:
    """timm's ImageDataset: one class folder per image, so that the target is the index."""
    from PIL import Image

    for i in range(SAMPLES):
        (folder / "images" / f"{i:04d}").mkdir(parents=True)
        Image.new("RGB", (8, 8), color=(i, i, i)).save(folder / "images" / f"{i:04d}" / "x.png")


SHARDS, PER_SHARD = 4, SAMPLES // 4


def wds_key(shard: int, item: int) -> str:
    return f"s{shard}-{item:04d}"


def write_shards(folder: Path, culprits: dict[str, Any]) -> None:
    for shard in range(SHARDS):
        with tarfile.open(folder / f"shard-{shard}.tar", "w") as tar:
            for item in range(PER_SHARD):
                key = wds_key(shard, item)
                payload = (
                    b"{not json"
                    if key == culprits["raise"]
                    else json.dumps({"value": item}).encode()
                )
                info = tarfile.TarInfo(f"{key}.json")
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))


FILES = lambda sample, folder: f"/data/files/{sample:04d}.bin"  # noqa: E731
STACKS = {
    "hf-trainer-torch": Stack(
        "hf_trainer.py",
        ("transformers", "accelerate", "torchdata"),
        args=lambda folder: ["torch"],
        name=lambda sample, folder: f"/data/tokens/{sample:04d}.bin",
    ),
    "hf-trainer-datasets": Stack(
        "hf_trainer.py",
        ("transformers", "accelerate", "torchdata", "datasets"),
        args=lambda folder: ["datasets"],
        batched=True,
    ),
    "torchdata-stateful": Stack(
        "torchdata_stateful.py",
        ("torchdata",),
        name=FILES,
    ),
    "monai": Stack(
        "monai_train.py",
        ("monai",),
        args=lambda folder: [str(folder)],
        name=lambda sample, folder: str(folder / f"{sample:04d}.png"),
        prepare=write_pngs,
        evidence={
            "raise": "root cause: OSError: image file is truncated (from struct.error: "
            "unpack_from requires a buffer of at least 4 bytes for unpacking 4 bytes at offset 0 "
            "(actual buffer size is 0))"
        },
    ),
    "webdataset": Stack(
        "webdataset_stream.py",
        ("webdataset",),
        args=lambda folder: [str(folder)],
        # one culprit per shard (worker); the segfault is its shard's last item, so that nothing
        # of its stream after it is lost by design (a generator cannot read past such an item)
        culprits={
            "raise": wds_key(0, 9),
            "kill": wds_key(1, 20),
            "segv": wds_key(2, PER_SHARD - 1),
        },
        # a generator ends when it raises: shard 0 from its item #9 on (the README's limit)
        lost=lambda culprits: {wds_key(0, i) for i in range(9, PER_SHARD)} | {culprits["segv"]},
        every=lambda: [wds_key(s, i) for s in range(SHARDS) for i in range(PER_SHARD)],
        name=lambda sample, folder: str(folder / f"shard-{int(sample[1])}.tar"),
        prepare=write_shards,
        heal_status="healed-with-loss",
        retried=("segv",),
        evidence={
            "raise": "root cause: json.decoder.JSONDecodeError: Expecting property name enclosed "
            "in double quotes: line 1 column 2 (char 1)"
        },
    ),
    "timm": Stack(
        "timm_train.py",
        ("timm", "torchvision"),
        args=lambda folder: [str(folder / "images"), "plain"],
        name=lambda sample, folder: str(folder / "images" / f"{sample:04d}" / "x.png"),
        prepare=write_class_folders,
    ),
    "timm-multi-epochs": Stack(
        "timm_train.py",
        ("timm", "torchvision"),
        args=lambda folder: [str(folder / "images"), "multi-epochs"],
        name=lambda sample, folder: str(folder / "images" / f"{sample:04d}" / "x.png"),
        prepare=write_class_folders,
    ),
    "lightning": Stack("lightning_fit.py", ("lightning",), name=FILES),
    "accelerate": Stack("accelerate_loop.py", ("accelerate",), name=FILES),
    "accelerate-stateful": Stack(
        "accelerate_loop.py",
        ("accelerate", "torchdata"),
        args=lambda folder: ["stateful"],
        name=FILES,
    ),
}


def missing(stack: Stack) -> list[str]:
    return [name for name in stack.needs if importlib.util.find_spec(name) is None]


def skip_reason(stack: Stack) -> str:
    if "torchvision" in stack.needs:
        return (
            f"needs {', '.join(missing(stack))}: pip install -e '.[eco-vision]' under torch "
            "2.14.1 (torchvision has no wheel for the CPU torch 2.13.0 of CI)"
        )
    return f"needs {', '.join(missing(stack))} (pip install -e '.[eco]')"


def ld_run(
    stack: Stack, folder: Path, plan: dict[str, Any], *, heal: bool
) -> tuple[Any, dict[str, Any], list[Any]]:
    ledger = folder / "ledger.jsonl"
    report_dir = folder / "report"
    flags = folder / "flags"
    flags.mkdir()
    env = {
        "PYTHONPATH": os.pathsep.join([str(STACKS_DIR), os.environ.get("PYTHONPATH", "")]),
        "LD_ECO_PLAN": json.dumps({**plan, "flags": str(flags)}),
        "LD_ECO_LEDGER": str(ledger),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": str(folder / "hf-home"),
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
    }
    command = ["-m", "loaderdoctor", "run", "--report-dir", str(report_dir)]
    command += ["--heal"] if heal else []
    command += ["--", sys.executable, str(STACKS_DIR / stack.script), *stack.args(folder)]
    result = run_python(command, timeout=240, env=env, cwd=str(folder))
    path = report_dir / "report.json"
    assert path.is_file(), f"no report.json\n{result.stderr[-4000:]}"
    received = []
    if ledger.exists():
        received = [v for line in ledger.read_text().splitlines() for v in json.loads(line)]
    return result, json.loads(path.read_text()), received


# Under run the first fault ends the job, so a fault is a run of its own: each stack's verdict
# under run is checked for one fault, and each fault on several stacks (the heal cell of every
# stack holds all three). A run cell per fault and stack proved no more for 14 more jobs of CI.
RUN_FAULT = {
    "hf-trainer-torch": "segv",
    "hf-trainer-datasets": "kill",  # a batched fetch: "one of [...]", under run only
    "torchdata-stateful": "raise",
    "monai": "raise",  # a truncated PNG on disk, wrapped by MONAI
    "webdataset": "kill",  # a stream item that killed its worker: no key under run
    "timm": "kill",
    "timm-multi-epochs": "segv",
    "lightning": "segv",
    "accelerate": "raise",
    "accelerate-stateful": "segv",
}


def cells() -> list[Any]:
    params = []
    for stack_name, stack in STACKS.items():
        runs = [("run", [RUN_FAULT[stack_name]])]
        runs += [("heal", list(group)) for group in stack.heal_groups]
        for mode, faults in runs:
            marks = []
            known = [stack.known[(mode, f)] for f in faults if (mode, f) in stack.known]
            if known:
                marks.append(pytest.mark.xfail(strict=True, reason=known[0]))
            cell = (
                f"{stack_name}-heal-all"
                if mode == "heal" and len(faults) == 3
                else f"{stack_name}-{mode}-{'+'.join(faults)}"
            )
            params.append(pytest.param(stack_name, mode, faults, id=cell, marks=marks))
    return params


@pytest.mark.parametrize(("stack_name", "mode", "faults"), cells())
def test_stack(stack_name: str, mode: str, faults: list[str], tmp_path: Path) -> None:
    stack = STACKS[stack_name]
    if missing(stack):
        pytest.skip(skip_reason(stack))
    plan = {fault: stack.culprits[fault] for fault in faults}
    stack.prepare(tmp_path, {"raise": plan.get("raise")})  # a corrupt file only where planted
    if stack_name == "monai":
        plan.pop("raise", None)  # its culprit is a truncated PNG on disk, not a planted raise
    result, report, received = ld_run(stack, tmp_path, plan, heal=mode == "heal")
    details = f"\nstderr:\n{result.stderr[-6000:]}"
    incidents = report["incidents"]
    every = stack.every()
    if mode == "run":
        (fault,) = faults
        culprit = stack.culprits[fault]
        assert result.returncode != 0, details
        assert report["status"] == "crashed", details
        assert [(i["cause"], i["action"]) for i in incidents] == [(CAUSES[fault], "raised")], (
            details
        )
        if stack.batched and fault == "kill":
            check_one_of(incidents[0], culprit, details)
        else:
            check_culprit(stack, incidents[0], culprit, tmp_path, details)
        check_evidence(stack, fault, incidents[0], details)
        # the loop never received the culprit, nor any sample twice
        assert culprit not in received, details
        assert max(Counter(received).values(), default=1) == 1, details
        assert set(received) <= set(every), details
        return
    assert result.returncode == 0, details
    assert report["status"] == stack.heal_status, details
    by_cause = {i["cause"]: i for i in incidents}
    deaths = [*faults, *(f for f in stack.retried if f in faults)]
    assert sorted(i["cause"] for i in incidents) == sorted(CAUSES[f] for f in deaths), details
    for fault in stack.retried:
        actions = [i["action"] for i in incidents if i["cause"] == CAUSES[fault]]
        assert actions == ["respawned", "lost"], details
    for fault in faults:
        check_culprit(stack, by_cause[CAUSES[fault]], stack.culprits[fault], tmp_path, details)
        check_evidence(stack, fault, by_cause[CAUSES[fault]], details)
    lost = stack.lost({fault: stack.culprits[fault] for fault in faults})
    assert Counter(received) == Counter(s for s in every if s not in lost), details


def check_one_of(incident: dict[str, Any], culprit: Any, details: str) -> None:
    """No index, and the batch the culprit was in, said honestly."""
    assert incident["indices"] == [], details
    head = (
        "the dataset's own __getitems__ loads a batch at once, so the sample in flight was one of ["
    )
    tail = "]; each loaded fine alone in a fresh worker"
    lines = [line for line in incident["evidence"] if line.startswith(head)]
    assert len(lines) == 1 and lines[0].endswith(tail), details
    batch = [int(i) for i in lines[0][len(head) : -len(tail)].split(", ")]
    assert culprit in batch and len(batch) == 8, details


def check_evidence(stack: Stack, fault: str, incident: dict[str, Any], details: str) -> None:
    roots = [line for line in incident["evidence"] if line.startswith("root cause: ")]
    assert roots == ([stack.evidence[fault]] if fault in stack.evidence else []), details


def check_culprit(
    stack: Stack, incident: dict[str, Any], culprit: Any, folder: Path, details: str
) -> None:
    if isinstance(culprit, str):  # a stream item: by worker and position, and by its key
        shard, item = culprit[1:].split("-")
        assert (incident["worker_id"], incident["position"]) == (int(shard), int(item)), details
        # its key and shard, even for an item that kills every worker that reads it: the worker
        # names each item from its position in the pipeline before loading it
        assert incident["key"] == culprit, details
        assert incident["sample_file"] == stack.name(culprit, folder), details
        return
    assert incident["indices"] == [culprit], details
    assert incident["sample_file"] == stack.name(culprit, folder), details


def test_importing_torchdata_under_run_exits_0(tmp_path: Path) -> None:
    """torchdata's ``class StatefulDataLoader(DataLoader[T])`` at import (accelerate imports it
    whenever torchdata is installed) raised TypeError under run."""
    pytest.importorskip("torchdata", reason="the eco extra installs torchdata")
    command = ["-m", "loaderdoctor", "run", "--report-dir", str(tmp_path / "report"), "--"]
    result = run_python([*command, sys.executable, "-c", "import torchdata.stateful_dataloader"])
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert (report["status"], report["notes"]) == (
        "ok",
        ["no supervised DataLoader was created: the command imported torch but built none"],
    )
