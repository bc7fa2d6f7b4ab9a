"""What bounds the pipeline: a catalog of bounds (data) and the rules that read the trials.

The rules, in order:
1. the main process: with workers, its thread is busy receiving batches most of the time, so more
   workers only queue more batches (big batches make it the transfer, small ones the per-batch
   overhead of the main process);
2. I/O latency: a sample spends most of its time off the CPU at 0 workers, or throughput keeps
   rising past the core count (workers overlap waiting, not computing) for samples that are not
   almost all CPU (those scale past the cores only on a machine shared with other processes);
3. inter-process transfer: with large batches, workers deliver far less than the cores' worth of
   0-worker throughput (the bytes, not the samples, cost the time);
4. per-sample compute otherwise: throughput flattens at about the core count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from loaderdoctor.tune.model import Bound, LoaderConfig, Skipped, Trial
from loaderdoctor.units import format_bytes

MAIN_BUSY = 0.75  # fraction of a core the main thread spends in next() at the pick
WAITING = 0.5  # at 0 workers, above this share of a sample's time waiting: I/O latency
WAITING_SOME = 0.2  # below it, scaling past the cores is contention, not waiting
PAST_CORES_GAIN = 0.20  # throughput gained by workers past the core count
TRANSFER_BATCH_BYTES = 1024 * 1024
TRANSFER_EFFICIENCY = 0.6  # of cores x 0-worker throughput


@dataclass(frozen=True)
class BoundSpec:
    id: str
    title: str
    explanation: str
    fixes: tuple[str, ...]


BOUNDS: dict[str, BoundSpec] = {
    spec.id: spec
    for spec in (
        BoundSpec(
            "compute",
            "per-sample compute: the CPU cores are the limit",
            "Each sample costs CPU time in __getitem__ (decode, transforms) or the collate_fn; "
            "throughput stops rising at about one worker per usable core.",
            (
                "Make a sample cheaper: decode at a lower resolution, cache decoded or "
                "preprocessed samples, drop work the model does not need.",
                "Move augmentations to the GPU (torchvision.transforms.v2 on CUDA tensors, "
                "NVIDIA DALI) so the CPU only decodes.",
                "More usable cores (a larger CPU quota or machine); workers past the core count "
                "do not help.",
            ),
        ),
        BoundSpec(
            "io-latency",
            "I/O latency: samples wait (disk, network, remote storage) more than they compute",
            "Workers overlap the waiting, so throughput keeps rising past the core count until "
            "memory, the main process or the storage itself stops it.",
            (
                "Raise num_workers past the core count while the memory budget allows.",
                "Overlap the waits inside a worker: fetch a batch's samples with a thread pool "
                "in the dataset's __getitems__, or read asynchronously.",
                "Read less often and more at once: a local SSD cache, sharded archives "
                "(WebDataset, TFRecord-style) instead of many small files.",
            ),
        ),
        BoundSpec(
            "transfer",
            "inter-process transfer: batches are expensive to hand from workers to the main process",
            "Every batch is written to /dev/shm by a worker and mapped by the main process; with "
            "large batches the bytes, not the samples, cost the time.",
            (
                "Send fewer bytes: uint8 images instead of float32 (normalize on the GPU), crop "
                "or resize in the worker, drop fields the model does not use.",
                "Give /dev/shm room (docker --shm-size) so batches never spill or stall.",
                "With a GPU, pin_memory=True and non_blocking copies overlap the host-to-device "
                "transfer with compute.",
            ),
        ),
        BoundSpec(
            "main-process",
            "the main process: it cannot take batches any faster",
            "Workers deliver faster than the main process receives and unpacks batches; more "
            "workers only queue more batches.",
            (
                "A larger batch_size: the per-batch cost of the main process is paid less often.",
                "Keep per-batch work out of the main process: collate in the workers (a "
                "collate_fn), not in the training loop.",
                "Check the main process for CPU contention (torch.set_num_threads, other "
                "processes on its cores).",
            ),
        ),
    )
}


@dataclass(frozen=True)
class NothingMeasured:
    """Why no configuration has a rate, the fact that shows it, and the one fix that follows."""

    id: str
    reason: str
    fix: str


# Without a single measured rate there is no bound to name: the report says why instead, in the
# order the causes are checked (a trial that ran past the budget is the budget's, not a failure).
NOTHING_MEASURED: tuple[NothingMeasured, ...] = (
    NothingMeasured(
        "over-budget",
        "every configuration was predicted or measured past the memory budget",
        "Raise --mem-budget, or lower --batch-size or the memory one sample takes.",
    ),
    NothingMeasured(
        "failed",
        "every trial failed (its note above says how)",
        "Fix what the failed trial names (`loaderdoctor run` on a script that loads this dataset "
        "gives its verdict), then tune again.",
    ),
    NothingMeasured(
        "none-run",
        "no trial ran within the time budget",
        "Give the search more time: a larger --time-budget, or a shorter --window.",
    ),
)


def nothing_measured(trials: Sequence[Trial], skipped: Sequence[Skipped]) -> Bound:
    """The bound-that-is-not of a search that measured nothing: its reason and one fix."""
    aborted = [t for t in trials if t.over_budget]
    failed = [t for t in trials if t.status == "failed"]
    shown = {"over-budget": bool(skipped or aborted), "failed": bool(failed), "none-run": True}
    why = next(row for row in NOTHING_MEASURED if shown[row.id])
    evidence = [f"{len(trials)} trials ran, none to the end of its window"]
    if skipped:
        evidence.append(f"{len(skipped)} configurations not run: predicted past the budget")
    evidence += [f"{t.config.label()}: {t.status}, {t.note}" for t in [*aborted, *failed] if t.note]
    return Bound("nothing-measured", f"nothing measured: {why.reason}", evidence, [why.fix])


def _best_trial(trials: Sequence[Trial], config: LoaderConfig) -> Trial | None:
    matching = [t for t in trials if t.config == config and t.ok]
    return max(matching, key=lambda t: t.samples_per_s) if matching else None


def _rates_by_workers(trials: Sequence[Trial]) -> dict[int, float]:
    rates: dict[int, float] = {}
    for trial in trials:
        if trial.ok:
            workers = trial.config.num_workers
            rates[workers] = max(rates.get(workers, 0.0), trial.samples_per_s)
    return rates


def analyze(
    trials: Sequence[Trial],
    pick: LoaderConfig,
    usable_cores: int,
    skipped: Sequence[Skipped] = (),
) -> Bound:
    """The bound of the pipeline at ``pick``, with the measurements that show it."""
    evidence: list[str] = []
    zero = _best_trial(trials, LoaderConfig.make(0))
    best = _best_trial(trials, pick)
    cores = max(1, usable_cores)
    waiting = _time_split(zero, evidence)
    if best is None:
        return nothing_measured(trials, skipped)
    workers = pick.num_workers
    gain_past = _scaling(zero, best, workers, _rates_by_workers(trials), cores, evidence)
    main_busy = best.main_cpu_per_batch_s * best.batches_per_s
    if workers > 0:
        evidence.append(
            f"the main thread spends {main_busy:.0%} of its time taking batches "
            f"({best.main_cpu_per_batch_s * 1000:.2f} ms CPU per batch of "
            f"{format_bytes(best.batch_bytes)}, "
            f"{format_bytes(best.batch_bytes * best.batches_per_s)}/s through /dev/shm)"
        )
    larger = [s for s in skipped if s.config.num_workers > workers]
    if larger:
        evidence.append(
            f"{len(larger)} larger configurations were not run: over the memory or shm budget"
        )
    return _classify(zero, best, workers, cores, waiting, gain_past, main_busy, evidence)


def _time_split(zero: Trial | None, evidence: list[str]) -> float | None:
    """At 0 workers: the share of a sample's time off the CPU and not queued for one."""
    if zero is None or zero.samples_per_s <= 0 or zero.cpu_per_sample_s is None:
        return None
    wall = 1 / zero.samples_per_s
    cpu = min(wall, zero.cpu_per_sample_s)
    queued = min(wall - cpu, zero.run_queue_per_sample_s or 0.0)
    waiting = (wall - cpu - queued) / wall
    line = f"at 0 workers one sample takes {wall * 1000:.2f} ms: {cpu * 1000:.2f} ms on the CPU"
    if zero.run_queue_per_sample_s is not None:
        line += f", {queued * 1000:.2f} ms queued for a CPU (other processes)"
    evidence.append(line + f", {waiting:.0%} of it waiting on something else (I/O, sleep)")
    return waiting


