"""Unit tests of ``tune``: the search on fabricated curves, the budget, the bounds, the renderers."""

from __future__ import annotations

import ast
import html
import json
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from pathlib import Path

import pytest

from loaderdoctor.report.html.tune import format_html, format_svg
from loaderdoctor.report.html.tune_plot import write_plot
from loaderdoctor.report.tune import format_json, format_snippet, format_text, print_text
from loaderdoctor.tune import (
    BOUNDS,
    Budget,
    LoaderConfig,
    MemoryModel,
    Search,
    SearchResult,
    SearchSettings,
    Trial,
    TuneReport,
    analyze,
    parse_size,
    worker_ladder,
)
from loaderdoctor.tune.budget import WORKER_FLOOR_BYTES, over_budget
from loaderdoctor.tune.core import conservative_note
from loaderdoctor.tune.model import Bound, Skipped, Soak, SoakEpoch, Startup
from loaderdoctor.tune.soak import summarize

MiB = 1024 * 1024
GiB = 1024 * MiB
GRID = 1 + 16 * 4  # workers 0..16 x prefetch 1..4


def rate_trial(config: LoaderConfig, phase: str, rate: float) -> Trial:
    """A one-second trial at ``rate`` samples/s: 1 MiB per worker beside a 100 MiB main process."""
    workers = config.num_workers
    return Trial(
        config=config,
        phase=phase,
        samples_per_s=rate,
        seconds=1.0,
        worker_peak_bytes=[1 << 20] * workers,
        total_peak_bytes=(100 << 20) + (1 << 20) * workers,
    )


def fake_measure(
    rate: Callable[[LoaderConfig], float],
    *,
    main: int = 200 * MiB,
    per_worker: int = 20 * MiB,
    batch_bytes: int = 64 * 1024,
    log: list[LoaderConfig] | None = None,
) -> Callable[[LoaderConfig, str, int], Trial]:
    """A deterministic measurement: the rate from ``rate``, memory linear in the workers."""

    def measure(config: LoaderConfig, phase: str, _guess: int) -> Trial:
        if log is not None:
            log.append(config)
        workers = config.num_workers
        samples = rate(config)
        return Trial(
            config=config,
            phase=phase,
            samples_per_s=samples,
            batches_per_s=samples / 32,
            startup_s=0.1 + 0.05 * workers,
            seconds=1.0,
            main_cpu_per_batch_s=0.0005,
            cpu_per_sample_s=0.002 if workers == 0 else None,
            batch_bytes=batch_bytes,
            main_start_bytes=main,
            main_peak_bytes=main,
            worker_peak_bytes=[per_worker] * workers,
            total_peak_bytes=main + per_worker * workers,
        )

    return measure


def plateau_at_six(config: LoaderConfig) -> float:
    """Rises by 100 samples/s per worker up to 6 workers, flat after; 0 workers does 120."""
    if config.num_workers == 0:
        return 120.0
    return 100.0 * min(config.num_workers, 6)


def starved_at_six(config: LoaderConfig) -> float:
    """``plateau_at_six``, but with two or more workers each waits a fifth of its time for an
    index (a main process that hands them out late): a deeper queue could feed them."""
    rate = plateau_at_six(config)
    return rate * 0.8 if config.num_workers >= 2 else rate


def big_budget() -> Budget:
    return Budget(64 * GiB, 64 * GiB, "test")


def test_search_stops_on_the_plateau_and_finds_the_knee() -> None:
    log: list[LoaderConfig] = []
    search = Search(fake_measure(plateau_at_six, log=log), big_budget(), SearchSettings(16))
    result = search.run()
    assert result.pick == LoaderConfig.make(6, 2)
    assert result.pick_samples_per_s == pytest.approx(600)
    assert len(log) < GRID / 4
    assert result.stop_reason == "reached --max-workers 16"
    workers_tried = {config.num_workers for config in log}
    assert workers_tried == {0, 1, 2, 4, 6, 8, 16}  # the ladder, then one probe below 8
    assert not result.skipped


def test_two_flat_doublings_past_the_cores_end_the_ladder() -> None:
    log: list[LoaderConfig] = []
    settings = SearchSettings(64, usable_cores=2)
    result = Search(fake_measure(plateau_at_six, log=log), big_budget(), settings).run()
    assert result.stop_reason == "plateau at 32 workers: 2 doublings in a row gained less than 4%"
    assert 64 not in {config.num_workers for config in log}
    assert result.pick == LoaderConfig.make(6, 2)


