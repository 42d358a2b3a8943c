"""Memory that keeps growing over a session (`memory_growing`): a least-squares rate in GiB/day
over a history kept bounded, given only once the history spans enough time, and told from
noise and from one step of the allocator's cache."""

from __future__ import annotations

import json
import random
from dataclasses import replace

from kvtop.model.memory.growth_rate import MAX_BUCKETS, GrowthSeries, growth_rate
from kvtop.model.snapshot import GpuView, Snapshot
from kvtop.model.status.judge import with_alerts
from kvtop.model.status.levels import Alert, Level, Thresholds
from kvtop.model.status.memory_growth import growth_line
from kvtop.model.status.watch import Watch, judged
from kvtop.report.json_report import snapshot_json
from tests.support.still import still_snapshot

PLAIN = still_snapshot()
HOUR = 3600.0
DAY = 86_400.0


# -- the rate --------------------------------------------------------------------------------
def test_a_steady_climb_reads_as_its_rate_per_day() -> None:
    series = GrowthSeries()
    for minute in range(0, 6 * 60):
        series.add(minute * 60.0, 10.0 + 3.0 * minute * 60 / DAY)  # 3 GiB/day
    rate = growth_rate(series, 3 * HOUR)
    assert rate.gib_per_day is not None and abs(rate.gib_per_day - 3.0) < 1e-6
    assert rate.steady
    assert rate.span_s == 359 * 60


def test_a_noisy_flat_line_is_flat() -> None:
    noise = random.Random(7)
    series = GrowthSeries()
    for minute in range(0, 6 * 60):
        series.add(minute * 60.0, 12.0 + noise.uniform(-0.25, 0.25))  # allocator breathing
    rate = growth_rate(series, 3 * HOUR)
    assert rate.gib_per_day is not None and abs(rate.gib_per_day) < 0.2


def test_one_step_of_the_allocators_cache_is_not_a_climb() -> None:
    # 2 GiB cached once, in the middle of six hours: a line through it says 8 GiB/day, but
    # neither half grows.
    series = GrowthSeries()
    for minute in range(0, 6 * 60):
        series.add(minute * 60.0, 10.0 if minute < 180 else 12.0)
    rate = growth_rate(series, 3 * HOUR)
    assert rate.gib_per_day is not None and rate.gib_per_day > 5
    assert not rate.steady


def test_no_rate_before_the_history_spans_enough() -> None:
    series = GrowthSeries()
    for minute in range(0, 179):
        series.add(minute * 60.0, 10.0 + minute)
    rate = growth_rate(series, 3 * HOUR)
    assert rate.gib_per_day is None
    assert rate.span_s == 178 * 60


def test_a_week_at_one_reading_a_second_stays_bounded() -> None:
    series = GrowthSeries()
    week = 7 * 86_400
    for second in range(week):
        series.add(float(second), 20.0 + 2.5 * second / DAY)
        assert series.buckets <= MAX_BUCKETS + 1
    rate = growth_rate(series, 3 * HOUR)
    assert series.buckets <= MAX_BUCKETS
    assert rate.gib_per_day is not None and abs(rate.gib_per_day - 2.5) < 1e-3
    assert rate.span_s == week - 1


def test_a_clock_that_goes_back_starts_again() -> None:
    series = GrowthSeries()
    for minute in range(0, 240):
        series.add(1000 + minute * 60.0, float(minute))
    series.add(10.0, 5.0)
    assert series.span_s == 0.0 and series.buckets == 1