def _scaling(
    zero: Trial | None,
    best: Trial,
    workers: int,
    rates: dict[int, float],
    cores: int,
    evidence: list[str],
) -> float | None:
    """How the rate grew with workers; the gain of going past the cores (None: not measured)."""
    if zero is not None and workers > 0 and zero.samples_per_s > 0:
        evidence.append(
            f"{workers} workers: {best.samples_per_s:.0f} samples/s, "
            f"{best.samples_per_s / zero.samples_per_s:.2f}x the 0-worker "
            f"{zero.samples_per_s:.0f} samples/s, on {cores} usable cores"
        )
    within = [rate for w, rate in rates.items() if 0 < w <= cores]
    past = [rate for w, rate in rates.items() if w > cores]
    if not (within and past and max(within) > 0):
        return None
    gain_past = max(past) / max(within) - 1
    direction = "above" if gain_past >= 0 else "below"
    evidence.append(
        f"past {cores} cores the best rate is {abs(gain_past):.0%} {direction} the best at up "
        f"to {cores} workers"
    )
    return gain_past


def _classify(
    zero: Trial | None,
    best: Trial,
    workers: int,
    cores: int,
    waiting: float | None,
    gain_past: float | None,
    main_busy: float,
    evidence: list[str],
) -> Bound:
    big_batches = best.batch_bytes >= TRANSFER_BATCH_BYTES
    if workers == 0 and cores > 1:
        evidence.append(
            "no worker count beat 0 workers: handing batches between processes costs more "
            "than the per-sample work"
        )
        return _bound("transfer" if big_batches else "main-process", evidence)
    if workers > 0 and main_busy >= MAIN_BUSY:
        return _bound("transfer" if big_batches else "main-process", evidence)
    scales_past_cores = gain_past is not None and gain_past >= PAST_CORES_GAIN
    waits = waiting is not None and waiting > WAITING
    if waits or (scales_past_cores and (waiting is None or waiting >= WAITING_SOME)):
        return _bound("io-latency", evidence)
    if scales_past_cores:
        # CPU-bound samples cannot run faster on more processes than cores, unless the cores
        # are shared: the scheduler gives each runnable process its share, so more workers
        # take a larger part of a machine that something else is using.
        evidence.append(
            "samples are CPU-bound, yet more workers than cores helped: other processes share "
            "these cores, and measurements on a busy machine are noisy"
        )
    if zero is not None and workers > 0 and big_batches:
        ideal = zero.samples_per_s * min(workers, cores)
        if ideal > 0 and best.samples_per_s < ideal * TRANSFER_EFFICIENCY:
            evidence.append(
                f"workers reach {best.samples_per_s / ideal:.0%} of {min(workers, cores)} "
                f"cores x the 0-worker rate with {format_bytes(best.batch_bytes)} batches"
            )
            return _bound("transfer", evidence)
    return _bound("compute", evidence)


def _bound(bound_id: str, evidence: list[str]) -> Bound:
    spec = BOUNDS[bound_id]
    return Bound(spec.id, spec.title, evidence, list(spec.fixes))
