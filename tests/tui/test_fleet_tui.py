"""The fleet view under Pilot at terminal sizes from 80x24 to 200x60: the real FleetApp on the
real FleetFeed, whose reader is tests/support/fleet_examples.QueueReader. Why a stand-in reader: the
Prometheus reader (tui/kvtop/fleet/reader.py) has its own tests against a real Prometheus, and the
end-to-end test runs it with everything else. QueueReader has the reader's interface and hands
the view exactly the fleets a test pushes, so each test waits for what it then asserts."""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace

import pytest

from kvtop.fleet.feed import FleetFeed
from kvtop.fleet.model import FleetKv
from kvtop.fleet.screen import FleetScreen
from kvtop.live.screens.overview import OverviewScreen
from tests.support.fleet_examples import (
    QueueReader,
    down_fleet,
    kimi_deployment,
    kimi_gpu,
    kimi_host,
    kv_usage_series,
    make_fleet_app,
    story_fleet,
)
from tests.support.tui_support import screen_text, until

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("utc_zone")]

SIZES = [(80, 24), (100, 30), (120, 40), (200, 60)]
IDS = [f"{w}x{h}" for w, h in SIZES]
CUT = re.compile(r"\d…|…\d")  # a number cut to fit


def _lines(app) -> list[str]:  # type: ignore[no-untyped-def]
    return screen_text(app).split("\n")


def _row(app, name: str) -> str:  # type: ignore[no-untyped-def]
    """The table's line for a deployment or host, by its name."""
    found = [line for line in _lines(app) if re.search(rf"(^|\s){re.escape(name)}\s", line)]
    assert found, f"no row {name!r} in:\n{screen_text(app)}"
    return found[0]


def _cells(line: str) -> list[str]:
    return line.replace("▶", " ").split()


async def _fleet_shown(pilot, app) -> None:  # type: ignore[no-untyped-def]
    await until(pilot, "the fleet's rows", lambda: "gpu-node-03" in screen_text(app))


@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_the_fleet_keeps_every_number(size: tuple[int, int]) -> None:
    app, _reader = make_fleet_app(story_fleet())
    async with app.run_test(size=size) as pilot:
        await _fleet_shown(pilot, app)
        text = screen_text(app)
        assert not CUT.search(text), text
        # The two-node TP16: one deployment, then both its hosts (node 0 and node 1).
        kimi = _cells(_row(app, "moonshotai/Kimi-K2.5"))
        assert kimi[1:4] == ["ready", "TP16", "2"] and "30.3%" in kimi and "7.40" in kimi
        lines = _lines(app)
        at = lines.index(_row(app, "moonshotai/Kimi-K2.5"))
        assert _cells(lines[at + 1])[:3] == ["gpu-node-01", "ready", "n0"]
        assert _cells(lines[at + 2])[:3] == ["gpu-node-02", "ready", "n1"]
        assert "30.3%" in _cells(lines[at + 1]) and "7.40" in _cells(lines[at + 2])
        # The DCGM+SGLang-only host, with the numbers those give.
        qwen = _cells(_row(app, "gpu-node-03"))
        assert "51.2%" in qwen and qwen[1] == "—"
        if size[0] >= 100:
            assert "176.4/191.2" in qwen and "705.5/764.7" in _cells(lines[at + 1])
        assert "2 deployments on 3 hosts" in lines[0]
        assert "●prometheus" in lines[0]


@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_enter_opens_a_hosts_gpus_and_escape_returns(size: tuple[int, int]) -> None:
    app, _reader = make_fleet_app(story_fleet())
    async with app.run_test(size=size) as pilot:
        await _fleet_shown(pilot, app)
        await pilot.press("down", "enter")  # gpu-node-01
        await until(pilot, "its GPUs", lambda: isinstance(app.screen, OverviewScreen))
        await until(pilot, "its GPU rows", lambda: "TP7" in screen_text(app))
        text = screen_text(app)
        assert not CUT.search(text), text
        assert "gpu-node-01: ready" in _lines(app)[0]
        for rank in range(8):
            row = _row(app, f"TP{rank}")
            assert "88.2/95.6" in row and "7.4" in _cells(row), row
        assert "48,211 / 159,277 tokens" in text and "674 tok/s" in text
        await pilot.press("escape")
        await until(pilot, "the fleet again", lambda: isinstance(app.screen, FleetScreen))
        await until(pilot, "the table", lambda: "deployment / host" in screen_text(app))
        assert "▶" in _row(app, "gpu-node-01")  # the selection stayed