def _compute_bound(curve: dict[int, float]) -> tuple[SearchResult, list[LoaderConfig]]:
    """A search on 2 unshared cores of samples all CPU at 0 workers (2 ms each, 500 a second)."""
    log: list[LoaderConfig] = []
    measure = fake_measure(lambda c: curve.get(c.num_workers, curve[16]), log=log)
    result = Search(measure, big_budget(), SearchSettings(16, usable_cores=2)).run()
    return result, log


def test_cpu_bound_samples_end_the_ladder_where_the_cores_are_saturated() -> None:
    # 8 workers a lucky 5% ahead of 4: on 2 unshared cores no count past 4 is measured
    result, log = _compute_bound({0: 500.0, 1: 480.0, 2: 900.0, 4: 1000.0, 8: 1050.0, 16: 990.0})
    assert max(config.num_workers for config in log) == 4
    assert result.stop_reason == (
        "2 usable cores saturated at 4 workers: at 0 workers a sample is 100% on a CPU, "
        "so more workers only wait for the cores"
    )


def test_a_rate_still_climbing_at_the_saturation_point_goes_on_up_the_ladder() -> None:
    # 4 workers 50% ahead of 2: something the CPU share does not explain (threads, caches)
    result, log = _compute_bound({0: 500.0, 1: 480.0, 2: 900.0, 4: 1350.0, 8: 1800.0, 16: 1800.0})
    assert 8 in {config.num_workers for config in log}
    assert result.pick.num_workers > 4


def test_a_dip_up_to_the_core_count_does_not_end_the_ladder() -> None:
    # a noisy low at 2 workers on a 4-core machine: the ladder goes on and finds the rise
    curve = {0: 500.0, 1: 480.0, 2: 400.0, 4: 1800.0, 8: 1850.0, 16: 1800.0}
    settings = SearchSettings(16, usable_cores=4)
    result = Search(
        fake_measure(lambda c: curve.get(c.num_workers, 1000.0)), big_budget(), settings
    ).run()
    assert result.pick.num_workers == 4


def test_proportional_scaling_probes_nothing_below_the_top() -> None:
    # I/O latency: twice the workers, twice the rate, all the way to --max-workers
    log: list[LoaderConfig] = []
    rate = lambda config: 185.0 * max(config.num_workers, 1)  # noqa: E731
    result = Search(fake_measure(rate, log=log), big_budget(), SearchSettings(16)).run()
    assert result.pick.num_workers == 16
    assert {c.num_workers for c in log} == {0, 1, 2, 4, 8, 16}
    assert result.stop_reason == "reached --max-workers 16"


def test_a_peak_between_measured_counts_is_probed() -> None:
    # oversubscribed compute: 3 workers best, 4 clearly worse
    curve = {0: 500.0, 1: 480.0, 2: 900.0, 3: 1000.0, 4: 850.0}
    result = Search(
        fake_measure(lambda c: curve.get(c.num_workers, 800.0)), big_budget(), SearchSettings(16)
    ).run()
    assert result.pick.num_workers == 3


def test_prefetch_is_raised_only_when_it_pays() -> None:
    def rate(config: LoaderConfig) -> float:
        base = starved_at_six(config)
        return base * 1.2 if (config.prefetch_factor or 0) >= 3 else base

    result = Search(fake_measure(rate), big_budget(), SearchSettings(16)).run()
    assert result.pick == LoaderConfig.make(6, 3)  # 4 pays, and 3 pays as much


def test_ties_go_to_the_fewest_workers_and_the_default_prefetch() -> None:
    flat = lambda config: 1000.0 if config.num_workers else 400.0  # noqa: E731
    result = Search(fake_measure(flat), big_budget(), SearchSettings(16)).run()
    assert result.pick == LoaderConfig.make(1, 2)


