"""The public surface is explicit, and importing the package or the CLI stays light."""

from __future__ import annotations

import subprocess
import sys

import pytest

import loaderdoctor

EXPECTED = {
    "CAUSES",
    "Cause",
    "DataError",
    "DataLoader",
    "DataWarning",
    "Diagnosis",
    "Evidence",
    "HealingStoppedError",
    "Incident",
    "LoaderError",
    "WorkerDiedError",
    "WorkerHangError",
    "WorkerStartError",
    "__version__",
    "diagnose",
}


def test_all_is_exactly_the_public_surface() -> None:
    assert set(loaderdoctor.__all__) == EXPECTED
    for name in loaderdoctor.__all__:
        assert getattr(loaderdoctor, name) is not None


def test_errors_are_runtime_errors() -> None:
    errors = (
        "DataError",
        "HealingStoppedError",
        "LoaderError",
        "WorkerDiedError",
        "WorkerHangError",
        "WorkerStartError",
    )
    for name in errors:
        assert issubclass(getattr(loaderdoctor, name), RuntimeError)


@pytest.mark.slow
def test_cli_help_does_not_import_torch() -> None:
    code = (
        "import sys\n"
        "from loaderdoctor.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('torch' in sys.modules, 'rich' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip().splitlines()[-1] == "False False"


def test_unknown_attribute() -> None:
    import pytest

    with pytest.raises(AttributeError):
        _ = loaderdoctor.NoSuchThing  # type: ignore[attr-defined]


def test_stateful_dataloader_without_torchdata_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``loaderdoctor.StatefulDataLoader`` is not in ``__all__``: it needs the torchdata extra."""
    for name in [n for n in sys.modules if n == "torchdata" or n.startswith("torchdata.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "torchdata", None)  # as if torchdata were not installed
    monkeypatch.delitem(sys.modules, "loaderdoctor.supervise.stateful", raising=False)
    monkeypatch.delitem(sys.modules, "loaderdoctor.torchdata_compat", raising=False)
    monkeypatch.delattr(loaderdoctor, "torchdata_compat", raising=False)  # an earlier import's
    monkeypatch.delitem(vars(loaderdoctor), "StatefulDataLoader", raising=False)
    with pytest.raises(ModuleNotFoundError) as raised:
        _ = loaderdoctor.StatefulDataLoader
    assert str(raised.value) == (
        "loaderdoctor.StatefulDataLoader needs torchdata: pip install 'loaderdoctor[torchdata]'"
    )
