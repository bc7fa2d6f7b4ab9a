"""loaderdoctor: every PyTorch DataLoader worker death gets a verdict.

The public surface is ``__all__``. Names load on first use, so ``loaderdoctor --help`` and
``loaderdoctor env`` answer without importing torch.
"""

from __future__ import annotations

# Not ``typing``: every Python process of a ``loaderdoctor run`` imports this package (the
# run's bootstrap lives in it), and typing alone costs more than the rest of the package.
TYPE_CHECKING = False

__version__ = "0.1.0"

if TYPE_CHECKING:
    from typing import Any

    from loaderdoctor.forensics import CAUSES, Cause, Diagnosis, Evidence, diagnose
    from loaderdoctor.supervise import (
        DataError,
        DataLoader,
        DataWarning,
        HealingStoppedError,
        Incident,
        LoaderError,
        WorkerDiedError,
        WorkerHangError,
        WorkerStartError,
    )

_EXPORTS = {
    "DataError": "loaderdoctor.supervise",
    "DataLoader": "loaderdoctor.supervise",
    "DataWarning": "loaderdoctor.supervise",
    "HealingStoppedError": "loaderdoctor.supervise",
    "Incident": "loaderdoctor.supervise",
    "LoaderError": "loaderdoctor.supervise",
    "StatefulDataLoader": "loaderdoctor.supervise.stateful",  # needs torchdata
    "WorkerDiedError": "loaderdoctor.supervise",
    "WorkerHangError": "loaderdoctor.supervise",
    "WorkerStartError": "loaderdoctor.supervise",
    "CAUSES": "loaderdoctor.forensics",
    "Cause": "loaderdoctor.forensics",
    "Diagnosis": "loaderdoctor.forensics",
    "Evidence": "loaderdoctor.forensics",
    "diagnose": "loaderdoctor.forensics",
}

__all__ = [
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
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'loaderdoctor' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