def test_a_configuration_over_the_budget_is_never_run() -> None:
    log: list[LoaderConfig] = []
    budget = Budget(600 * MiB, 64 * GiB, "test")
    measure = fake_measure(plateau_at_six, main=250 * MiB, per_worker=100 * MiB, log=log)
    search = Search(measure, budget, SearchSettings(16))
    result = search.run()
    model = MemoryModel(main_bytes=250 * MiB, per_worker_bytes=100 * MiB, worker_measured=True)
    for config in log:
        model.batch_bytes = 64 * 1024
        assert model.predict(config)[0] <= budget.memory_bytes, config
    assert all(trial.predicted_bytes <= budget.memory_bytes for trial in result.trials)  # type: ignore[operator]
    # 4 would not fit; 3, between the last that ran and the first over the budget, does
    assert max(config.num_workers for config in log) == 3
    assert result.pick.num_workers == 3
    skipped = {s.config.num_workers: s for s in result.skipped}
    assert 4 in skipped and "memory budget" in skipped[4].reason
    assert skipped[4].predicted_bytes > budget.memory_bytes  # type: ignore[operator]
    assert result.stop_reason == "4 workers would exceed the budget"
    # a shallower queue is never tried: it could not become the pick
    assert LoaderConfig.make(3, 1) not in log


def test_a_worker_is_first_predicted_from_what_the_main_process_grew() -> None:
    model = MemoryModel()
    zero = Trial(
        LoaderConfig.make(0),
        "workers",
        main_start_bytes=300 * MiB,
        main_peak_bytes=450 * MiB,
        batch_bytes=MiB,
    )
    model.update(zero)
    total, shm = model.predict(LoaderConfig.make(2, 2))
    assert model.per_worker_bytes == WORKER_FLOOR_BYTES + 150 * MiB
    assert total == 450 * MiB + 2 * (WORKER_FLOOR_BYTES + 150 * MiB) + 2 * 2 * MiB
    assert shm == 4 * MiB
    measured = Trial(
        LoaderConfig.make(1, 2),
        "workers",
        main_peak_bytes=450 * MiB,
        worker_peak_bytes=[170 * MiB],
        total_peak_bytes=620 * MiB,
        batch_bytes=MiB,
    )
    model.update(measured)
    assert model.per_worker_bytes == 170 * MiB


def test_the_shm_budget_counts_too() -> None:
    assert over_budget(100, 10, Budget(1000, 100, "t")) is None
    assert over_budget(1001, 10, Budget(1000, 100, "t")) == (
        "predicted 1001 B > memory budget 1000 B"
    )
    assert over_budget(100, 101, Budget(1000, 100, "t")) == (
        "predicted /dev/shm 101 B > free shm 100 B"
    )
    assert over_budget(100, 10**12, Budget(1000, None, "t")) is None


def test_the_time_budget_stops_the_search() -> None:
    now = [0.0]

    def clock() -> float:
        return now[0]

    inner = fake_measure(plateau_at_six)

    def measure(config: LoaderConfig, phase: str, guess: int) -> Trial:
        now[0] += 10.0
        trial = inner(config, phase, guess)
        trial.seconds = 10.0
        return trial

    settings = SearchSettings(16, time_budget_s=35.0)
    result = Search(measure, big_budget(), settings, clock=clock).run()
    assert len(result.trials) == 3  # 0, 1, 2: a fourth would end past 35 s
    assert "time budget" in result.stop_reason
    assert result.pick.num_workers == 2


def test_pin_memory_is_searched_only_with_cuda() -> None:
    log: list[LoaderConfig] = []
    Search(fake_measure(plateau_at_six, log=log), big_budget(), SearchSettings(16)).run()
    assert not any(config.pin_memory for config in log)
    log.clear()
    result = Search(
        fake_measure(plateau_at_six, log=log), big_budget(), SearchSettings(16, cuda=True)
    ).run()
    assert any(config.pin_memory for config in log)
    assert result.pick.pin_memory  # as fast, and it speeds the copy tune does not time


def test_progress_reports_every_trial() -> None:
    calls: list[tuple[int, int, str]] = []
    search = Search(
        fake_measure(plateau_at_six),
        big_budget(),
        SearchSettings(4),
        progress=lambda done, planned, label: calls.append((done, planned, label)),
    )
    result = search.run()
    assert calls[0] == (0, calls[0][1], "workers=0")
    assert calls[-1][0] == len(result.trials)
    assert all(done <= planned for done, planned, _ in calls)


