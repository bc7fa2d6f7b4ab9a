"""``--fix``: exact rewrites by source position, everything else left byte for byte."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from loaderdoctor.lint import check_source
from loaderdoctor.lint.fix import fix_source

CORPUS = Path(__file__).parent / "lint_corpus"


def fixed(source: str) -> tuple[str, list[str]]:
    source = textwrap.dedent(source)
    new_text, records = fix_source(source, check_source(source, "t.py"), "t.py")
    return new_text, [record.description for record in records]


def test_removes_worker_only_options_inline_and_multiline() -> None:
    source = """\
        from torch.utils.data import DataLoader
        a = DataLoader(ds, num_workers=0, persistent_workers=True)
        b = DataLoader(ds, prefetch_factor=2, batch_size=4)  # keep this comment
        c = DataLoader(
            ds,
            batch_size=64,
            persistent_workers=True,  # warm workers
            prefetch_factor=4,
            timeout=30,
        )
        d = DataLoader(ds, batch_size=8, prefetch_factor=2, persistent_workers=True)
        """
    new_text, descriptions = fixed(source)
    assert new_text == textwrap.dedent(
        """\
        from torch.utils.data import DataLoader
        a = DataLoader(ds, num_workers=0)
        b = DataLoader(ds, batch_size=4)  # keep this comment
        c = DataLoader(
            ds,
            batch_size=64,
        )
        d = DataLoader(ds, batch_size=8)
        """
    )
    assert len(descriptions) == 7
    assert check_source(new_text) == []


def test_hoists_a_lambda_to_a_module_level_function() -> None:
    source = """\
        import torch
        from torch.utils.data import DataLoader

        SCALE = 2


        # the training entry point
        def main():
            loader = DataLoader(ds, num_workers=2, collate_fn=lambda batch: torch.stack(batch) * SCALE)
            return loader
        """
    new_text, descriptions = fixed(source)
    assert new_text == textwrap.dedent(
        """\
        import torch
        from torch.utils.data import DataLoader

        SCALE = 2


        def _collate_fn(batch):
            return torch.stack(batch) * SCALE


        # the training entry point
        def main():
            loader = DataLoader(ds, num_workers=2, collate_fn=_collate_fn)
            return loader
        """
    )
    assert descriptions == ["hoisted the collate_fn lambda to module-level function `_collate_fn`"]
    assert compile(new_text, "t.py", "exec")
    assert check_source(new_text) == []


def test_lambda_using_locals_is_reported_but_not_hoisted() -> None:
    source = """\
        from torch.utils.data import DataLoader
        def main(scale):
            return DataLoader(ds, num_workers=2, collate_fn=lambda b: b * scale)
        """
    new_text, descriptions = fixed(source)
    assert new_text == textwrap.dedent(source) and descriptions == []


def test_suppressed_findings_are_not_fixed() -> None:
    source = (
        "from torch.utils.data import DataLoader\na = DataLoader(ds, timeout=5)  # noqa: LD105\n"
    )
    assert fixed(source) == (source, [])


@pytest.mark.slow
def test_cli_fix_rewrites_a_temp_copy(tmp_path: Path) -> None:
    target = tmp_path / "ld105_options.py"
    shutil.copy(CORPUS / "bad" / "ld105_options.py", target)
    untouched = tmp_path / "ld106_handles.py"
    shutil.copy(CORPUS / "bad" / "ld106_handles.py", untouched)
    result = subprocess.run(
        [sys.executable, "-m", "loaderdoctor", "lint", "--fix", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr  # LD106 cannot be fixed mechanically
    lines = result.stdout.splitlines()
    assert sum(line.startswith("fixed ") for line in lines) == 2
    findings = [line for line in lines if not line.startswith(("fixed ", "    fix: "))]
    # The loader whose num_workers is a command-line flag (0 by default) keeps its options:
    # the user may ask for workers; the fix line says how to give them only then.
    assert [line.split(": ")[1].split(" [")[0] for line in findings[:-1]] == [
        "LD105",
        "LD105",
        "LD106",
        "LD106",
        "LD106",
    ]
    assert (
        "    fix: Give it only with workers: `persistent_workers=True if args.num_workers > 0 "
        "else False`, or make the flag's default positive." in lines
    )
    text = target.read_text()
    assert "timeout" not in text and "pin_memory=True" in text
    assert text.count("persistent_workers=True") == 1 and text.count("prefetch_factor") == 1
    assert text.splitlines()[:2] == ["# expect: LD105 LD105 LD105 LD105", "# ruff: noqa"]
    assert untouched.read_bytes() == (CORPUS / "bad" / "ld106_handles.py").read_bytes()
    compile(text, str(target), "exec")


def test_ld101_wraps_the_top_level_code_in_main_under_the_guard() -> None:
    from loaderdoctor.lint.fix import wrap_in_main

    source = textwrap.dedent(
        '''\
        """Train a tiny model."""
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        dataset = TensorDataset(torch.randn(64, 3))
        loader = DataLoader(dataset, num_workers=4)  # workers from here


        def describe(batch):
            return batch[0].shape


        for batch in loader:
            print(describe(batch))
        '''
    )
    new_text, reason = wrap_in_main(source)
    assert reason is None
    assert new_text == textwrap.dedent(
        '''\
        """Train a tiny model."""
        import torch
        from torch.utils.data import DataLoader, TensorDataset


        def describe(batch):
            return batch[0].shape


        def main():
            dataset = TensorDataset(torch.randn(64, 3))
            loader = DataLoader(dataset, num_workers=4)  # workers from here
            for batch in loader:
                print(describe(batch))


        if __name__ == "__main__":
            main()
        '''
    )
    assert check_source(new_text, "t.py") == []


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (
            "loader = make()\n\n\ndef train():\n    for b in loader:\n        pass\n\n\ntrain()\n",
            "`train` (line 4) reads `loader`, which the top-level code sets: it would become a "
            "local of main(); pass it as an argument first",
        ),
        (
            "x = 1\n\nif __name__ == '__main__':\n    run(x)\n",
            'it already has an `if __name__ == "__main__":` block; move the top-level code into it',
        ),
        (
            'text = """a\nb"""\nrun(text)\n',
            "the string at line 1 spans lines: indenting it would change its text",
        ),
    ],
)
def test_ld101_fix_says_why_it_cannot_wrap(source: str, reason: str) -> None:
    from loaderdoctor.lint.fix import wrap_in_main

    assert wrap_in_main(source) == (source, reason)


def test_ld101_fix_of_a_function_local_that_shadows_a_module_name_is_allowed() -> None:
    from loaderdoctor.lint.fix import wrap_in_main

    source = "loader = make()\n\n\ndef train(loader):\n    return loader\n\n\ntrain(loader)\n"
    new_text, reason = wrap_in_main(source)
    assert reason is None
    assert new_text.endswith(
        "def main():\n    loader = make()\n    train(loader)\n\n\n"
        'if __name__ == "__main__":\n    main()\n'
    )


LINT_FIX = (sys.executable, "-m", "loaderdoctor", "lint", "--fix")


@pytest.mark.slow
def test_cli_fix_wraps_one_script_and_says_why_not_the_other(tmp_path: Path) -> None:
    wrapped = tmp_path / "ld101_top_level_loop.py"
    shutil.copy(CORPUS / "bad" / "ld101_top_level_loop.py", wrapped)
    kept = tmp_path / "ld101_epoch_loop_calls_train.py"
    shutil.copy(CORPUS / "bad" / "ld101_epoch_loop_calls_train.py", kept)
    before = kept.read_text()
    result = subprocess.run(
        [*LINT_FIX, "--select", "LD101", "-q", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines()[:2] == [
        f"fixed {wrapped}:7: LD101 moved the top-level code into main(), called under "
        '`if __name__ == "__main__":`',
        f"not fixed {kept}:18: LD101 `train` (line 12) reads `loader`, which the top-level code "
        "sets: it would become a local of main(); pass it as an argument first",
    ]
    assert kept.read_text() == before
    assert wrapped.read_text().endswith('\n\nif __name__ == "__main__":\n    main()\n')
    assert check_source(wrapped.read_text(), str(wrapped)) == []


def test_reseed_from_numpy_state_becomes_torch_initial_seed() -> None:
    source = """\
        import imgaug as ia
        import numpy as np
        from torch.utils.data import DataLoader


        def worker_init_fn(worker_id):
            np.random.seed(np.random.get_state()[1][0] + worker_id)
            ia.seed(np.random.get_state()[1][0] + worker_id)  # augmenters too
        """
    new_text, descriptions = fixed(source)
    assert new_text == textwrap.dedent(
        """\
        import imgaug as ia
        import numpy as np
        from torch.utils.data import DataLoader
        import torch


        def worker_init_fn(worker_id):
            np.random.seed(torch.initial_seed() % 2**32)
            ia.seed(torch.initial_seed() % 2**32)  # augmenters too
        """
    )
    assert descriptions == ["seeded from `torch.initial_seed()`"] * 2
    assert check_source(new_text) == []


def test_reseed_fix_uses_the_module_own_torch_name() -> None:
    new_text, _ = fixed(
        """\
        import numpy
        import torch as T
        numpy.random.seed(int(numpy.random.get_state()[1][0]) + 1)
        """
    )
    assert (
        new_text == "import numpy\nimport torch as T\nnumpy.random.seed(T.initial_seed() % 2**32)\n"
    )


def test_fixed_worker_seed_becomes_torch_initial_seed() -> None:
    new_text, descriptions = fixed(
        """\
        import numpy as np
        import torch
        from torch.utils.data import DataLoader


        def worker_init(worker_id):
            np.random.seed(42 + worker_id)


        loader = DataLoader(range(8), num_workers=2, worker_init_fn=worker_init)
        """
    )
    assert new_text.splitlines()[6] == "    np.random.seed(torch.initial_seed() % 2**32)"
    assert descriptions == ["seeded from `torch.initial_seed()`"]
