"""Why a ``StatefulDataLoader`` runs as plain torchdata: the reason its one warning and
``loaderdoctor run``'s report give."""

from __future__ import annotations

from typing import Any

from loaderdoctor.supervise.loader import _unsupervised_reason

IN_PROCESS = (
    "loaderdoctor supervises a StatefulDataLoader's worker processes; this one has "
    "num_workers=0 and loads in the main process with torchdata's own iterator: it runs as "
    "plain torchdata, unsupervised."
)


def plain_reason(loader: Any) -> str | None:
    """Why ``loader`` runs as plain torchdata now, or None when it is supervised: asked at
    each ``iter()`` too, since ``num_workers`` may change between epochs."""
    return _unsupervised_reason([]) or (IN_PROCESS if loader.num_workers == 0 else None)


__all__ = ["IN_PROCESS", "plain_reason"]
