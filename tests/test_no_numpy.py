"""A machine without numpy gets the same verdicts.

torch's wheels do not depend on numpy, so slim containers and inference images have none, and
``Tensor.numpy()`` raises "Numpy is not available" there. Each child here runs with a ``numpy``
package on its ``PYTHONPATH`` that fails to import as a missing one does; spawned workers inherit
the path, so they have no numpy either.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import FAULTS, run_python

pytestmark = pytest.mark.slow
FAULTY = str(FAULTS / "faulty.py")


@pytest.fixture(scope="module")
def without_numpy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    blocker = tmp_path_factory.mktemp("no-numpy") / "numpy"
    blocker.mkdir()
    (blocker / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'numpy'\", name='numpy')\n"
    )
    return {"PYTHONPATH": str(blocker.parent)}


def test_the_blocker_really_hides_numpy(without_numpy: dict[str, str]) -> None:
    probe = (
        "import torch\ntry:\n    torch.zeros(1).numpy()\nexcept RuntimeError as e:\n    print(e)\n"
    )
    result = run_python(["-c", probe], env=without_numpy, timeout=120)
    assert result.stdout.splitlines() == ["Numpy is not available"], result.stderr[-2000:]
    # What stock torch says at import there, and what loaderdoctor's commands leave out.
    assert "UserWarning: Failed to initialize NumPy: No module named 'numpy'" in result.stderr


# The exception under spawn only: its worker runs the fork worker's code after importing it all
# again without numpy (a fork worker imports nothing of its own); the fork start is segv's.
@pytest.mark.parametrize(
    ("mode", "method", "cause"),
    [
        ("raise", "spawn", "sample-error"),
        ("segv", "fork", "native-crash"),
        ("sigkill", "forkserver", "killed-by-signal"),
    ],
)
def test_verdicts_without_numpy(
    without_numpy: dict[str, str], mode: str, method: str, cause: str
) -> None:
    result = run_python([FAULTY, mode, method], env=without_numpy, timeout=180)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no verdict printed\nstderr:\n{result.stderr[-3000:]}"
    out = json.loads(lines[-1])
    assert (out["cause"], out["indices"]) == (cause, [21]), out["evidence"]
    if mode == "raise":  # an exception travels in order: the five batches before it arrive
        assert out["delivered"] == 5
    else:  # a death is raised when it is seen, as torch does: batches still queued are not
        assert out["delivered"] <= 5


def test_demo_without_numpy(without_numpy: dict[str, str], tmp_path: Path) -> None:
    result = run_python(
        [
            "-m",
            "loaderdoctor",
            "demo",
            "--json",
            "--scenario",
            "corrupt-jpeg",
            "--scenario",
            "native-crash",
        ],
        env=without_numpy,
        timeout=240,
        cwd=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "NumPy" not in result.stderr  # torch's import warning: nothing above the demo
    report = json.loads(result.stdout)
    verdicts = [(s["name"], s["diagnosis"]["cause"]) for s in report["scenarios"]]
    assert verdicts == [("corrupt-jpeg", "sample-error"), ("native-crash", "native-crash")]
