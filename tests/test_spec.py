"""spec.load_dataset: every way a spec fails is one clear line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from loaderdoctor.spec import SpecError, load_dataset

FIXTURE = Path(__file__).parent / "fixtures" / "env" / "images.py"


def write(tmp_path: Path, name: str, source: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return str(path)


def error_of(spec: str) -> str:
    with pytest.raises(SpecError) as caught:
        load_dataset(spec)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_file_spec_with_object_and_factory() -> None:
    dataset = load_dataset(f"{FIXTURE}:dataset")
    assert len(dataset) == 64  # type: ignore[arg-type]
    loader = load_dataset(f"{FIXTURE}:make_loader")
    assert type(loader).__name__ == "DataLoader"


def test_module_spec() -> None:
    value = load_dataset("collections:OrderedDict")  # a zero-arg callable returning a mapping
    assert len(value) == 0  # type: ignore[arg-type]


def test_missing_file(tmp_path: Path) -> None:
    assert error_of(f"{tmp_path}/nope.py:ds") == f"no such file: {tmp_path}/nope.py"


def test_no_colon() -> None:
    assert error_of("data.py") == (
        "dataset spec 'data.py' has no ':NAME'; expected path/to/file.py:NAME "
        "or package.module:NAME"
    )


def test_import_error_names_exception_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "broken.py", "import os\nx = 1 / 0\n")
    assert error_of(f"{path}:ds") == (
        f"importing {path} failed: ZeroDivisionError: division by zero (broken.py, line 2)"
    )


def test_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "syntax.py", "a = 1\nb = (\n")
    message = error_of(f"{path}:ds")
    assert message.startswith(f"importing {path} failed: SyntaxError: ")
    assert message.endswith("(syntax.py, line 2)")


def test_missing_module() -> None:
    assert error_of("no_such_pkg_xyz.data:ds") == (
        "no module named 'no_such_pkg_xyz' (is it installed, or on PYTHONPATH?)"
    )


def test_no_such_name(tmp_path: Path) -> None:
    path = write(tmp_path, "names.py", "train = [1, 2]\nvalid = [3]\n")
    assert error_of(f"{path}:test") == f"{path} has no name 'test' (it has: train, valid)"


def test_factory_that_raises(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "factory.py",
        """\
        def make():
            raise FileNotFoundError("/data/train.csv")
        """,
    )
    assert error_of(f"{path}:make") == (
        f"{path}:make() raised FileNotFoundError: /data/train.csv (factory.py, line 2)"
    )


def test_not_a_dataset(tmp_path: Path) -> None:
    path = write(tmp_path, "plain.py", "count = 3\ndef make():\n    return 3.5\n")
    assert error_of(f"{path}:count") == (
        f"{path}:count is a int, not a dataset: it needs __getitem__ and __len__ "
        "(map-style) or __iter__ (iterable-style)"
    )
    assert error_of(f"{path}:make").startswith(f"{path}:make is a float, not a dataset")


# --- the names a new user trips over ---------------------------------------------
def test_no_such_name_lists_the_datasets_first_and_leaves_imports_out(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "dataset.py",
        """
        import os
        from pathlib import Path

        import torch
        from torch.utils.data import DataLoader, Dataset, TensorDataset

        ROOT = Path("/data")
        alpha = beta = gamma = delta = epsilon = zeta = eta = theta = 1


        class Crops(Dataset):
            def __len__(self):
                return 1

            def __getitem__(self, index):
                return index


        def augment(x):
            return x


        train_set = TensorDataset(torch.zeros(4))
        valid_loader = DataLoader(train_set)
        """,
    )
    assert error_of(f"{path}:nosuch") == (
        f"{path} has no name 'nosuch' (it has: train_set, valid_loader, Crops, ROOT, alpha, "
        "augment, beta, delta, ...)"
    )


def test_a_scripts_main_is_not_run_as_ours(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`scan train.py:main`: main() parses its command line (loaderdoctor's, before) and exits."""
    path = write(
        tmp_path,
        "train.py",
        """
        import argparse
        import sys


        def main():
            parser = argparse.ArgumentParser()
            parser.add_argument("--epochs", type=int, required=True)
            print(sys.argv, file=sys.stderr)
            parser.parse_args()
        """,
    )
    monkeypatch.setattr("sys.argv", ["loaderdoctor", "scan", f"{path}:main", "--num-workers", "4"])
    assert error_of(f"{path}:main") == (
        f"{path}:main() exited (SystemExit: 2) instead of returning a dataset: name a Dataset or "
        "DataLoader object, or a function that builds one without arguments (not the script's "
        "main)"
    )
    assert capsys.readouterr().err == ""  # not the script's argparse usage, shown as ours
    import sys

    assert sys.argv == ["loaderdoctor", "scan", f"{path}:main", "--num-workers", "4"]


def test_what_a_factory_that_returns_says_is_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path,
        "made.py",
        """
        import sys


        def build():
            print("building from", sys.argv, file=sys.stderr)
            return [1, 2, 3]
        """,
    )
    assert load_dataset(f"{path}:build") == [1, 2, 3]
    assert capsys.readouterr().err == f"building from ['{path}']\n"


@pytest.mark.slow
def test_a_module_spec_loads_from_the_current_folder_with_the_console_script(
    tmp_path: Path,
) -> None:
    """`loaderdoctor env --target dataset:train_set` where `python -c "import dataset"` works."""
    import subprocess
    import sys

    write(tmp_path, "dataset.py", "train_set = [[1.0, 2.0]] * 8\n")
    script = Path(sys.executable).parent / "loaderdoctor"
    assert script.is_file(), "the console script is installed beside this python"
    command = [str(script), "env", "--target", "dataset:train_set", "--batch-size", "2", "--json"]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "error" not in result.stderr, result.stderr
    assert result.returncode in (0, 1), result.stderr  # the machine's own checks may fail
    assert '"target": "dataset:train_set"' in result.stdout
