"""History for the sparklines: bounded buffers, a gap drawn as a gap, a change of the KV
numbers' source starting a new run, and the queue's unbroken duration. Snapshots come from the
real demo scenario (tests/support/still.py) and real exposition text
(tests/support/sglang_http.py)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from kvtop.live.widgets.sparkline import sparkline
from kvtop.model.history import (
    GAP,
    PERCENT_FLOOR,
    USED_FLOOR_GIB,
    History,
    Series,
    is_gap,
    shown_range,
)
from kvtop.model.snapshot import Snapshot
from kvtop.sglang.metrics import parse_exposition
from tests.support.sglang_http import Deployment, build_exposition
from tests.support.still import still_series
from tests.support.tui_support import demo_snapshot

STEP_S = 5.0  # still_series' spacing: the refresh interval of these histories


def _shifted(snapshot: Snapshot, seconds: float, **changes: object) -> Snapshot:
    return replace(snapshot, taken_at=snapshot.taken_at + seconds, **changes)


def test_points_at_the_interval_form_one_run_and_stay_bounded() -> None:
    history = History(points=8)
    for snapshot in still_series(12, step_s=STEP_S):
        assert history.record(snapshot, STEP_S)
    usage = history.token_usage_pct()
    assert len(usage.values) == 8 and usage.runs == 1
    assert all(math.isfinite(v) for v in usage.values)
    assert usage.seconds == 7 * STEP_S
    key = still_series(1)[0].gpus[0].sample.uuid
    assert len(history.gpu_used_gib(key).values) == 8
    assert not history.record(snapshot, STEP_S)  # the same snapshot again: not a new point


def test_a_late_snapshot_leaves_a_gap_in_every_series() -> None:
    series = still_series(3, step_s=STEP_S)
    history = History()
    for snapshot in series:
        history.record(snapshot, STEP_S)
    history.record(_shifted(series[-1], 600.0), STEP_S)  # ten minutes without a snapshot
    usage = history.token_usage_pct()
    assert [is_gap(v) for v in usage.values] == [False, False, False, True, False]
    assert usage.runs == 2
    key = series[0].gpus[0].sample.uuid
    assert history.gpu_used_gib(key).runs == 2 and history.gpu_util_pct(key).runs == 2
    # Within three intervals is no gap (a late tick is not a hole in the data).
    history.record(_shifted(series[-1], 600.0 + 3 * STEP_S), STEP_S)
    assert history.token_usage_pct().runs == 2
    # Without an interval, nothing is judged a gap by time.
    plain = History()
    for snapshot in (series[0], _shifted(series[0], 3600.0)):
        plain.record(snapshot)
    assert plain.token_usage_pct().runs == 1


def test_a_change_of_kv_source_starts_a_new_run() -> None:
    """Metrics, then the log's batch line standing in (metrics gone), then metrics again:
    three runs, never one line through both sources."""
    base = demo_snapshot()
    history = History()
    history.record(base, 1.0)
    history.record(_shifted(base, 1, metrics=None), 1.0)  # the demo's batch line stands in
    history.record(_shifted(base, 2, metrics=None), 1.0)
    history.record(_shifted(base, 3), 1.0)
    values = history.token_usage_pct().values
    assert [is_gap(v) for v in values] == [False, True, False, False, True, False]
    assert history.token_usage_pct().runs == 3


def test_no_usage_known_is_a_missing_point_not_a_new_run() -> None:
    base = demo_snapshot()
    empty = replace(base.analysis.startup, latest_batch={})
    without = replace(base, metrics=None, analysis=replace(base.analysis, startup=empty))
    history = History()
    for i, snapshot in enumerate((base, without, base)):
        history.record(_shifted(snapshot, i), 1.0)
    values = history.token_usage_pct().values
    assert len(values) == 3 and math.isnan(values[1]) and not any(map(is_gap, values))


def test_the_queue_duration_runs_while_it_does_not_empty() -> None:
    base = demo_snapshot()
    queued = parse_exposition(build_exposition(Deployment(queued=4)))
    idle = parse_exposition(build_exposition(Deployment(queued=0)))
    history = History()
    assert history.queued_for_s() is None
    for t in (0, 10, 20):
        history.record(_shifted(base, t, metrics=queued), 10.0)
    assert history.queued_for_s() == 20.0
    history.record(_shifted(base, 30, metrics=idle), 10.0)  # it emptied
    assert history.queued_for_s() is None
    for t in (40, 50):
        history.record(_shifted(base, t, metrics=queued), 10.0)
    assert history.queued_for_s() == 10.0
    history.record(_shifted(base, 500, metrics=queued), 10.0)  # a gap: unknown meanwhile
    assert history.queued_for_s() == 0.0


def test_sparkline_draws_a_gap_blank_and_missing_values_only_when_alone() -> None:
    nan = math.nan
    assert sparkline([0.0, 100.0, GAP, 100.0], 4, 0, 100).plain == "▁█ █"
    # Squeezed two points a cell: a cell with a gap is blank, one with a missing value shows
    # the value it has, one with nothing but missing values is blank.
    assert sparkline([100.0, 100.0, 100.0, GAP, 100.0, nan, nan, nan], 4, 0, 100).plain == "█ █ "
    assert sparkline([], 3, 0, 100).plain == "   "
    assert Series((1.0, GAP, GAP, 2.0, 3.0), 4.0).runs == 2
    assert Series((), 0.0).runs == 0


# -- the range a sparkline is drawn over ---------------------------------------------------------
def test_a_sparkline_scales_to_the_range_it_shows() -> None:
    """88.3 → 92.8 GiB on a 141 GiB GPU: bottom to top of the chart, not a flat top at 0 … 141."""
    used = [88.3, 89.0, 90.5, 92.8]
    shown = shown_range(used, USED_FLOOR_GIB, 0, 141.0)
    assert shown is not None
    assert (shown.low, shown.high) == (88.3, 92.8)
    assert sparkline(used, 4, shown.low, shown.high).plain == "▁▂▄█"
    assert sparkline(used, 4, 0, 141.0).plain == "▆▆▆▆"  # the old scale: a flat line
    assert shown.text("GiB") == "88.3–92.8 GiB"


def test_a_flat_line_stays_flat_and_in_the_middle() -> None:
    shown = shown_range([90.1, 90.1, 90.1], USED_FLOOR_GIB, 0, 141.0)
    assert shown is not None
    assert shown.low == pytest.approx(89.85) and shown.high == pytest.approx(90.35)
    assert sparkline([90.1] * 3, 3, shown.low, shown.high).plain == "▅▅▅"
    assert shown.text("GiB") == "90.1 GiB"


def test_noise_under_the_floor_is_not_blown_up_to_the_full_height() -> None:
    shown = shown_range([90.00, 90.02, 90.01], USED_FLOOR_GIB)
    assert shown is not None and shown.high - shown.low == pytest.approx(USED_FLOOR_GIB)
    assert set(sparkline([90.00, 90.02, 90.01], 3, shown.low, shown.high).plain) <= set("▄▅")


def test_the_floor_stays_within_the_quantitys_limits() -> None:
    low = shown_range([0.0, 1.0], PERCENT_FLOOR, 0, 100)
    high = shown_range([99.0, 100.0], PERCENT_FLOOR, 0, 100)
    assert low is not None and (low.low, low.high) == (0, PERCENT_FLOOR)
    assert high is not None and (high.low, high.high) == (100 - PERCENT_FLOOR, 100)
    assert low.text("%", 0) == "0–1%"


def test_gaps_and_missing_values_are_not_part_of_the_range() -> None:
    shown = shown_range([GAP, 40.0, float("nan"), 60.0], PERCENT_FLOOR, 0, 100)
    assert shown is not None and (shown.low, shown.high) == (40.0, 60.0)
    assert shown_range([GAP, float("nan")], PERCENT_FLOOR) is None
    assert shown_range([], PERCENT_FLOOR) is None