@pytest.mark.parametrize(
    ("max_workers", "ladder"),
    [(0, []), (1, [1]), (2, [1, 2]), (12, [1, 2, 4, 8, 12]), (16, [1, 2, 4, 8, 16])],
)
def test_worker_ladder(max_workers: int, ladder: list[int]) -> None:
    assert worker_ladder(max_workers) == ladder


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("600M", 600 * MiB),
        ("600MiB", 600 * MiB),
        ("1.5G", int(1.5 * GiB)),
        ("2g", 2 * GiB),
        ("512k", 512 * 1024),
        ("1048576", MiB),
        (" 4 GB ", 4 * GiB),
        ("64mb", 64 * MiB),
    ],
)
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "M", "lots", "-1G", "0", "1.2.3M", "5X", "1MM"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


def test_config_kwargs_follow_torchs_rules() -> None:
    # torch raises ValueError for prefetch_factor or persistent_workers at 0 workers
    assert LoaderConfig.make(0, 4, True).kwargs() == {"num_workers": 0, "pin_memory": False}
    assert LoaderConfig.make(3, 4, True).kwargs() == {
        "num_workers": 3,
        "prefetch_factor": 4,
        "persistent_workers": True,
        "pin_memory": False,
    }


# -- bounds ---------------------------------------------------------------------------------


def trial(
    workers: int,
    rate: float,
    *,
    cpu_per_sample: float | None = None,
    main_cpu_per_batch: float = 0.0002,
    batch_bytes: int = 8 * 1024,
    batch_size: int = 32,
) -> Trial:
    return Trial(
        LoaderConfig.make(workers, 2),
        "workers",
        samples_per_s=rate,
        batches_per_s=rate / batch_size,
        cpu_per_sample_s=cpu_per_sample,
        main_cpu_per_batch_s=main_cpu_per_batch,
        batch_bytes=batch_bytes,
    )


def test_bound_compute() -> None:
    trials = [trial(0, 500, cpu_per_sample=0.00198), trial(1, 480), trial(2, 950), trial(4, 960)]
    bound = analyze(trials, LoaderConfig.make(2, 2), usable_cores=2)
    assert bound.id == "compute"
    assert bound.evidence[0] == (
        "at 0 workers one sample takes 2.00 ms: 1.98 ms on the CPU, "
        "1% of it waiting on something else (I/O, sleep)"
    )
    assert (
        bound.evidence[1]
        == "2 workers: 950 samples/s, 1.90x the 0-worker 500 samples/s, on 2 usable cores"
    )
    assert bound.title == BOUNDS["compute"].title and bound.fixes == list(BOUNDS["compute"].fixes)


def test_bound_io_latency_off_cpu() -> None:
    trials = [trial(0, 185, cpu_per_sample=0.0004), trial(8, 1480), trial(16, 2960)]
    bound = analyze(trials, LoaderConfig.make(16, 2), usable_cores=2)
    assert bound.id == "io-latency"
    assert bound.evidence[0].endswith(
        "0.40 ms on the CPU, 93% of it waiting on something else (I/O, sleep)"
    )


def test_time_queued_for_a_cpu_is_not_io() -> None:
    # half of each sample's 2 ms in the run queue: other processes, not I/O
    zero = trial(0, 500, cpu_per_sample=0.001)
    zero.run_queue_per_sample_s = 0.0009
    bound = analyze([zero, trial(1, 480), trial(2, 950)], LoaderConfig.make(2, 2), 2)
    assert bound.id == "compute"
    assert bound.evidence[0] == (
        "at 0 workers one sample takes 2.00 ms: 1.00 ms on the CPU, 0.90 ms queued for a CPU "
        "(other processes), 5% of it waiting on something else (I/O, sleep)"
    )


def test_bound_io_latency_by_scaling_past_the_cores() -> None:
    # 60% on the CPU at 0 workers (a polling client), but workers past the cores keep helping
    trials = [trial(0, 200, cpu_per_sample=0.003), trial(2, 400), trial(8, 1500)]
    bound = analyze(trials, LoaderConfig.make(8, 2), usable_cores=2)
    assert bound.id == "io-latency"
    assert "past 2 cores the best rate is 275% above the best at up to 2 workers" in bound.evidence


def test_cpu_bound_samples_scaling_past_the_cores_is_contention() -> None:
    trials = [trial(0, 500, cpu_per_sample=0.00195), trial(2, 800), trial(4, 1100)]
    bound = analyze(trials, LoaderConfig.make(4, 2), usable_cores=2)
    assert bound.id == "compute"
    assert "other processes share these cores" in bound.evidence[-1]


