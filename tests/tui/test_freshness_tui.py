"""Freshness and alerts on screen, under Pilot, on snapshots from the real demo scenario and the
real parser (only the feed is a stand-in, see tui_support): the header's state and colour, the
age beside a stale source's marker, the KV panel's source, age and alert colours."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from rich.text import Text

from kvtop.live.app import KvtopApp
from kvtop.live.widgets.kv_panel import KvPanel
from kvtop.live.widgets.status_line import StatusLine
from kvtop.model.mismatch import Mismatch
from kvtop.model.snapshot import Snapshot
from kvtop.model.status.levels import Level, Thresholds
from kvtop.model.status.watch import judged
from kvtop.sglang.metrics import parse_exposition
from tests.support.paths import STORY_LOG
from tests.support.sglang_http import Deployment, build_exposition
from tests.support.still import StillFeed
from tests.support.tui_support import (
    demo_snapshot,
    judged_in_turn,
    log_snapshot,
    make_app,
    screen_text,
    until,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("utc_zone")]

BIG = (200, 40)
LAST_BATCH = datetime(2026, 2, 27, 9, 9, 4, tzinfo=timezone.utc)  # the story log's last one


def _header(app: KvtopApp) -> str:
    return screen_text(app).splitlines()[0]


def _style_of(widget, rendered: Text, piece: str, name: str) -> bool:  # type: ignore[no-untyped-def]
    """Whether `piece` of the widget's text is drawn in its component class `name`."""
    start = rendered.plain.find(piece)
    assert start >= 0, f"{piece!r} not in {rendered.plain!r}"
    wanted = widget.component_style(name)
    return any(span.start <= start < span.end and span.style == wanted for span in rendered.spans)


def _kv_text(app: KvtopApp) -> Text:
    panel = app.screen.query_one(KvPanel)
    return panel.render()


def _with_metrics_age(snapshot: Snapshot, age_s: float, state: str = "off") -> Snapshot:
    sources = tuple(
        replace(s, state=state, detail="nothing listens", age_s=age_s) if s.name == "metrics" else s
        for s in snapshot.sources
    )
    return judged(replace(snapshot, sources=sources))


async def test_metrics_down_for_minutes_is_a_warning_with_the_age_by_the_marker() -> None:
    app = make_app(_with_metrics_age(demo_snapshot(), 185.0))
    async with app.run_test(size=BIG) as pilot:
        await until(pilot, "the warning header", lambda: "metrics down" in _header(app))
        header = _header(app)
        # Its numbers are still held: a warning (source_down), with the age said.
        assert "▲ ready 1m00s · metrics down 3m05s · ▲1 · SGLang" in header
        assert re.search(r"○metrics 3m05s ?$", header)
        line = app.screen.query_one(StatusLine)
        assert _style_of(line, line.render(), "▲ ready", "status--warning")
        assert not _style_of(line, line.render(), "▲ ready", "status--ready")


