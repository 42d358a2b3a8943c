"""A host's KV usage history from the session's real Prometheus (Debian's 2.42, 1 s scrapes):
FleetReader.history's query_range gives the samples Prometheus holds, and a History seeded
with them (what opening a host in the fleet view does) draws them before its live points.

The host, hist-07, serves SGLang's /metrics (tests/support/fleet_bodies.sglang_body) at 25 % token
usage, then at 75 %. The reader is asked at a 1 s step over one minute (`min_step_s=1`: this
Prometheus scrapes every second; the view's own 15 s step over ten minutes would need 45 s of
samples for three points), and through the feed at the view's own step."""

from __future__ import annotations

import itertools
import math
import time

import pytest

from kvtop.fleet.feed import FleetFeed
from kvtop.fleet.reader import FleetReader
from kvtop.model.history import History, KvHistory, is_gap
from tests.support.fleet_bodies import serve_bodies, sglang_body

pytestmark = pytest.mark.slow  # the session's Prometheus: ~6 s to its first scrape

HOST = "hist-07"
MODEL = "Qwen/Qwen3-8B"
RAW = f'sglang:token_usage{{host="{HOST}"}}[5m]'  # the raw samples, as Prometheus holds them


def _body(used_tokens: int) -> bytes:
    return sglang_body(MODEL, used_tokens=(used_tokens,), total_tokens=160_000)


def _samples(result: list[dict]) -> list[tuple[float, float]]:
    return [(float(ts), float(v)) for r in result for ts, v in r["values"]]


def _count(value: float):  # type: ignore[no-untyped-def]
    return lambda result: sum(v == value for _ts, v in _samples(result)) >= 3


def _at(samples: list[tuple[float, float]], ts: float) -> float:
    """What Prometheus evaluates at `ts`: the newest sample at or before it."""
    return max((s for s in samples if s[0] <= ts), key=lambda s: s[0])[1]


@pytest.fixture(scope="module")
def history_host(prometheus):  # type: ignore[no-untyped-def]
    port = prometheus.port("sglang", HOST)
    server = serve_bodies({port: _body(40_000)}, sockets=prometheus.take([port]))
    prometheus.wait_query(RAW, _count(0.25), "three samples at 0.25")
    server.set_body(port, _body(120_000))
    prometheus.wait_query(RAW, _count(0.75), "three samples at 0.75")
    yield prometheus
    server.close()


async def test_history_gives_prometheus_samples_and_seeds_the_sparkline(history_host) -> None:
    reader = FleetReader(history_host.url)
    try:
        series = await reader.history(HOST, "kv_usage", 1, min_step_s=1.0)
    finally:
        await reader.aclose()
    assert series is not None and series.labels == {"host": HOST}
    samples = _samples(history_host.query(RAW))
    points = series.points
    assert all(b[0] - a[0] == pytest.approx(1.0) for a, b in itertools.pairwise(points))
    assert [v for _ts, v in points] == [_at(samples, ts) for ts, _v in points]
    values = [v for _ts, v in points]
    assert values.count(0.25) >= 2 and values.count(0.75) >= 2  # three samples: two steps
    assert values == sorted(values)  # 25 % first, then 75 %

    history = History()
    found = KvHistory.from_ratios(points, 1.0)
    assert history.seed_token_usage(found.points, found.step_s) == len(points)
    usage = history.token_usage_pct()
    assert usage.values == tuple(v * 100 for v in values) and usage.runs == 1
    assert usage.seconds == pytest.approx(points[-1][0] - points[0][0])


async def test_the_feed_asks_ten_minutes_at_the_views_step(history_host) -> None:
    feed = FleetFeed(FleetReader(history_host.url))
    try:
        began = time.time()
        found = await feed.kv_history(HOST)
        nothing = await feed.kv_history("no-such-host")
    finally:
        await feed.reader.aclose()
    assert nothing is None  # no series: the sparkline starts empty
    assert found is not None and found.step_s == 15.0
    samples = _samples(history_host.query(RAW))
    assert found.points and all(ts >= began - 600 for ts, _pct in found.points)
    assert [pct for ts, pct in found.points] == [_at(samples, ts) * 100 for ts, _ in found.points]
    history = History()
    history.seed_token_usage(found.points, found.step_s)
    values = history.token_usage_pct().values
    assert not any(is_gap(v) or math.isnan(v) for v in values)


async def test_prometheus_down_gives_no_history_and_no_error() -> None:
    from tests.support.prometheus_server import free_ports

    (port,) = free_ports(1)
    feed = FleetFeed(FleetReader(f"http://127.0.0.1:{port}", timeout_s=2.0))
    try:
        assert await feed.kv_history(HOST) is None
    finally:
        await feed.reader.aclose()