def test_bound_main_process_and_transfer() -> None:
    # the main thread busy 90% of the time taking batches
    small = [trial(0, 500, cpu_per_sample=0.001), trial(4, 3200, main_cpu_per_batch=0.009)]
    assert analyze(small, LoaderConfig.make(4, 2), usable_cores=4).id == "main-process"
    large = [
        trial(0, 500, cpu_per_sample=0.001, batch_bytes=8 * MiB),
        trial(4, 3200, main_cpu_per_batch=0.009, batch_bytes=8 * MiB),
    ]
    assert analyze(large, LoaderConfig.make(4, 2), usable_cores=4).id == "transfer"


def test_bound_transfer_by_poor_scaling_with_big_batches() -> None:
    trials = [
        trial(0, 1000, cpu_per_sample=0.001, batch_bytes=16 * MiB),
        trial(2, 800, batch_bytes=16 * MiB),
    ]
    bound = analyze(trials, LoaderConfig.make(2, 2), usable_cores=2)
    assert bound.id == "transfer"
    assert (
        "workers reach 40% of 2 cores x the 0-worker rate with 16.0 MiB batches" in bound.evidence
    )


def test_bound_zero_workers_best() -> None:
    trials = [trial(0, 1600, cpu_per_sample=0.0006), trial(1, 1100), trial(2, 1050)]
    bound = analyze(trials, LoaderConfig.make(0), usable_cores=2)
    assert bound.id == "main-process"
    assert bound.evidence[-1].startswith("no worker count beat 0 workers")


def test_bound_names_skipped_larger_configurations() -> None:
    trials = [trial(0, 185, cpu_per_sample=0.0004), trial(2, 370)]
    skipped = [Skipped(LoaderConfig.make(4, 2), "predicted 1 GiB > memory budget", 1, 0)]
    bound = analyze(trials, LoaderConfig.make(2, 2), usable_cores=2, skipped=skipped)
    assert "1 larger configurations were not run: over the memory or shm budget" in bound.evidence


def test_nothing_measured_is_no_bound_but_its_reason_and_one_fix() -> None:
    skipped = [Skipped(LoaderConfig.make(0), "predicted 1 GiB > memory budget", 1, 0)]
    over = analyze([], LoaderConfig.make(0), usable_cores=2, skipped=skipped)
    assert (over.id, over.title, over.fixes) == (
        "nothing-measured",
        "nothing measured: every configuration was predicted or measured past the memory budget",
        ["Raise --mem-budget, or lower --batch-size or the memory one sample takes."],
    )
    broken = trial(2, 0)
    broken.status, broken.note = "failed", "worker 1 died: native-crash"
    failed = analyze([broken], LoaderConfig.make(2, 2), usable_cores=2)
    assert failed.title == "nothing measured: every trial failed (its note above says how)"
    assert failed.evidence[-1] == "workers=2 prefetch=2: failed, worker 1 died: native-crash"
    assert len(failed.fixes) == 1
    none = analyze([], LoaderConfig.make(0), usable_cores=2)
    assert none.title == "nothing measured: no trial ran within the time budget"
    assert none.fixes == [
        "Give the search more time: a larger --time-budget, or a shorter --window."
    ]


def test_a_report_with_nothing_measured_names_no_bound_and_no_compute_fix() -> None:
    broken = trial(0, 0)
    broken.status, broken.note = "failed", "the loader raised"
    report = sample_report(
        trials=[broken], skipped=[], bound=analyze([broken], LoaderConfig.make(0), 2)
    )
    text = format_text(report)
    assert "bound:" not in text and "compute" not in text
    lines = text.splitlines()
    assert "nothing measured: every trial failed (its note above says how)" in lines
    assert lines[-1] == (
        "nothing measured: every trial failed (its note above says how); fix what the failed "
        "trial names (`loaderdoctor run` on a script that loads this dataset gives its "
        "verdict), then tune again."
    )


# -- renderers ------------------------------------------------------------------------------


