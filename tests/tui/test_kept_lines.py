"""The KV panel and the legend drawn from kept strips: character for character and style for
style what Textual's own drawing gives, kept until the words change, and left to Textual where
a line does not fit; start-up's objects set aside from the garbage collector when asked."""

from __future__ import annotations

import gc

import pytest
from rich.console import Console
from rich.style import Style
from rich.text import Text
from textual.strip import Strip
from textual.widget import Widget

from kvtop.live.app import KvtopApp
from kvtop.live.widgets.gpu_rows import MemoryLegend
from kvtop.live.widgets.kept_lines import KeptLines, text_strips
from kvtop.live.widgets.kv_panel import KvPanel
from tests.support.tui_support import (
    Feed,
    demo_snapshot,
    fixed_clock,
    make_app,
    screen_text,
    until,
)

pytestmark = pytest.mark.usefixtures("utc_zone")


def _cells(strip: Strip) -> list[tuple[str, Style | None]]:
    return [(ch, seg.style) for seg in strip for ch in seg.text]


def _textuals(widget: Widget) -> list[Strip]:
    """The widget's lines as Textual itself draws them (its Text turned into Content)."""
    widget._dirty_regions.add(widget.region)  # its own render cache is stale: drawn again
    return [Widget.render_line(widget, y) for y in range(widget.size.height)]


@pytest.mark.parametrize("size", [(120, 40), (80, 24)])
async def test_drawn_as_textual_draws_them(size: tuple[int, int]) -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=size) as pilot:
        await until(pilot, "the KV panel", lambda: "KV cache" in screen_text(app))
        for kind in (KvPanel, MemoryLegend):
            widget = app.screen.query_one(kind)
            ours = [widget.render_line(y) for y in range(widget.size.height)]
            theirs = _textuals(widget)
            assert any(s.cell_length for s in theirs), kind
            for mine, textual in zip(ours, theirs, strict=True):
                # Textual pads each line to the width itself (styles cache): compared unpadded.
                assert _cells(mine)[: textual.cell_length] == _cells(textual), kind
                assert mine.cell_length in (textual.cell_length, widget.size.width), kind


async def test_kept_until_the_words_change() -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, "the KV panel", lambda: "KV cache" in screen_text(app))
        panel = app.screen.query_one(KvPanel)
        first = panel.render_line(0)
        assert panel.render_line(0) is first  # the same words: the same strip, not made again
        panel._shown = Text("KV cache  other words")  # what show() keeps when words change
        again = panel.render_line(0)
        assert again is not first and again.text.startswith("KV cache  other words")


def test_a_line_wider_than_the_widget_is_left_to_textual() -> None:
    console = Console(width=80)
    text = Text("short\n" + "x" * 30)
    assert text_strips(text, 20, console, Style()) is None
    strips = text_strips(text, 30, console, Style(color="red"))
    assert strips is not None and [s.text for s in strips] == ["short", "x" * 30]
    assert all(seg.style is not None and seg.style.color is not None for seg in strips[0])


async def test_a_narrow_kv_panel_is_cut_by_textual_with_an_ellipsis() -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=(40, 30)) as pilot:
        await until(pilot, "the KV panel", lambda: "KV cache" in screen_text(app))
        panel = app.screen.query_one(KvPanel)
        assert text_strips(panel.render(), 40, app.console, panel.rich_style) is None
        line = next(s for s in screen_text(app).splitlines() if s.startswith("KV cache"))
        assert line.endswith("…") and len(line) <= 40


def test_kept_lines_is_not_in_textuals_css_chain() -> None:
    # Second among the bases: the first base decides the component classes and CSS type names.
    assert KvPanel.__bases__[-1] is KeptLines and MemoryLegend.__bases__[-1] is KeptLines


async def test_startup_objects_set_aside_from_the_collector_when_asked() -> None:
    before = gc.get_freeze_count()
    feed = Feed(demo_snapshot())
    app = KvtopApp(
        feed,
        source_label="demo",
        demo=True,
        clock=fixed_clock,
        host_name="gpu-host",
        settle_memory_after=2,
    )
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, "the first snapshot drawn", lambda: "KV cache" in screen_text(app))
            await pilot.pause(0.2)
            assert gc.get_freeze_count() == before  # start-up is not done with one snapshot
            feed.push(demo_snapshot(60.0))
            await until(pilot, "the objects set aside", lambda: gc.get_freeze_count() > before)
            assert app._applied == 2
    finally:
        gc.unfreeze()  # the rest of the test run collects as usual


async def test_not_set_aside_unless_asked() -> None:
    gc.unfreeze()
    app = make_app(demo_snapshot())
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, "the KV panel", lambda: "KV cache" in screen_text(app))
        await pilot.pause(0.2)
        assert gc.get_freeze_count() == 0
