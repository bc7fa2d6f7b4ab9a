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