def sample_report(**changes: object) -> TuneReport:
    trials = [
        trial(0, 185.4, cpu_per_sample=0.0004),
        trial(8, 1480.0),
        trial(16, 2960.2),
    ]
    for item in trials:
        item.main_peak_bytes = 220 * MiB
        item.worker_peak_bytes = [15 * MiB] * item.config.num_workers
        item.total_peak_bytes = 220 * MiB + 15 * MiB * item.config.num_workers
        item.startup_s = 0.25
    values: dict[str, object] = dict(
        spec="data.py:train",
        batch_size=32,
        dataset_length=20000,
        usable_cores=2,
        max_workers=16,
        cuda=False,
        budget=Budget(20 * GiB, 21 * GiB, "host memory available 22.7 GiB minus a 2.3 GiB margin"),
        trials=trials,
        skipped=[Skipped(LoaderConfig.make(16, 4), "predicted 30.0 GiB > memory budget 20.0 GiB")],
        recommended=LoaderConfig.make(16, 2, persistent=True),
        recommended_samples_per_s=2960.2,
        bound=analyze(trials, LoaderConfig.make(16, 2), 2),
        startup=Startup(0.56, 0.19, 6.8, True, "re-starting workers costs 0.37 s per epoch"),
        seconds=18.1,
        grid_size=65,
        stop_reason="reached --max-workers 16",
    )
    values.update(changes)
    return TuneReport(**values)  # type: ignore[arg-type]


def test_snippet_exact() -> None:
    assert format_snippet(sample_report()) == (
        "loader = DataLoader(\n"
        "    dataset,\n"
        "    batch_size=32,\n"
        "    num_workers=16,\n"
        "    prefetch_factor=2,\n"
        "    persistent_workers=True,\n"
        "    pin_memory=False,\n"
        ")\n"
    )
    zero = sample_report(recommended=LoaderConfig.make(0), collate="collate.py:pad")
    assert format_snippet(zero) == (
        "loader = DataLoader(\n"
        "    dataset,\n"
        "    batch_size=32,\n"
        "    num_workers=0,\n"
        "    pin_memory=False,\n"
        "    collate_fn=pad,  # from collate.py:pad\n"
        ")\n"
    )
    ast.parse(format_snippet(zero))


def test_json_round_trip() -> None:
    soak = summarize(
        [
            SoakEpoch(0, 2900.0, 0.5, 7.0, [15 * MiB, 16 * MiB], 220 * MiB),
            SoakEpoch(1, 3100.0, 0.2, 6.6, [25 * MiB, 16 * MiB], 221 * MiB),
        ]
    )
    report = sample_report(soak=soak, notes=["a note"])
    data = json.loads(format_json(report))
    assert data["dataloader_kwargs"] == {
        "batch_size": 32,
        "num_workers": 16,
        "prefetch_factor": 2,
        "persistent_workers": True,
        "pin_memory": False,
    }
    assert data["snippet"] == format_snippet(report)
    assert TuneReport.from_dict(data) == report
    with pytest.raises(ValueError, match="schema"):
        TuneReport.from_dict({**data, "schema": 99})


def test_soak_summary() -> None:
    soak = summarize(
        [
            SoakEpoch(0, 100.0, 0.5, 7.0, [10 * MiB, 12 * MiB], 200 * MiB),
            SoakEpoch(1, 110.0, 0.2, 6.6, [14 * MiB, 12 * MiB], 200 * MiB),
            SoakEpoch(2, 90.0, 0.2, 6.6, [20 * MiB, 13 * MiB], 210 * MiB),
        ]
    )
    assert soak.mean_samples_per_s == pytest.approx(100.0)
    assert soak.cv == pytest.approx(0.0816, abs=1e-3)
    assert soak.worker_growth_bytes == [10 * MiB, 1 * MiB]
    assert soak.main_growth_bytes == 10 * MiB
    assert summarize([]) == Soak([], 0.0, 0.0, [], 0, None)