async def test_a_mismatch_or_a_lost_gpu_is_never_green(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")  # the glyph says it without colour
    base = demo_snapshot()
    mismatch = Mismatch("max_total_num_tokens", 159277, 655360, "metrics")
    gpus = list(base.gpus)
    gpus[3] = replace(gpus[3], sample=replace(gpus[3].sample, status="lost"))
    app = make_app(judged(replace(base, mismatches=(mismatch,))))
    async with app.run_test(size=BIG) as pilot:
        await until(pilot, "the warning header", lambda: "sources disagree" in _header(app))
        assert "▲ ready 1m00s · sources disagree · ▲1" in _header(app)
        assert app.state.status is not None and app.state.status.level == Level.WARNING
        line = app.screen.query_one(StatusLine)
        assert _style_of(line, line.render(), "▲ ready", "status--warning")
        lost = judged(replace(base, taken_at=base.taken_at + 1, gpus=tuple(gpus)))
        app.feed.push(lost)  # type: ignore[attr-defined]
        await until(pilot, "the lost GPU in the header", lambda: "GPU 3 lost" in _header(app))
        assert "✖ ready 1m00s · GPU 3 lost · ✖1" in _header(app)
        assert _style_of(line, line.render(), "✖ ready", "status--critical")


def _story(tmp_path: Path) -> Snapshot:
    log = tmp_path / "sglang.log"
    log.write_text(STORY_LOG.read_text())
    return log_snapshot(log)


def _app_at(snapshot: Snapshot, when: datetime, interval_s: float = 1.0) -> KvtopApp:
    return KvtopApp(
        StillFeed(snapshot, interval_s=interval_s),
        source_label="sglang.log",
        clock=when.timestamp,
        host_name="gpu-host",
    )


async def test_kv_from_the_log_says_which_batch_line_and_how_old(tmp_path: Path) -> None:
    app = _app_at(_story(tmp_path), LAST_BATCH + timedelta(minutes=4, seconds=5))
    async with app.run_test(size=BIG) as pilot:
        await until(pilot, "the KV panel", lambda: "48,211 / 159,277" in screen_text(app))
        assert "(log decode batch line 09:09:04, 4m05s old)" in screen_text(app)
        panel = app.screen.query_one(KvPanel)
        assert _style_of(panel, _kv_text(app), "█", "kv--used")


async def test_an_old_batch_line_is_the_last_known_usage_without_colour(tmp_path: Path) -> None:
    app = _app_at(_story(tmp_path), LAST_BATCH + timedelta(days=294))
    app.state.thresholds = Thresholds(kv_usage_warning_pct=10, kv_usage_critical_pct=20)
    async with app.run_test(size=BIG) as pilot:
        await until(pilot, "the KV panel", lambda: "48,211 / 159,277" in screen_text(app))
        text = screen_text(app)
        assert "(last known usage: log decode batch line 2026-02-27 09:09:04, 294d0h ago)" in text
        assert "free now" not in text  # nothing is known to be free now
        panel = app.screen.query_one(KvPanel)
        rendered = _kv_text(app)
        assert _style_of(panel, rendered, "█", "kv--dim")  # not the usage colour
        assert "✖" not in rendered.plain and "▲" not in rendered.plain  # no alert for the past


async def test_kv_usage_over_a_threshold_gets_its_colour_and_glyph() -> None:
    # The session judges with the config file's thresholds: here 50 / 60 %.
    app = make_app(
        judged(demo_snapshot(), Thresholds(kv_usage_warning_pct=50, kv_usage_critical_pct=60))
    )
    async with app.run_test(size=BIG) as pilot:
        await until(pilot, "the KV panel", lambda: "✖ 70.0%" in _kv_text(app).plain)
        panel = app.screen.query_one(KvPanel)
        rendered = _kv_text(app)
        assert "(✖ 70.0%)" in rendered.plain
        assert _style_of(panel, rendered, "✖ 70.0%", "kv--critical")
        assert _style_of(panel, rendered, "█", "kv--critical")


async def test_a_queue_that_does_not_empty_for_a_minute_is_a_warning() -> None:
    base = demo_snapshot()
    queued = parse_exposition(build_exposition(Deployment(queued=4)))
    snapshots = judged_in_turn(
        *(replace(base, taken_at=base.taken_at + t, metrics=queued) for t in (0, 30, 60))
    )
    app = KvtopApp(
        StillFeed(*snapshots, interval_s=30.0),
        source_label="demo",
        demo=True,
        clock=lambda: base.taken_at + 60,
        host_name="gpu-host",
    )
    async with app.run_test(size=BIG) as pilot:
        await until(pilot, "the queue warning", lambda: "queued 1m00s" in _kv_text(app).plain)
        panel = app.screen.query_one(KvPanel)
        rendered = _kv_text(app)
        assert "4 queued" in rendered.plain and "▲ queued 1m00s" in rendered.plain
        assert _style_of(panel, rendered, "4 queued", "kv--warning")
        assert app.state.kv is not None and app.state.kv.queue_level == Level.WARNING


async def test_stale_metrics_say_their_age_in_the_kv_panel() -> None:
    app = make_app(_with_metrics_age(demo_snapshot(), 7.0, state="degraded"))
    async with app.run_test(size=BIG) as pilot:
        await until(pilot, "the KV panel", lambda: "(metrics, 7s old)" in screen_text(app))
        assert re.search(r"◐metrics 7s ?$", _header(app))