def test_the_fit_is_kept_until_a_bucket_begins() -> None:
    # Past the first merges a bucket covers several readings: one that joins the last bucket
    # does not fit 256 buckets again; one that begins a bucket does, and gives what a fresh
    # series of the same readings gives.
    series = GrowthSeries()
    readings = [(float(s), 20.0 + 4.0 * s / DAY) for s in range(0, 4 * 3600, 10)]
    for at_s, gib in readings:
        series.add(at_s, gib)
    first = growth_rate(series, 3 * HOUR)
    kept = series.fitted()
    buckets = series.buckets
    last_at = readings[-1][0]
    series.add(last_at + 1.0, 99.0)  # joins the last bucket: the fit is the one kept
    assert series.buckets == buckets and series.fitted() is kept
    joined = growth_rate(series, 3 * HOUR)
    assert joined.gib_per_day == first.gib_per_day and joined.latest_gib == 99.0
    at_s = last_at + 1.0
    while series.buckets == buckets:  # readings until one begins a bucket
        at_s += 10.0
        series.add(at_s, 20.0 + 4.0 * at_s / DAY)
    assert series.fitted() is not kept
    fresh = GrowthSeries()
    for t, gib in [*readings, (last_at + 1.0, 99.0)]:
        fresh.add(t, gib)
    t = last_at + 1.0
    while t < at_s:
        t += 10.0
        fresh.add(t, 20.0 + 4.0 * t / DAY)
    assert growth_rate(series, 3 * HOUR) == growth_rate(fresh, 3 * HOUR)


def test_a_cleared_series_forgets_its_fit() -> None:
    series = GrowthSeries()
    for minute in range(0, 6 * 60):
        series.add(minute * 60.0, 10.0 + 3.0 * minute * 60 / DAY)
    assert growth_rate(series, 3 * HOUR).gib_per_day is not None
    series.clear()
    for minute in range(0, 6 * 60):  # the same bucket count and width, another line
        series.add(minute * 60.0, 10.0 - 2.0 * minute * 60 / DAY)
    rate = growth_rate(series, 3 * HOUR)
    assert rate.gib_per_day is not None and abs(rate.gib_per_day + 2.0) < 1e-6


# -- the watch -------------------------------------------------------------------------------
def _gpu(gpu: GpuView, runtime_gib: float, rss_gib: float) -> GpuView:
    processes = tuple(replace(p, rss_gib=rss_gib) for p in gpu.processes)
    return replace(gpu, memory=replace(gpu.memory, runtime_gib=runtime_gib), processes=processes)


def at(hours: float, gpu0_runtime: float, tp1_rss: float = 7.15) -> Snapshot:
    """The demo at HOURS: GPU 0's runtime memory and TP1's resident memory as given, the rest
    as they were."""
    gpus = list(PLAIN.gpus)
    gpus[0] = _gpu(gpus[0], gpu0_runtime, 7.1)
    gpus[1] = _gpu(gpus[1], gpus[1].memory.runtime_gib or 0.0, tp1_rss)
    return replace(PLAIN, gpus=tuple(gpus), taken_at=PLAIN.taken_at + hours * HOUR)


def session(per_day: float, hours: float = 6, host_per_day: float = 0.0) -> list[Snapshot]:
    steps = int(hours * 12)  # every 5 minutes
    return [
        at(i / 12, 0.25 + per_day * i / 12 / 24, 7.15 + host_per_day * i / 12 / 24)
        for i in range(steps + 1)
    ]


def test_a_gpus_runtime_memory_growing_steadily_is_a_warning() -> None:
    watch = Watch()
    verdicts = [watch.look(s)[0] for s in session(3.0)]
    levels = [v.level_of("memory_growing") for v in verdicts]
    first = levels.index(Level.WARNING)
    assert first == 36  # three hours in, never before
    (alert,) = [a for a in verdicts[-1].alerts if a.kind == "memory_growing"]
    assert alert.subject == "GPU 0"
    assert alert.text.startswith(
        "GPU 0 (TP0): runtime memory grows 3.00 GiB/day, steadily over the last 6h00m "
        "(0.25 → 1.00 GiB); at this rate its 7.24 GiB free are gone in 2d9h"
    )
    assert "(warning from 1 GiB/day)" in alert.text
    growth = verdicts[-1].growth
    assert growth_line(growth, 0) == (
        "runtime growth: +3.00 GiB/day over 6h00m, free memory gone in 2d9h at this rate"
    )
    assert growth_line(growth, 1) == "runtime growth: +0.00 GiB/day over 6h00m"
    # The JSON, per GPU and per rank.
    data = json.loads(json.dumps(snapshot_json(replace(PLAIN, verdict=verdicts[-1]))))
    gpu0 = data["growth"]["gpus"][0]
    assert (gpu0["index"], gpu0["runtime_gib_per_day"], gpu0["span_s"]) == (0, 3.0, 21600.0)
    assert gpu0["steady"] and gpu0["days_until_full"] == 2.41
    tp1 = next(r for r in data["growth"]["ranks"] if r["rank"] == "TP1")
    assert (tp1["host_gib_per_day"], tp1["span_s"], tp1["pids"]) == (0.0, 21600.0, [41201])


