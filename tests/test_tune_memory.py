"""The fitted memory model and the search at the memory budget's edge, on recorded and
synthetic measurements (no process is started, nothing is timed)."""

from __future__ import annotations

import os

import pytest

from loaderdoctor.tune import Budget, LoaderConfig, MemoryModel, Search, SearchSettings, Trial
from loaderdoctor.tune.budget import fit_line, over_budget

MiB = 1024 * 1024
# Recorded on the 2-core machine at load 11 (benchmarks/tune.py's memory-bound set: each process
# that loads holds 256 MiB): (workers, total peak MiB, each worker's private MiB).
RECORDED = [
    (1, 809, [270]),
    (2, 1079, [269, 270]),
    (4, 1625, [274, 273, 270, 271]),
    (6, 2190, [274, 277, 273, 277, 278, 333]),
]


def recorded_trial(workers: int, total: int, peaks: list[int]) -> Trial:
    return Trial(
        LoaderConfig.make(workers),
        "workers",
        samples_per_s=200.0 * workers,
        main_start_bytes=539 * MiB,
        main_peak_bytes=539 * MiB,
        worker_peak_bytes=[p * MiB for p in peaks],
        total_peak_bytes=total * MiB,
    )


def test_fit_line_is_least_squares_with_the_residual_spread() -> None:
    assert fit_line([(1, 10)]) is None
    assert fit_line([(2, 10), (2, 12)]) is None  # one worker count: no slope
    assert fit_line([(1, 10), (3, 30)]) == (0, 10, 0)
    # residuals +1, -2, +1 about 10 + 10 w: spread sqrt(6 / 1)
    assert fit_line([(1, 21), (2, 28), (3, 41)]) == (10, 10, 2)


def test_the_model_predicts_from_the_line_not_from_the_largest_worker() -> None:
    model = MemoryModel()
    for row in RECORDED:
        model.update(recorded_trial(*row))
    fixed, per_worker, spread = fit_line([(w, t * MiB) for w, t, _ in RECORDED])
    assert (model.fixed_bytes, model.per_worker_bytes, model.spread_bytes) == (
        fixed,
        per_worker,
        spread,
    )
    assert 270 * MiB < per_worker < 280 * MiB  # the largest worker seen was 333 MiB
    total, _shm = model.predict(LoaderConfig.make(7))
    assert total == fixed + 7 * per_worker
    # the error grows away from the measured counts
    near = model.uncertainty(LoaderConfig.make(4))
    far = model.uncertainty(LoaderConfig.make(16))
    assert 0 < near < far


def test_two_counts_take_their_uncertainty_from_the_workers_scatter() -> None:
    model = MemoryModel()
    model.update(recorded_trial(1, 809, [270]))
    assert model.fixed_bytes is None and model.per_worker_bytes == 270 * MiB  # one count
    model.update(recorded_trial(2, 1079, [269, 331]))
    assert model.per_worker_bytes == 270 * MiB and model.fixed_bytes == 539 * MiB
    assert model.spread_bytes == 62 * MiB
    assert model.uncertainty(LoaderConfig.make(2)) > 0


def edge_measure(main: int, per_worker: int, outlier: int, budget: int, log: list[LoaderConfig]):  # type: ignore[no-untyped-def]
    """Rates in proportion to the workers (I/O latency); one worker per trial uses ``outlier``
    more than the rest, as a busy machine's samples do; a trial over ``budget`` is stopped, as
    the trial's watcher stops it."""

    def measure(config: LoaderConfig, phase: str, _guess: int) -> Trial:
        log.append(config)
        workers = config.num_workers
        peaks = [per_worker] * workers
        if workers >= 2:
            peaks[-1] += outlier
        total = main + sum(peaks)
        trial = Trial(
            config,
            phase,
            samples_per_s=100.0 * max(workers, 1),
            batches_per_s=100.0 * max(workers, 1) / 32,
            main_start_bytes=main,
            main_peak_bytes=main,
            worker_peak_bytes=peaks,
            total_peak_bytes=min(total, budget + MiB),
        )
        if total > budget:
            trial.status, trial.samples_per_s, trial.note = "aborted", 0.0, "over the budget"
        return trial

    return measure


