"""The README, read top to bottom, matches what the tool does.

Its first lines are the fresh-machine commands (``.ci/run`` runs the first one); the first thing a
user is told to type is the install into an environment they already have, which must keep their
torch; and its Python snippets run as written, against a dataset of our own.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def blocks(language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(README) if lang == language]


def test_the_first_lines_are_the_two_fresh_machine_commands() -> None:
    # .ci/run greps the first (`pip install ... && loaderdoctor demo`) and runs it verbatim.
    assert README.splitlines()[:6] == [
        "# loaderdoctor",
        "",
        "```bash",
        "pip install -c .ci/constraints.txt -e . && loaderdoctor demo"
        "                   # install, run the demo",
        "pip install -c .ci/constraints.txt -e '.[dev]' && python -m pytest -q"
        "           # install, run the tests",
        "```",
    ]


def user_install_command() -> list[str]:
    """The first command the README gives past its first lines: it must be the plain install."""
    body = README.split("```\n", 1)[1]  # past the fresh-machine block
    language, command = FENCE.findall(body)[0]
    assert language == "bash", f"the first user instruction is a {language} block, not an install"
    return shlex.split(command.strip())


def test_the_first_user_instruction_installs_into_an_existing_environment() -> None:
    # A constraints file pins torch==2.13.0 (CPU build): in a training environment it downgrades
    # torch and replaces a CUDA build, which the README says installing never does.
    assert user_install_command() == ["pip", "install", "-e", "."]
    requirement = re.search(r'"torch([^"]*)"', (ROOT / "pyproject.toml").read_text())
    assert requirement is not None and requirement.group(1) == ">=2.13"


@pytest.mark.slow
def test_the_plain_install_leaves_the_installed_torch_alone(tmp_path: Path) -> None:
    """pip's own plan for the README's command, in this environment: loaderdoctor and nothing else."""
    command = user_install_command()
    assert command[:2] == ["pip", "install"]
    report = tmp_path / "plan.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "-q",
            "--report",
            str(report),
            *command[2:],
        ],
        cwd=ROOT,
        check=True,
        timeout=600,
    )
    planned = [item["metadata"]["name"] for item in json.loads(report.read_text())["install"]]
    assert planned == ["loaderdoctor"]


class Numbers(Dataset[torch.Tensor]):
    def __init__(self, size: int, bad: int | None = None) -> None:
        self.size = size
        self.bad = bad

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == self.bad:
            raise ValueError(f"sample {index} is unreadable")
        return torch.tensor([float(index)])


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:This DataLoader will create 8 worker processes")  # 2 cores
def test_the_python_snippets_run_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each ```python block of the README, in order, in one namespace: first over a healthy
    dataset, then (the healing snippet) over one whose sample 5 raises."""
    monkeypatch.chdir(tmp_path)
    snippets = blocks("python")
    assert len(snippets) == 2
    namespace: dict[str, Any] = {"dataset": Numbers(100)}
    exec(compile(snippets[0], "README.md:snippet-1", "exec"), namespace)
    assert namespace["batch"].shape == (4, 1)  # the last batch of 100 samples by 32

    namespace["dataset"] = Numbers(100, bad=5)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), pytest.warns(Warning):
        exec(compile(snippets[1], "README.md:snippet-2", "exec"), namespace)
    report = json.loads(printed.getvalue())
    assert report == namespace["loader"].report.to_dict()
    assert (report["status"], report["quarantine"]) == ("healed", [5])
    assert [(i["cause"], i["indices"], i["action"]) for i in report["incidents"]] == [
        ("sample-error", [5], "skipped")
    ]
    assert report["delivered"]["samples"] == 99
    assert json.loads((tmp_path / "quarantine.json").read_text())


def test_every_extra_the_readme_installs_is_declared() -> None:
    """loaderdoctor is not on a package index: an extra installs from the checkout
    (``pip install -e '.[torchdata]'``), and only an extra pyproject.toml declares."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    named = re.findall(r"pip install (?:-c \S+ )?-e '\.\[([\w,-]+)\]'", README)
    assert "torchdata" in named
    assert {extra for group in named for extra in group.split(",")} <= set(extras)
    assert "pip install 'loaderdoctor[" not in README  # an index has no loaderdoctor to install