def test_before_the_span_the_line_says_how_long_it_needs() -> None:
    watch = Watch()
    verdicts = [watch.look(s)[0] for s in session(3.0, hours=1)]
    assert growth_line(verdicts[-1].growth, 0) == (
        "runtime growth: measured once kvtop has watched 3h00m (1h00m so far)"
    )
    data = snapshot_json(replace(PLAIN, verdict=verdicts[-1]))
    gpu0 = data["growth"]["gpus"][0]  # type: ignore[index]
    assert (gpu0["runtime_gib_per_day"], gpu0["span_s"]) == (None, 3600.0)


def test_a_ranks_host_memory_growing_steadily_is_a_warning() -> None:
    watch = Watch()
    verdicts = [watch.look(s)[0] for s in session(0.0, host_per_day=4.0)]
    (alert,) = [a for a in verdicts[-1].alerts if a.kind == "memory_growing"]
    assert alert.subject == "TP1 host memory"
    assert alert.text.startswith(
        "TP1's host memory (resident, pid 41201) grows 4.00 GiB/day, steadily over the last "
        "6h00m (7.15 → 8.15 GiB)"
    )


def test_a_flat_or_slow_session_and_one_look_raise_nothing() -> None:
    watch = Watch()
    assert {watch.look(s)[0].level_of("memory_growing") for s in session(0.5)} == {Level.OK}
    noise = random.Random(3)
    flat = [at(i / 12, 0.25 + noise.uniform(-0.3, 0.3)) for i in range(73)]
    watch = Watch()
    assert {watch.look(s)[0].level_of("memory_growing") for s in flat} == {Level.OK}
    # One look (--once, --check) has no history: no rate, no alert.
    one = judged(session(3.0)[-1])
    assert one.verdict.level_of("memory_growing") == Level.OK
    assert one.verdict.growth.gpus[0].runtime.gib_per_day is None


def test_the_rate_and_the_span_are_the_users_to_set() -> None:
    snapshots = session(3.0)
    strict = Watch(Thresholds(gpu_growth_warning_gib_per_day=5.0))
    assert {strict.look(s)[0].level_of("memory_growing") for s in snapshots} == {Level.OK}
    quick = Watch(Thresholds(growth_min_span_s=HOUR))
    levels = [quick.look(s)[0].level_of("memory_growing") for s in snapshots]
    assert levels.index(Level.WARNING) == 12


def test_a_restart_starts_the_history_again() -> None:
    snapshots = session(3.0)
    restarted = [
        replace(s, analysis=replace(s.analysis, startup=replace(s.analysis.startup, restarts=1)))
        for s in snapshots[40:]
    ]
    watch = Watch()
    verdicts = [watch.look(s)[0] for s in snapshots[:40] + restarted]
    assert verdicts[39].level_of("memory_growing") == Level.WARNING
    assert verdicts[40].level_of("memory_growing") == Level.OK
    assert verdicts[-1].growth.gpus[0].runtime.span_s == 32 * 300


def test_alerts_added_after_keep_the_growth() -> None:
    verdict = Watch().look(session(3.0, hours=1)[-1])[0]
    extra = Alert(Level.WARNING, "queue", "requests queued", "queue")
    assert with_alerts(verdict, (extra,)).growth is verdict.growth
