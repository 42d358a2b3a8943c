"""Each fact once and every word whole, at every width: the KV panel's line, the key bar, the
status line (the worst alert named, the alert counts kept, a starting state shortened by whole
words). The real app under Pilot on the demo's still and the story log cut before ready."""

from __future__ import annotations

import re

import pytest

from kvtop.live.widgets.kv_panel import KvPanel
from tests.support.tui_support import demo_snapshot, make_app, screen_text, until

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