def test_the_search_reaches_the_budgets_edge_despite_a_large_worker() -> None:
    # 6 workers fit, 7 do not; one worker of each trial is 129 MiB larger. Predicting every
    # worker from the largest (401 MiB) stopped at 4 workers: 0.623 of the best.
    main, per_worker, outlier = 539 * MiB, 272 * MiB, 129 * MiB
    budget = main + 6 * per_worker + outlier + 100 * MiB
    log: list[LoaderConfig] = []
    measure = edge_measure(main, per_worker, outlier, budget, log)
    result = Search(measure, Budget(budget, None, "test"), SearchSettings(16, 2)).run()
    assert result.pick == LoaderConfig.make(6)
    assert 16 not in {c.num_workers for c in log}  # certainly over: never started


def test_a_count_predicted_over_the_budget_is_never_started() -> None:
    # 7 workers predicted just over the budget: never started (the watcher could see the
    # overshoot too late), and the pick stays at 6
    main, per_worker, outlier = 539 * MiB, 272 * MiB, 129 * MiB
    budget = main + 7 * per_worker + outlier - 40 * MiB
    log: list[LoaderConfig] = []
    measure = edge_measure(main, per_worker, outlier, budget, log)
    search = Search(measure, Budget(budget, None, "test"), SearchSettings(16, 2))
    result = search.run()
    assert 7 not in {c.num_workers for c in log}
    sevens = [s for s in result.skipped if s.config.num_workers == 7]
    assert sevens and all(s.predicted_bytes > budget for s in sevens)
    assert result.pick == LoaderConfig.make(6)


@pytest.mark.parametrize("workers", [1, 3, 5])
def test_most_workers_is_the_largest_count_predicted_to_fit(workers: int) -> None:
    model = MemoryModel(main_bytes=100 * MiB, per_worker_bytes=50 * MiB, worker_measured=True)
    budget = Budget(100 * MiB + workers * 50 * MiB, None, "test")
    assert model.most_workers(budget, 16) == workers
    assert model.most_workers(budget, workers) == (workers - 1 or None)


def test_a_worker_never_read_is_not_charged_what_the_others_hold_twice() -> None:
    # recorded on the benchmark's memory-bound set: a worker is first seen at 441 MiB of RSS
    # (9 MiB private); once it built its 256 MiB block its RSS is 714 MiB and its USS 265 MiB.
    # One worker's USS was read after its block; the other's not yet: it has grown as much, so
    # it holds about as much, not the read one's 265 MiB plus its own growth of 273 MiB.
    from loaderdoctor.tune.sampler import TrialSampler, _Worker

    sampler = TrialSampler(None, 32 * MiB, 0.1)
    read = _Worker(1, first_rss=441 * MiB, uss=265 * MiB, rss_at_uss=714 * MiB)
    unread = _Worker(2, first_rss=441 * MiB)
    assert sampler._estimate_workers([(read, 714 * MiB), (unread, 714 * MiB)]) == 538 * MiB
    assert (read.peak, unread.peak) == (265 * MiB, 273 * MiB)
    # one not grown yet is charged what the others hold: it may be about to build the same
    fresh = _Worker(3, first_rss=441 * MiB)
    assert sampler._estimate_workers([(read, 714 * MiB), (fresh, 441 * MiB)]) == 530 * MiB
    # with no USS read yet, the guess it was given, or its growth when that is more
    alone = _Worker(4, first_rss=441 * MiB)
    assert sampler._estimate_workers([(alone, 714 * MiB)]) == 273 * MiB


def test_a_workers_usage_is_read_with_the_rss_of_the_same_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the watcher looked at the worker's RSS (441 MiB), then read its USS: in between the worker
    # built its 256 MiB block, so the read says 265 MiB at 714 MiB of RSS. Growth is counted
    # from the read's own RSS, or the block is charged twice (538 MiB).
    from loaderdoctor.tune import sampler as sampler_module
    from loaderdoctor.tune.sampler import TrialSampler, _Worker, read_uss

    monkeypatch.setattr(sampler_module, "read_uss", lambda pid: (265 * MiB, 714 * MiB))
    sampler = TrialSampler(None, 32 * MiB, 0.1)
    worker = _Worker(7, first_rss=441 * MiB)
    sampler._read_uss([(worker, 441 * MiB)], now=1.0, read_all=False)
    assert sampler._estimate_workers([(worker, 714 * MiB)]) == 265 * MiB
    monkeypatch.undo()
    private, rss = read_uss(os.getpid()) or (0, 0)
    assert 0 < private <= rss