@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_a_dcgm_only_host_shows_used_and_free(size: tuple[int, int]) -> None:
    app, _reader = make_fleet_app(story_fleet())
    async with app.run_test(size=size) as pilot:
        await _fleet_shown(pilot, app)
        await pilot.press("end", "enter")  # gpu-node-03, the last row
        await until(pilot, "its GPU rows", lambda: isinstance(app.screen, OverviewScreen))
        await until(pilot, "GPU 1's row", lambda: "88.2/95.6" in screen_text(app))
        text = screen_text(app)
        assert "gpu-node-03: no kvtop" in _lines(app)[0]
        rows = [line for line in _lines(app) if "88.2/95.6" in line]
        assert len(rows) == 2 and all("7.4" in _cells(r) for r in rows)
        assert "410,000 / 800,781 tokens" in text
        await pilot.press("backspace")
        await until(pilot, "the fleet again", lambda: isinstance(app.screen, FleetScreen))


@pytest.mark.parametrize("size", SIZES, ids=IDS)
async def test_prometheus_down_is_a_sentence_over_the_last_fleet(size: tuple[int, int]) -> None:
    app, reader = make_fleet_app(story_fleet())
    async with app.run_test(size=size) as pilot:
        await _fleet_shown(pilot, app)
        reader.push(down_fleet())
        await until(pilot, "the problem", lambda: "○prometheus" in screen_text(app))
        flat = " ".join(screen_text(app).split())
        assert "✖ nothing listens on http://127.0.0.1:9090 (connection refused): is " in flat
        assert "The table shows the last fleet Prometheus gave (stale)." in flat
        assert "Prometheus not answering" in _lines(app)[0]
        assert "30.3%" in _cells(_row(app, "gpu-node-01"))  # still shown, marked stale
        reader.push(story_fleet())
        await until(pilot, "the marker back", lambda: "●prometheus" in screen_text(app))
        assert "connection refused" not in screen_text(app)


async def test_an_open_host_follows_each_refresh() -> None:
    app, reader = make_fleet_app(story_fleet())
    async with app.run_test(size=(100, 30)) as pilot:
        await _fleet_shown(pilot, app)
        await pilot.press("down", "enter")
        await until(pilot, "its GPUs", lambda: "48,211 / 159,277" in screen_text(app))
        busier = kimi_host(0, kv=replace(kimi_host(0).kv, token_usage=0.9, used_tokens=143_349))
        reader.push(story_fleet(deployments=(kimi_deployment(busier, kimi_host(1)),)))
        await until(pilot, "the new usage", lambda: "143,349 / 159,277" in screen_text(app))
        # The host gone from Prometheus' answer: its last numbers stay, the state says so.
        reader.push(story_fleet(deployments=(kimi_deployment(kimi_host(1)),)))
        await until(pilot, "the host gone", lambda: "not in Prometheus" in screen_text(app))
        assert "143,349 / 159,277" in screen_text(app)


async def test_alerts_of_the_selected_row_are_sentences() -> None:
    hot = kimi_host(1, gpus=(kimi_gpu(0, 1, temp=95),), kv=FleetKv())
    app, _reader = make_fleet_app(story_fleet(deployments=(kimi_deployment(kimi_host(0), hot),)))
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, "the rows", lambda: "gpu-node-02" in screen_text(app))
        assert "✖1" in _cells(_row(app, "moonshotai/Kimi-K2.5"))
        assert "✖ 1 critical" in _lines(app)[0]
        flat = " ".join(screen_text(app).split())
        assert "✖ gpu-node-02 GPU 0 at 95 °C (critical from 90 °C)" in flat
        await pilot.press("j")
        await until(pilot, "gpu-node-01's", lambda: "no alerts" in screen_text(app))
        await pilot.press("j")
        await until(pilot, "gpu-node-02's", lambda: "✖ gpu-node-02" in screen_text(app))
        await pilot.press("k", "k")
        await until(pilot, "back up", lambda: "▶" in _row(app, "moonshotai/Kimi-K2.5"))


