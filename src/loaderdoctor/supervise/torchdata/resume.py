"""How a stopped ``StatefulDataLoader`` pool goes on: from torchdata's own state at the last batch
delivered, its sampler's tail (``SamplerTail``), and each worker's stream position
(``streams``): ``Recovery``'s ``resume_point`` and ``successor`` for torchdata's iterator.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from loaderdoctor import torchdata_compat
from loaderdoctor.supervise.parent.recovery import Successor
from loaderdoctor.supervise.streams import inexact_state
from loaderdoctor.supervise.torchdata.sampler_tail import InStep, SamplerTail
from loaderdoctor.supervise.torchdata.streams import plan_resumes


def resume_point(ref: weakref.ref[Any]) -> tuple[Any, SamplerTail, Any]:
    """Where a stopped stateful pool goes on: torchdata's state at the last batch delivered,
    its sampler's tail, and (IterableDataset) where each worker's stream goes on."""
    iterator = ref()
    assert iterator is not None  # asked by its own Recovery, while it handles a failure
    state = iterator._ld_resumed_from or iterator.state_dict()  # died while resuming: again
    if inexact_state(iterator._ld.parts.snapshot.dataset) is not None:
        state = torchdata_compat.without_dataset_states(state)  # its streams are re-read
    tail = SamplerTail(list(iterator._ld_drawn), iterator.ld_sampler_iter)
    return state, tail, plan_resumes(iterator, state)


def restart_point(
    ref: weakref.ref[Any], state: Any, tail: SamplerTail | None
) -> tuple[Any, SamplerTail | None, None]:
    """Where a new pool starts over when one dies while it is built: the state it was given
    and, for a pool that went on from a stopped one, that pool's sampler tail whole: the index
    batches the dead start drew from it first (torchdata's ``__init__`` sends the first ones),
    then what it left."""
    iterator = ref()
    if tail is None or iterator is None or not isinstance(iterator.ld_sampler_iter, InStep):
        return state, tail, None  # it drew nothing of the tail yet
    return state, SamplerTail(list(iterator._ld_drawn), iterator.ld_sampler_iter.pending), None


def epoch_start() -> tuple[None, None, None]:
    """A persistent pool's new epoch, before its first batch: a new pool starts it afresh."""
    return None, None, None


def successor(iterator_class: Callable[..., Any], plan: Successor) -> Any:
    """The pool that goes on from a stopped one (an ``iterator_class``, torchdata's supervised
    iterator), at its ``resume_point``; it counts the batches it yields itself."""
    state, tail, streams = plan.resume_point
    with torchdata_compat.quiet_fast_forward():
        successor = iterator_class(
            plan.snapshot, state, plan.supervision, plan.respawns, tail, streams
        )
    successor._ld_serves = 1
    return successor


__all__ = ["epoch_start", "restart_point", "resume_point", "successor"]
