"""Re-trying samples alone: each in a fresh worker of its own, supervised, so that a sample that
kills or hangs its worker again is named (``probe_batch``). ``Recovery`` asks it before it
quarantines a sample (a death of the sample, not of the pool) and to name the culprit of a batch
loaded at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from loaderdoctor.forensics import Diagnosis
from loaderdoctor.supervise.parent.supervision import LoaderSnapshot, Settings, Supervision
from loaderdoctor.system.oom_priority import PROBE_OOM_SCORE_ADJ

logger = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 60.0


def probe_batch(
    pool: Callable[..., Any],
    snapshot: LoaderSnapshot,
    indices: list[Any],
    *,
    collate: bool = False,
) -> Any:
    """Load ``indices`` one by one, alone, in a fresh worker (of a supervised ``pool``): the
    first one that fails again (None when all load). ``collate``: each is collated alone too,
    by the loader's ``collate_fn`` (a batch of one), as where a worker died collating.

    A string says why the probe itself could not tell (its worker could not start, or
    loaderdoctor's own machinery failed): logged, and never taken for the sample's failure,
    which would quarantine a healthy sample.
    """
    # each sample by ``dataset[index]``, so the recorder names it
    collated: dict[str, Any] = (
        {"batch_size": 1, "collate_fn": snapshot.collate_fn} if collate else {"batch_size": None}
    )
    loader = torch.utils.data.DataLoader(
        snapshot.dataset,
        **collated,
        sampler=indices,
        num_workers=1,
        worker_init_fn=snapshot.worker_init_fn,
        multiprocessing_context=snapshot.multiprocessing_context,
    )
    settings = Settings(
        hang_timeout=probe_timeout(snapshot),
        heal=False,
        on_error="raise",
        retries=0,
        quarantine_path=None,
        allow_in_process=False,
    )
    # The memory suspect goes first, before the workers and never after the training process.
    supervision = Supervision.of_probe(settings, snapshot.dataset, PROBE_OOM_SCORE_ADJ)
    try:
        for _ in pool(LoaderSnapshot(loader), supervision):
            pass
    except Exception as error:  # the probe's outcome, whatever it raised: read from its log
        for incident in supervision.log:
            found = [i for i in indices if _fails_at(incident.diagnosis, i)]
            if found:
                return found[0]
        what = f"sample {indices[0]!r}" if len(indices) == 1 else f"samples {indices!r}"
        logger.warning("loaderdoctor: %s could not be re-tried alone", what, exc_info=True)
        return f"{type(error).__name__}: {error}"
    return None


def probe_timeout(snapshot: LoaderSnapshot) -> float:
    """How long a re-try alone may stay on one sample: the loader's own hang_timeout, or the
    user's ``timeout``, where shorter (longer, the sample would fail the loader too: a re-try
    without the user's timeout found a slow sample "fine" and healing looped on it)."""
    limits = [PROBE_TIMEOUT_S]
    for name in ("hang_timeout", "timeout"):
        value = snapshot.__dict__.get(name)
        if isinstance(value, int | float) and value > 0:
            limits.append(float(value))
    return min(limits)


def _fails_at(diagnosis: Diagnosis, index: Any) -> bool:
    """The diagnosis is of the sample ``index`` failing (not of a worker that never reached it,
    nor of loaderdoctor's own machinery)."""
    if diagnosis.cause == "internal-error":
        return False
    try:
        return index in diagnosis.indices
    except (TypeError, ValueError):  # an index that does not compare (an array)
        return False


__all__ = ["PROBE_TIMEOUT_S", "probe_batch", "probe_timeout"]
