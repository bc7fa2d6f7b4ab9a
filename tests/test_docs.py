"""The cause pages in docs/causes/ are generated from the catalog and cannot drift from it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from loaderdoctor.docs import (
    GENERATED_MARKER,
    INDEX_NAME,
    differences,
    render_all,
    render_cause_page,
    render_index,
    render_readme_table,
    write_docs,
)
from loaderdoctor.forensics.catalog import CAUSES, Cause

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "causes"


def test_checked_in_pages_equal_the_generator_output() -> None:
    for name, text in render_all(CAUSES.values()).items():
        path = DOCS / name
        assert path.is_file(), f"{path} is missing: run python scripts/gen_docs.py"
        assert path.read_text(encoding="utf-8") == text, (
            f"{path} is out of date: run python scripts/gen_docs.py"
        )
    assert differences(DOCS, render_all(CAUSES.values())) == []


def test_the_readme_table_of_causes_is_the_catalog() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert render_readme_table(CAUSES.values()) in readme
    rows = [line for line in readme.splitlines() if line.startswith("| [`")]
    listed = [row.split("`")[1] for row in rows if "](docs/causes/" in row]
    assert listed == list(CAUSES)  # process-limit and every other row, once, in catalog order


@pytest.mark.parametrize("cause", list(CAUSES.values()), ids=list(CAUSES))
def test_every_cause_has_a_page_at_its_docs_url(cause: Cause) -> None:
    assert (ROOT / cause.docs_url).is_file()
    assert cause.proof.strip(), f"{cause.id} has no proof text in the catalog"
    assert f"]({cause.id}.md)" in (DOCS / INDEX_NAME).read_text(encoding="utf-8")


def test_page_layout() -> None:
    cause = Cause(
        id="demo-cause",
        title="A title",
        explanation="What it means.",
        fixes=("First fix.", "Second `fix`."),
        symptoms=("RuntimeError: boom N",),
        proof="The evidence.",
    )
    assert render_cause_page(cause) == (
        f"{GENERATED_MARKER} (src/loaderdoctor/forensics/catalog.py). Edit the catalog, not "
        "this file. -->\n"
        "\n"
        "# A title\n"
        "\n"
        "Cause id: `demo-cause`\n"
        "\n"
        "## What the message looks like\n"
        "\n"
        "The failure shows up as (N stands for a pid or a number):\n"
        "\n"
        "```text\n"
        "RuntimeError: boom N\n"
        "```\n"
        "\n"
        "## What it means\n"
        "\n"
        "What it means.\n"
        "\n"
        "## How loaderdoctor proves it\n"
        "\n"
        "The evidence.\n"
        "\n"
        "## Fixes\n"
        "\n"
        "1. First fix.\n"
        "2. Second `fix`.\n"
        "\n"
        "---\n"
        "\n"
        "[All causes](README.md)\n"
    )
    index = render_index([cause])
    assert "| [`demo-cause`](demo-cause.md) | A title | `RuntimeError: boom N` |" in index


def test_write_removes_stale_generated_pages_only(tmp_path: Path) -> None:
    (tmp_path / "gone-cause.md").write_text(f"{GENERATED_MARKER} ...\n", encoding="utf-8")
    (tmp_path / "handwritten.md").write_text("# notes\n", encoding="utf-8")
    changed = write_docs(tmp_path, CAUSES.values())
    assert set(changed) == {*render_all(CAUSES.values()), "gone-cause.md"}
    assert not (tmp_path / "gone-cause.md").exists()
    assert (tmp_path / "handwritten.md").exists()
    assert write_docs(tmp_path, CAUSES.values()) == []


@pytest.mark.slow
def test_check_mode_exit_codes(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "loaderdoctor.docs", "--out", str(tmp_path), "--check"]
    stale = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert stale.returncode == 1 and "out of date" in stale.stdout
    write_docs(tmp_path, CAUSES.values())
    fresh = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