def kernel_measure(main: int, per_worker: int, outlier: int, budget: int, log: list[LoaderConfig]):  # type: ignore[no-untyped-def]
    """``edge_measure``, but a trial over ``budget`` is stopped as the kernel stops it: at the
    limit of the trial's memory cgroup, ``does-not-fit``."""
    inner = edge_measure(main, per_worker, outlier, 1 << 50, log)

    def measure(config: LoaderConfig, phase: str, guess: int) -> Trial:
        trial = inner(config, phase, guess)
        if trial.total_peak_bytes > budget:
            trial.status, trial.samples_per_s = "does-not-fit", 0.0
            trial.note, trial.total_peak_bytes = "does not fit: the kernel stopped it", budget
        return trial

    return measure


def kernel_search(budget: int, log: list[LoaderConfig], *, kernel: bool) -> Search:
    main, per_worker, outlier = 539 * MiB, 272 * MiB, 129 * MiB
    settings = SearchSettings(16, 2, kernel_limit=kernel)
    if kernel:
        measure = kernel_measure(main, per_worker, outlier, budget, log)
    else:
        measure = edge_measure(main, per_worker, outlier, budget, log)
    return Search(measure, Budget(budget, None, "test"), settings)


def test_under_the_kernels_limit_a_count_that_may_fit_is_measured() -> None:
    # 7 workers fit by 10 MiB, but the line through 1, 2, 4 and 6 workers puts them over: a
    # watched search never starts them; under the kernel's limit they are measured and picked
    budget = 539 * MiB + 7 * 272 * MiB + 129 * MiB + 10 * MiB
    watched: list[LoaderConfig] = []
    result = kernel_search(budget, watched, kernel=False).run()
    assert result.pick == LoaderConfig.make(6)
    assert 7 not in {c.num_workers for c in watched}
    limited: list[LoaderConfig] = []
    result = kernel_search(budget, limited, kernel=True).run()
    assert result.pick == LoaderConfig.make(7)
    assert all(t.ok for t in result.trials)
    # 8 workers: even half a worker below the prediction is over the budget
    assert {c.num_workers for c in limited} <= {0, 1, 2, 4, 6, 7}
    (eight,) = [s for s in result.skipped if s.config.num_workers == 8]
    assert eight.reason.startswith("predicted at least ") and eight.predicted_bytes > budget


def test_a_count_the_kernel_stopped_is_not_run_again_and_moves_no_line() -> None:
    # 7 workers are 40 MiB over: measured once, stopped by the kernel; its half-allocated
    # workers leave the fitted line alone, so 6 workers stay predicted to fit (a deeper
    # queue at 6 too) and stay the pick
    budget = 539 * MiB + 7 * 272 * MiB + 129 * MiB - 40 * MiB
    log: list[LoaderConfig] = []
    search = kernel_search(budget, log, kernel=True)
    result = search.run()
    sevens = [t for t in result.trials if t.config.num_workers == 7]
    assert [t.status for t in sevens] == ["does-not-fit"]
    assert result.pick == LoaderConfig.make(6)
    assert search._does_not_fit(LoaderConfig.make(6, 4))[0] is None
    assert not [s for s in result.skipped if s.config.num_workers == 6]


def test_under_the_kernels_limit_the_model_counts_what_the_kernel_charged() -> None:
    # the watcher put 4 workers at 309-340 MiB between its reads; the kernel charged their
    # cgroup 258 MiB each: the line goes through the kernel's count, and 8 workers that fit a
    # 2.6 GiB budget beside a 405 MiB main process are predicted to fit
    model = MemoryModel()
    for workers, estimate in ((1, 276), (2, 300), (4, 330)):
        model.update(
            Trial(
                LoaderConfig.make(workers),
                "workers",
                main_peak_bytes=405 * MiB,
                worker_peak_bytes=[estimate * MiB] * workers,
                total_peak_bytes=(405 + estimate * workers) * MiB,
                cgroup_limit_bytes=2200 * MiB,
                cgroup_peak_bytes=258 * MiB * workers,
            )
        )
    total, _shm = model.predict(LoaderConfig.make(8))
    assert total == pytest.approx((405 + 8 * 258) * MiB, rel=0.001)
    assert over_budget(total, 0, Budget(2600 * MiB, None, "test")) is None