def test_text_report(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    with path.open("w") as handle:
        print_text(sample_report(), handle)
    text = path.read_text()
    assert text.startswith(
        "tune data.py:train: batch_size 32, 2 usable cores, workers up to 16, memory budget "
        "20.0 GiB (host memory available 22.7 GiB minus a 2.3 GiB margin), shm budget 21.0 GiB\n"
        "ran 3 trials (3 configurations of the 65-configuration grid) in 18.1 s; "
        "reached --max-workers 16\n"
    )
    assert (
        "    *16   2          workers        2960         0.25    220           15     460     0   ok"
    ) in [line.rstrip() for line in text.splitlines()]
    assert "not run (over budget):\n  workers=16 prefetch=4: predicted 30.0 GiB" in text
    assert "bound: io-latency - I/O latency" in text
    assert "epoch start-up: 0.56 s with fresh workers, 0.19 s with persistent ones" in text
    assert text.endswith(
        "recommended (2960 samples/s steady state):\n" + format_snippet(sample_report())
    )


def test_without_a_kernel_limit_every_report_says_the_pick_is_conservative() -> None:
    why = "cannot make a child of memory cgroup /job (needs root)"
    note = conservative_note(why)
    assert note == (
        "the pick is conservative: cannot make a child of memory cgroup /job (needs root), so "
        "no trial's workers could run under a memory limit the kernel enforces; a configuration "
        "whose predicted memory exceeds the budget was not tried (the watcher sees memory only "
        "now and then, and a trial could pass the budget between two looks), and one that fits "
        "may have been left out with it"
    )
    report = sample_report(notes=[note], conservative=note)
    assert f"note: {note}\n" in format_text(report, width=1000)
    data = json.loads(format_json(report))
    assert data["conservative"] == note and data["memory_limit"] is None
    assert data["notes"] == [note]
    assert f"<li>{html.escape(note)}</li>" in format_html(report)


def test_a_trial_the_kernel_stopped_is_reported_with_its_evidence() -> None:
    stopped = Trial(
        LoaderConfig.make(7),
        "refine",
        status="does-not-fit",
        note="does not fit: the kernel stopped a worker in the trial's memory cgroup (cgroup "
        "limit 1.5 GiB: 1 OOM kill(s); kernel: Memory cgroup out of memory: Killed process 42 "
        "(pt_data_worker))",
        cgroup_limit_bytes=1536 * MiB,
        cgroup_peak_bytes=1536 * MiB,
    )
    report = sample_report(memory_limit="cgroup v1, children of /job")
    report.trials.append(stopped)
    lines = [line.rstrip() for line in format_text(report, width=1000).splitlines()]
    assert lines[8].split() == ["7", "2", "refine", "-", "0.00", "0", "-", "0", "0", "does-not-fit"]
    assert f"trial 4 (workers=7 prefetch=2): {stopped.note}" in lines
    shown = html.escape(f"trial 4 (workers=7 prefetch=2): {stopped.note}")
    assert f"<li>{shown}</li>" in format_html(report)
    assert TuneReport.from_json(report.to_json()) == report


def test_plots(tmp_path: Path) -> None:
    report = sample_report()
    page = format_html(report)
    assert page.count("<svg") == 2 and "prefetch_factor=2" in page
    assert "loader = DataLoader(" in page and "http" not in page.replace(
        'xmlns="http://www.w3.org/2000/svg"', ""
    )
    ElementTree.fromstring(format_svg(report))  # well-formed standalone SVG
    for suffix in (".html", ".svg", ".png"):
        written = write_plot(report, str(tmp_path / f"tune{suffix}"))
        assert written.stat().st_size > 1000
    from PIL import Image

    with Image.open(tmp_path / "tune.png") as image:
        assert image.size == (940, 560)
        # the throughput line is drawn: the palette's first colour is there
        assert (31, 119, 180) in {color for _, color in image.getcolors(1 << 20) or []}
    with pytest.raises(ValueError, match="--plot takes"):
        write_plot(report, str(tmp_path / "tune.pdf"))


def test_bound_catalog_is_complete() -> None:
    assert set(BOUNDS) == {"compute", "io-latency", "transfer", "main-process"}
    for spec in BOUNDS.values():
        assert spec.title and spec.explanation and spec.fixes
    assert Bound("x", "y").evidence == []


# -- real measurements, in this process -----------------------------------------------------


class Counting:
    """A tiny map-style dataset: 0.5 ms of waiting and a 16-float tensor per sample."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int):  # type: ignore[no-untyped-def]
        import time

        import torch

        time.sleep(0.0005)
        return torch.full((16,), float(index))


@pytest.mark.slow
def test_measure_with_workers() -> None:
    from loaderdoctor.tune import MeasureSettings, measure

    settings = MeasureSettings(batch_size=4, window_s=0.3)
    result = measure(Counting(), LoaderConfig.make(2, 2), settings)
    assert result.ok, result.note
    # two pipelines' worth (2 workers x prefetch_factor 2) arrived, the first batch included
    assert result.samples_per_s > 0 and result.batches >= 2 * 4 - 1
    assert result.samples_per_s == pytest.approx(4 * result.batches_per_s)
    assert result.batch_bytes == 4 * 16 * 4
    assert len(result.worker_peak_bytes) == 2 and min(result.worker_peak_bytes) > 0
    # the peak total is of one moment: at most the sum of each part's own peak
    parts = result.main_peak_bytes + sum(result.worker_peak_bytes) + result.shm_peak_bytes
    assert result.main_peak_bytes < result.total_peak_bytes <= parts
    assert result.startup_s > 0 and result.seconds > result.window_s


def test_a_trial_over_the_budget_is_stopped() -> None:
    from loaderdoctor.tune import MeasureSettings, measure

    settings = MeasureSettings(batch_size=4, window_s=5.0, sample_interval_s=0.02)
    result = measure(Counting(), LoaderConfig.make(0), settings, budget_bytes=1)
    assert result.status == "aborted"
    assert (result.note or "").startswith("stopped: ") and "> budget 1 B" in (result.note or "")
    assert result.window_s < 1.0  # long before the 5 s window


def test_a_failing_dataset_at_0_workers_is_a_dataset_error() -> None:
    from loaderdoctor.tune import DatasetError, MeasureSettings, measure

    class Broken(Counting):
        def __getitem__(self, index: int):  # type: ignore[no-untyped-def]
            raise ValueError(f"bad sample {index}")

    with pytest.raises(DatasetError, match="ValueError: bad sample 0"):
        measure(Broken(), LoaderConfig.make(0), MeasureSettings(batch_size=4))


def test_a_small_prefetch_gain_keeps_torchs_default() -> None:
    def rate(config: LoaderConfig) -> float:
        base = starved_at_six(config)
        return base * 1.05 if (config.prefetch_factor or 0) >= 3 else base

    log: list[LoaderConfig] = []
    result = Search(fake_measure(rate, log=log), big_budget(), SearchSettings(16)).run()
    assert LoaderConfig.make(6, 4) in log
    assert result.pick == LoaderConfig.make(6, 2)


def test_workers_busy_all_the_time_are_not_tried_with_a_deeper_queue() -> None:
    # 6 workers deliver 6 times what one does: none ever waits for an index to be handed out
    log: list[LoaderConfig] = []
    result = Search(fake_measure(plateau_at_six, log=log), big_budget(), SearchSettings(16)).run()
    assert result.pick == LoaderConfig.make(6, 2)
    assert all(config.prefetch_factor == 2 for config in log if config.num_workers)
    assert (
        "prefetch_factor kept at torch's default: 6 workers deliver 100% of 6 times the best "
        "rate one worker was measured at, so every worker is busy all the time and a deeper "
        "queue cannot gain what it would take to be picked"
    ) in result.notes


def test_a_contended_machine_is_noted() -> None:
    from loaderdoctor.tune.core import _contention

    zero = trial(0, 250, cpu_per_sample=0.002)
    assert _contention([zero]) is None  # no run-queue figure
    zero.run_queue_per_sample_s = 0.0002  # 5% of 4 ms
    assert _contention([zero]) is None
    zero.run_queue_per_sample_s = 0.0016  # 40% of 4 ms
    note = _contention([zero, trial(2, 900)])
    assert note is not None and note.startswith(
        "at 0 workers the main process waited for a CPU 40%"
    )


def test_the_start_up_share_adds_up() -> None:
    """0.32 s saved of an epoch of 0.2 s steady state plus 0.43 s start-up: 0.32 / 0.63."""
    from loaderdoctor.tune.core import startup_verdict

    assert startup_verdict(0.43, 0.11, 0.2) == (
        True,
        "re-starting workers costs 0.32 s of an epoch's 0.63 s with fresh workers (50.8%): "
        "keep them (persistent_workers=True)",
    )
    assert startup_verdict(0.43, 0.42, 9.57) == (
        False,
        "re-starting workers costs 0.01 s of an epoch's 10.00 s with fresh workers (0.1%): "
        "not worth keeping them between epochs",
    )
