"""The worker side of collate_fn: records the collate stage and names the odd samples of a batch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loaderdoctor.recorder import Stage
from loaderdoctor.supervise.worker.context import WorkerContext, _failure
from loaderdoctor.supervise.worker.exception_tags import record_exit, tag_exception
from loaderdoctor.supervise.worker.sample_policy import (
    DroppedSamples,
    HealedBatch,
    SkippedBatch,
    _safe_structure,
    odd_samples,
)


class SupervisedCollate:
    """Wraps the user's collate_fn. ``context`` is the one its worker's dataset wrapper writes
    (the batch's indices, its events, the stream); ``reference_votes`` is that dataset wrapper's,
    when it heals (both set by ``loader_view.attach_context``)."""

    def __init__(self, collate_fn: Callable[[Any], Any], heal: bool = False) -> None:
        self.collate_fn = collate_fn
        self.heal = heal
        self.context = WorkerContext()  # the real one comes from ``loader_view.attach_context``
        # The structures of a few healthy samples outside a batch, with their counts
        self.reference_votes: Callable[[list[Any]], dict[Any, int]] | None = None

    def __call__(self, samples: Any) -> Any:
        context = self.context
        slot = context.slot
        indices = context.loading.take()
        if isinstance(samples, SkippedBatch):
            samples.events = context.outbox.take_batch()
            return samples
        if isinstance(samples, DroppedSamples) or (self.heal and samples == []):
            if slot is not None:
                slot.stage(Stage.IDLE)
            return SkippedBatch(indices, "every sample was skipped", context.outbox.take_batch())
        if slot is not None:
            slot.stage(Stage.COLLATE)
        try:
            batch = self.collate_fn(samples)
        except Exception as error:  # the user's collate_fn raises anything
            if slot is not None:
                slot.error()
            odd = self._odd(samples, indices)
            healed = self._collate_without(samples, indices, odd, error) if self.heal else None
            if healed is not None:
                if slot is not None:
                    slot.collated()
                return _with_events(
                    context, _with_stream_positions(context, healed), len(indices) - len(odd)
                )
            if slot is not None:
                slot.stage(Stage.IDLE)
            tag_exception(
                error, context.worker_id, index=None, stage="collate", batch=indices, odd=odd
            )
            raise
        except SystemExit as exiting:
            record_exit(context.stack_log, exiting)
            raise
        if slot is not None:
            slot.collated()
        # Samples that collated together share a structure; one sample alone shows nothing (it
        # may be the odd one, left alone in its batch after the others were skipped).
        loading = context.loading
        if (
            self.heal
            and loading.good_structure is None
            and isinstance(samples, list)
            and len(samples) >= 2
        ):
            loading.collated_like(_safe_structure(samples[0]))
        return _with_events(context, _with_stream_positions(context, batch), len(indices))

    def _odd(self, samples: Any, indices: list[Any]) -> list[Any]:
        """The samples unlike a good one: a good structure from an earlier batch decides; else
        the majority of this batch's samples and a few outside it, each one vote."""
        if not self.heal:
            return odd_samples(samples, indices)
        good = self.context.loading.good_structure
        if good is not None:
            return odd_samples(samples, indices, good)
        fetch = self.reference_votes
        return odd_samples(samples, indices, votes=fetch(indices) if fetch is not None else None)

    def _collate_without(
        self, samples: list[Any], indices: list[Any], odd: list[Any], error: BaseException
    ) -> Any:
        """Collate the batch without the samples unlike the rest; None when that fails too."""
        if not odd or len(odd) >= len(samples):
            return None
        odd_set = set(map(repr, odd))
        kept = [s for s, i in zip(samples, indices) if repr(i) not in odd_set]
        try:
            batch = self.collate_fn(kept)
        except Exception:  # the user's collate_fn raises anything
            return None
        kept_shapes = tensor_shapes(kept[0])
        for sample, index in zip(samples, indices):
            if repr(index) in odd_set:
                event = {**_failure(error, index, 1, "collate"), "action": "skipped"}
                # What the main process needs to tell a ragged field (many lengths: the batch's
                # failure) from one odd sample: the tensor shapes beside a kept sample's.
                event["shapes"] = {"odd": tensor_shapes(sample), "kept": kept_shapes}
                self.context.outbox.record(event)
        return batch


def tensor_shapes(sample: Any, most: int = 32) -> list[list[int]] | None:
    """The shapes of a sample's tensors and arrays, in order (a tuple's, a dict's by sorted key),
    or None where it holds something else than such leaves and containers of them."""
    shapes: list[list[int]] = []
    pending = [sample]
    while pending and len(shapes) < most:
        value = pending.pop(0)
        shape = getattr(value, "shape", None)
        if shape is not None and getattr(value, "dtype", None) is not None:
            try:
                shapes.append([int(size) for size in shape])
            except (TypeError, ValueError):  # a shape that is not sizes
                return None
        elif isinstance(value, dict):
            pending[:0] = [value[key] for key in sorted(value, key=str)]
        elif isinstance(value, (list, tuple)):
            pending[:0] = list(value)
        elif not isinstance(value, (int, float, bool, str, bytes)):
            return None
    return shapes


def _with_events(context: WorkerContext, batch: Any, samples: int) -> Any:
    """A map-style batch with the skip/replace events of its samples (``samples``: how many it
    holds), when it has any; a stream's travel in its ``StreamBatch``."""
    outbox = context.outbox
    if not outbox.batch:
        return batch
    if context.loading.stream is not None:
        if context.worker_id is None:
            outbox.flush()  # a stream loaded in-process: nothing can load its batch again
        return batch
    return HealedBatch(batch, samples, outbox.take_batch())


def _with_stream_positions(context: WorkerContext, batch: Any) -> Any:
    """In a stream worker: the batch wrapped with the stream positions (and keys) it holds.

    The main process unwraps it before torch sees the batch; in-process loading (no worker id)
    and map-style datasets hand the batch on as it is.
    """
    stream = context.loading.stream
    if stream is None or context.worker_id is None:
        return batch
    return stream.take_batch(batch, context.worker_id)
