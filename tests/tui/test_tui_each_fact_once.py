"""Each fact once and every word whole, at every width: the KV panel's line, the key bar, the
status line (the worst alert named, the alert counts kept, a starting state shortened by whole
words). The real app under Pilot on the demo's still and the story log cut before ready."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest

from kvtop.live.app import KvtopApp
from kvtop.live.view_state import header_words
from kvtop.live.widgets.kv_panel import KvPanel
from kvtop.model.snapshot import Snapshot
from kvtop.model.status.watch import judged
from tests.support.paths import STORY_LOG
from tests.support.still import StillFeed
from tests.support.tui_support import demo_snapshot, log_snapshot, make_app, screen_text, until

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("utc_zone")]

WIDTHS = (80, 100, 120, 160, 200)
CONTEXT_LEN = 262_144  # the demo's context length


def _segments(text: str) -> list[str]:
    """A panel's text cut where it separates its facts: runs of spaces, ` · `, line ends."""
    parts = re.split(r"\n|\s{2,}| · ", text)
    return [p.strip() for p in parts if re.search(r"\w", p)]


@pytest.mark.parametrize("width", WIDTHS)
async def test_kv_panel_says_each_fact_once(width: int) -> None:
    # The length asked (--request-len, the formula) is the context length: one capacity.
    app = make_app(demo_snapshot())
    app.state.request_len = CONTEXT_LEN
    async with app.run_test(size=(width, 40)) as pilot:
        panel = app.screen.query_one(KvPanel)
        await until(pilot, "the KV panel's capacity", lambda: "fits" in panel.render().plain)
        text = panel.render().plain
        segments = _segments(text)
        repeated = {s for s in segments if segments.count(s) > 1}
        assert not repeated, text
        assert text.count("262,144") == 1, text


SIZES = ((80, 24), (90, 24), (100, 30), (120, 40), (160, 40), (200, 60))
VIEWS = {"overview": (), "GPU detail": ("enter",), "processes": ("t",), "events": ("e",)}


def _key_labels(app) -> list[str]:  # type: ignore[no-untyped-def]
    """Every label the view's key bar could show: `key description`, as the bar draws it."""
    labels = []
    for _node, binding, _enabled, _tip in app.screen.active_bindings.values():
        if binding.show or binding.key == app.COMMAND_PALETTE_BINDING:
            display = app.get_key_display(binding)
            labels.append(f"{display} {binding.description}".strip())
    return sorted(labels, key=len, reverse=True)


def _bar_leftover(bar: str, labels: list[str]) -> str:
    """What is left of the key bar once every whole label is taken out of it (`▏` sets the
    palette's key apart)."""
    bar = bar.replace("▏", " ")
    for label in labels:
        bar = re.sub(rf"(?<!\S){re.escape(label)}(?!\S)", " ", bar)
    return bar


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
@pytest.mark.parametrize("view", VIEWS)
async def test_key_bar_shows_whole_labels_only(size: tuple[int, int], view: str) -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=size) as pilot:
        await until(pilot, "the overview", lambda: "ready 1m00s" in screen_text(app))
        for key in VIEWS[view]:
            await pilot.press(key)
        await until(pilot, "the key bar", lambda: "quit" in screen_text(app).splitlines()[-1])
        await pilot.pause()
        bar = screen_text(app).splitlines()[-1]
        left = _bar_leftover(bar, _key_labels(app))
        assert not left.strip(), (bar, left)
        assert len(bar) <= size[0]


async def test_key_bar_follows_a_resize_with_whole_labels() -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=(200, 60)) as pilot:
        await until(pilot, "the overview", lambda: "ready 1m00s" in screen_text(app))
        await until(pilot, "space pause", lambda: "space pause" in screen_text(app))
        await pilot.resize_terminal(80, 24)
        await until(
            pilot, "the key bar at 80 columns", lambda: "space pause" not in screen_text(app)
        )
        bar = screen_text(app).splitlines()[-1]
        assert not _bar_leftover(bar, _key_labels(app)).strip(), bar
        await pilot.resize_terminal(200, 60)
        await until(pilot, "the key bar at 200 columns", lambda: "space pause" in screen_text(app))
        bar = screen_text(app).splitlines()[-1]
        assert not _bar_leftover(bar, _key_labels(app)).strip(), bar


HEADER_SIZES = ((80, 24), (90, 24), (100, 30), (120, 40), (160, 40), (200, 60))


def _hot(snapshot: Snapshot, **celsius: int) -> Snapshot:
    """The snapshot with GPUs this hot (`gpu2=95`), judged again."""
    gpus = tuple(
        replace(g, sample=replace(g.sample, temperature_c=celsius[f"gpu{g.sample.index}"]))
        if f"gpu{g.sample.index}" in celsius
        else g
        for g in snapshot.gpus
    )
    return judged(replace(snapshot, gpus=gpus))


@pytest.mark.parametrize("size", HEADER_SIZES, ids=[f"{w}x{h}" for w, h in HEADER_SIZES])
async def test_header_names_the_worst_alert_and_keeps_the_counts(size: tuple[int, int]) -> None:
    snapshot = _hot(demo_snapshot(), gpu2=95, gpu5=85)  # critical and warning
    app = make_app(snapshot)
    async with app.run_test(size=size) as pilot:
        await until(pilot, "the status line", lambda: "ready 1m00s" in screen_text(app))
        first = screen_text(app).splitlines()[0]
        assert "✖ ready 1m00s · " in first and len(first) <= size[0], first
        assert re.search(r" · ✖1 ▲1 · (SGLang \S+ · )?Kimi-K2\.5 · TP8 · mfs 0\.88\b", first), first
        if size[0] >= 120:  # room for the worst alert's words, whole, before the counts
            assert "✖ ready 1m00s · GPU 2 at 95 °C · ✖1 ▲1" in first, first
        assert app.state.status is not None
        assert "GPU 2 at 95 °C" in header_words(app.state.status)  # the help says it whole


def _starting(tmp_path: Path, lines: int) -> Snapshot:
    """The story log's first LINES lines: the server starting (loading its weights)."""
    log = tmp_path / "sglang.log"
    log.write_text("".join(STORY_LOG.read_text().splitlines(keepends=True)[:lines]))
    return log_snapshot(log)


def _words(text: str) -> set[str]:
    return set(re.split(r"[\s·]+", text)) - {""}


@pytest.mark.parametrize("width", (80, 90, 100, 120, 160))
async def test_a_starting_status_line_drops_whole_items(tmp_path: Path, width: int) -> None:
    snapshot = _starting(tmp_path, 150)
    clock = datetime(2026, 2, 27, 9, 6, 30).timestamp  # in the log's clock, before ready
    app = KvtopApp(
        StillFeed(snapshot), source_label="sglang.log", clock=clock, host_name="gpu-host"
    )
    async with app.run_test(size=(width, 24)) as pilot:
        await until(pilot, "the status line", lambda: "starting" in screen_text(app))
        first = screen_text(app).splitlines()[0]
        assert app.state.status is not None
        whole = _words(header_words(app.state.status))
        markers = re.compile(r"^[●◐○](log|NV|NVML|met|metrics)$")
        cut = [w for w in _words(first) if w not in whole and not markers.match(w)]
        assert not cut, (cut, first)
        assert first.lstrip().startswith("▲ starting: load weights"), first
        assert "▲1" in first and "Kimi-K2.5" in first and len(first) <= width, first
