"""Seeding the KV usage buffer with earlier points (Prometheus' history of a host opened from
the fleet, asked only for a host with SGLang's metrics): the seed goes before the live points
and never after them, holes are GAPs, values that are not percentages are unknown (NaN), and
the buffer stays bounded. Live snapshots are the real demo scenario's
(tests/support/tui_support.demo_snapshot)."""

from __future__ import annotations

import math
from dataclasses import replace

from kvtop.fleet.model import DCGM, FleetKv, TargetState
from kvtop.fleet.view_state import wants_kv_history
from kvtop.model.history import History, KvHistory, is_gap
from kvtop.model.kv_usage import kv_now
from tests.support.fleet_examples import kimi_host, qwen_host
from tests.support.tui_support import demo_snapshot

STEP_S = 15.0  # FleetReader.history's step over 10 minutes


def _live(history: History, *offsets_s: float) -> float:
    """Record the demo snapshot at each offset from its time; its usage in percent."""
    base = demo_snapshot()
    for offset in offsets_s:
        history.record(replace(base, taken_at=base.taken_at + offset), 5.0)
    pct = kv_now(base).usage_pct
    assert pct is not None
    return pct


def _seed_points(end: float, count: int, step_s: float = STEP_S) -> list[tuple[float, float]]:
    return [(end - (count - k) * step_s, 10.0 + k) for k in range(count)]


def test_a_seed_goes_before_the_live_points_as_one_run() -> None:
    history = History()
    t0 = demo_snapshot().taken_at
    live = _live(history, 0.0)
    assert history.seed_token_usage(_seed_points(t0, 40), STEP_S) == 40
    _live(history, 5.0, 10.0)  # the refreshes after it follow on
    usage = history.token_usage_pct()
    assert usage.values[:40] == tuple(10.0 + k for k in range(40))
    assert usage.values[40:] == (live, live, live)
    assert usage.runs == 1 and usage.seconds == 40 * STEP_S + 10.0


def test_a_late_seed_keeps_only_what_is_older_than_the_live_points() -> None:
    """The seed arrived after three live points: its points at or after the first live one
    are dropped (the live ones cover that time), the older ones go before: times ascend."""
    history = History()
    t0 = demo_snapshot().taken_at
    live = _live(history, 0.0, 5.0, 10.0)
    late = [*_seed_points(t0, 4), (t0, 99.0), (t0 + 7.0, 98.0)]
    assert history.seed_token_usage(late, STEP_S) == 4
    assert history.token_usage_pct().values == (10.0, 11.0, 12.0, 13.0, live, live, live)
    assert history.token_usage_pct().seconds == 4 * STEP_S + 10.0
    # A second seed of the same points adds nothing: none is older than the oldest kept.
    assert history.seed_token_usage(late, STEP_S) == 0


def test_holes_are_gaps_within_the_seed_and_before_the_live_points() -> None:
    history = History()
    t0 = demo_snapshot().taken_at
    live = _live(history, 0.0)
    # Two points, ten minutes of nothing, two points, then five minutes before the live one.
    seed = [(t0 - 1200, 1.0), (t0 - 1185, 2.0), (t0 - 585, 3.0), (t0 - 570, 4.0)]
    assert history.seed_token_usage(reversed(seed), STEP_S) == 6  # unordered in: sorted
    values = history.token_usage_pct().values
    assert [is_gap(v) for v in values] == [False, False, True, False, False, True, False]
    assert [v for v in values if not is_gap(v)] == [1.0, 2.0, 3.0, 4.0, live]
    assert history.token_usage_pct().runs == 3
    # Up to three steps apart is no hole (a missed evaluation is not a break).
    near = History()
    _live(near, 0.0)
    near.seed_token_usage([(t0 - 90, 1.0), (t0 - 45, 2.0)], STEP_S)
    assert near.token_usage_pct().runs == 1


def test_values_that_are_not_percentages_are_unknown_not_gaps() -> None:
    history = History()
    points = [(100.0, math.nan), (115.0, math.inf), (130.0, -math.inf), (145.0, -1.0), (160.0, 5)]
    assert history.seed_token_usage(points, STEP_S) == 5
    values = history.token_usage_pct().values
    assert all(math.isnan(v) for v in values[:4]) and values[4] == 5
    assert not any(map(is_gap, values)) and history.token_usage_pct().runs == 1


def test_the_seeded_buffer_stays_bounded_and_keeps_the_newest() -> None:
    history = History(points=8)
    t0 = demo_snapshot().taken_at
    live = _live(history, 0.0, 5.0, 10.0)
    assert history.seed_token_usage(_seed_points(t0, 1000, step_s=1.0), 1.0) == 1000
    values = history.token_usage_pct().values
    assert values == (1005.0, 1006.0, 1007.0, 1008.0, 1009.0, live, live, live)
    _live(history, 15.0)
    assert len(history.token_usage_pct().values) == 8
    assert history.token_usage_pct().seconds == 4.0 + 15.0


def test_an_empty_seed_changes_nothing_and_ratios_become_percent() -> None:
    history = History()
    live = _live(history, 0.0)
    assert history.seed_token_usage([], STEP_S) == 0
    assert history.token_usage_pct().values == (live,)
    found = KvHistory.from_ratios(((100.0, 0.25), (115.0, math.nan)), STEP_S)
    assert found.points[0] == (100.0, 25.0) and math.isnan(found.points[1][1])
    assert found.step_s == STEP_S


def test_only_hosts_with_sglang_metrics_ask_for_history() -> None:
    assert wants_kv_history(kimi_host(0))  # node 0: SGLang's metrics
    assert not wants_kv_history(kimi_host(1))  # node 1: SGLang publishes nothing there
    assert wants_kv_history(qwen_host())  # no kvtop, but SGLang and DCGM
    dcgm_only = qwen_host(targets=(TargetState(DCGM, "gpu-node-03:9400", True),), kv=FleetKv())
    assert not wants_kv_history(dcgm_only)
    # SGLang's target down at the moment: its history may still be there.
    assert wants_kv_history(qwen_host(kv=FleetKv()))