async def test_the_feed_pauses_and_closes_its_reader() -> None:
    """FleetFeed: no read while paused, one at once on resume; the reader closed at the end."""
    reader = QueueReader(story_fleet(), story_fleet(), story_fleet())
    feed = FleetFeed(reader, interval_s=0.01)
    fleets = feed.fleets()
    await anext(fleets)
    feed.paused = True
    reads = reader.reads
    waiting = asyncio.ensure_future(anext(fleets))
    for _ in range(50):  # loop turns, not time: an unpaused feed reads within two
        await asyncio.sleep(0)
    assert reader.reads == reads and not waiting.done()
    feed.paused = False
    await asyncio.wait_for(waiting, 5)
    assert reader.reads == reads + 1
    await fleets.aclose()
    assert reader.closed


async def test_prometheus_warnings_are_shown() -> None:
    """Partial data (Prometheus' `warnings`): the fleet shown, each warning a ▲ line."""
    partial = replace(story_fleet(), warnings=("query timed out on one shard",))
    app, _reader = make_fleet_app(partial)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, "the warning", lambda: "timed out" in screen_text(app))
        flat = " ".join(screen_text(app).split())
        assert "▲ Prometheus warns: query timed out on one shard" in flat
        assert "●prometheus" in _lines(app)[0]


@pytest.mark.parametrize("size", [(120, 40), (200, 60)], ids=["120x40", "200x60"])
async def test_opening_a_host_draws_its_last_ten_minutes_from_prometheus(
    size: tuple[int, int],
) -> None:
    """Enter asks the feed for the host's KV usage history (one query_range, 10 minutes): the
    sparkline holds it before the one live point the fleet gave (no refresh follows here)."""
    app, reader = make_fleet_app(story_fleet())
    reader.history_answer = kv_usage_series("gpu-node-01")
    async with app.run_test(size=size) as pilot:
        await _fleet_shown(pilot, app)
        await pilot.press("down", "enter")  # gpu-node-01
        await until(pilot, "its GPUs", lambda: isinstance(app.screen, OverviewScreen))
        await until(pilot, "the seeded sparkline", lambda: "last 10m00s" in screen_text(app))
        assert reader.history_calls == [("gpu-node-01", "kv_usage", 10.0)]
        assert reader.reads == 1  # one fleet, so one live point
        values = app.host_view.history.token_usage_pct().values
        assert len(values) == 41 and values[0] == pytest.approx(10.0)
        assert values[-2] == pytest.approx(90.0) and values[-1] == pytest.approx(
            100 * 48_211 / 159_277
        )  # the live point: exact counts
        line = next(line for line in _lines(app) if "last 10m00s" in line)
        spark = line.split(" usage")[0].split()[-1]
        assert spark[0] == "▁" and "█" in spark, line  # 10 % rising to 90 %
        assert "usage 10–90%, last 10m00s" in line  # the range it is drawn over
        assert "48,211 / 159,277 tokens" in screen_text(app)


async def test_no_history_is_no_error_and_node_1_asks_nothing() -> None:
    """Prometheus failing the history query: the sparkline starts with the live point only,
    nothing on screen says so; node 1 (no SGLang metrics) is not asked for."""
    from kvtop.fleet.prometheus_api import PrometheusError

    app, reader = make_fleet_app(story_fleet())
    reader.history_answer = PrometheusError(
        "Prometheus at http://127.0.0.1:9090 timed out; try again.", "timeout"
    )
    async with app.run_test(size=(200, 60)) as pilot:
        await _fleet_shown(pilot, app)
        await pilot.press("down", "down", "enter")  # gpu-node-02, node 1 of the TP16
        await until(pilot, "node 1's GPUs", lambda: "gpu-node-02: ready" in _lines(app)[0])
        await pilot.press("escape")
        await until(pilot, "the fleet again", lambda: isinstance(app.screen, FleetScreen))
        await pilot.press("up", "enter")  # gpu-node-01
        await until(pilot, "the call", lambda: reader.history_calls != [])
        busy = [w for w in app.workers if w.group == "history"]
        await until(pilot, "the worker done", lambda: all(w.is_finished for w in busy))
        assert reader.history_calls == [("gpu-node-01", "kv_usage", 10.0)]
        await until(pilot, "its usage", lambda: "last 0s" in screen_text(app))
        assert "timed out" not in screen_text(app) and "Traceback" not in screen_text(app)
        assert len(app.host_view.history.token_usage_pct().values) == 1


async def test_once_reads_no_history() -> None:
    reader = QueueReader(story_fleet())
    reader.history_answer = kv_usage_series("gpu-node-01")
    await FleetFeed(reader).read_once()
    assert reader.history_calls == [] and reader.closed
