"""The TUI under Textual's Pilot: every key path on snapshots built by the real parser and the
real demo scenario (fixed clock). Only the feed is a stand-in (see tui_support)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from textual.command import CommandPalette
from textual.widget import Widget

from kvtop.live.screens.formula import FormulaScreen
from kvtop.live.screens.gpu_detail import GpuDetailScreen
from kvtop.live.screens.help import HelpScreen
from kvtop.live.screens.overview import OverviewScreen
from kvtop.live.widgets.gpu_rows import MemoryLegend
from kvtop.live.widgets.text_panels import EventsPanel, InsightsPanel
from kvtop.model.snapshot import Snapshot
from tests.support.paths import FIXTURES
from tests.support.tui_support import (
    Feed,
    demo_snapshot,
    gpu_rows,
    gpu_table,
    help_text,
    log_snapshot,
    make_app,
    screen_text,
    sixteen_gpus_snapshot,
    until,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("utc_zone")]

BIG, SMALL = (120, 40), (80, 24)


def _selected(app) -> list[int]:
    return [i for i, row in enumerate(gpu_rows(app)) if row.selected]


def _palette_highlight(app) -> str | None:
    """The title (first line of the prompt) of the command palette's highlighted hit."""
    from textual.command import CommandList

    if not isinstance(app.screen, CommandPalette):
        return None
    hits = app.screen.query_one(CommandList)
    if hits.highlighted is None:
        return None
    return str(hits.get_option_at_index(hits.highlighted).prompt).splitlines()[0]


async def test_overview_shows_every_gpu_with_rank_bar_and_figures() -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        text = screen_text(app)
        rows = [line for line in text.splitlines() if re.search(r"^\W*\d\s+TP\d", line)]
        assert [re.search(r"TP\d", r).group() for r in rows] == [f"TP{i}" for i in range(8)]
        assert all("█" in r and "▓" in r and "│" in r and "95.6" in r for r in rows)
        first = "\n".join(text.splitlines()[:2])  # the status line: two lines at this size
        assert (
            "gpu-host" in first and "ready 1m00s" in first and "SGLang 0.5.3–0.5.8" in first
        )  # the log's range, as a range
        assert "mfs 0.88" in first and "DEMO" in first
        assert "159,277 tokens" in text and "fits 0.61 × 262,144" in text
        assert "44.77 GB per rank × 8 = 358.16 GB" in text
        assert "93.17 × (1 − 0.88) = 11.18" in text  # the reserve insight, from the model
        # The events that do not fit are counted; the events pane (e) has them all.
        assert re.search(r"\+\d+ more \(e: all events\)", text)
        await pilot.press("e")
        await until(pilot, "the events pane", lambda: "newest first" in screen_text(app))
        assert "load weights  −71.57 GiB → 21.60 GiB free in 215.0 s" in screen_text(app)


async def test_eight_gpus_fit_on_80x24_in_compact() -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=SMALL) as pilot:
        await pilot.pause()
        assert app.compact  # chosen from the height
        rows = gpu_rows(app)
        assert len(rows) == 8
        assert all(r.region.y >= 0 and r.region.bottom <= 24 - 1 for r in rows)
        text = screen_text(app)
        assert all(f"TP{i}" in text for i in range(8))
        assert "KV cache" in text


async def test_move_selection_with_arrows_and_jk_clamped() -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        assert _selected(app) == [0]
        await pilot.press("down", "j", "j")
        assert _selected(app) == [3]
        assert "GPU 3:" in screen_text(app)  # the legend follows the selection
        await pilot.press("k")
        assert _selected(app) == [2]
        await pilot.press("up", "up", "up", "up")
        assert _selected(app) == [0]
        await pilot.press("end")
        assert _selected(app) == [7]
        await pilot.press("j")
        assert _selected(app) == [7]


async def test_enter_opens_gpu_detail_and_escape_returns() -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        await pilot.press("j", "j", "j", "enter")
        await pilot.pause()
        assert isinstance(app.screen, GpuDetailScreen)
        assert app.screen.gpu_index == 3
        text = screen_text(app)
        assert "GPU 3 · TP3 · NVIDIA RTX PRO 6000" in text
        assert "phase waterfall (TP3)" in text
        assert "load weights" in text and "93.20" in text and "215.0 s" in text
        assert "log TP3" in text and "Load weight end" in text  # where a number comes from
        assert "derived: NVML total − pre-load free" in text
        body = app.screen.query_one("#detail-body")  # the processes: below the breakdown
        body.scroll_end(animate=False)
        await until(pilot, "the processes", lambda: "41203" in screen_text(app))
        await pilot.press("j")  # next GPU without leaving the detail
        assert app.screen.gpu_index == 4
        assert "phase waterfall (TP4)" in screen_text(app)
        await pilot.press("escape")
        assert isinstance(app.screen, OverviewScreen)
        assert _selected(app) == [4]  # back on the GPU last shown


async def test_formula_modal_explains_with_live_numbers_and_answers_what_if() -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        await pilot.press("f")
        await pilot.pause()
        assert isinstance(app.screen, FormulaScreen)
        text = screen_text(app)
        assert "93.17 × (1 − 0.88)" in text
        assert "159,271 tokens predicted · 159,277 logged" in text
        assert "Where the reserve went (TP0)" in text
        what_if = str(app.screen.query_one("#what-if").render())
        assert "0.90 → 187,761 tokens (+28,484 tokens (+17.9%))" in what_if
        # The engine's (kvtop plan --from-log's): the tightest rank, the draft's pool growing.
        assert "free after startup 5.43 GiB" in what_if
        await pilot.press("up", "up")  # 0.92
        what_if = str(app.screen.query_one("#what-if").render())
        assert what_if.startswith("0.92 →")
        assert "free after startup would be only 3.46 GiB" in what_if and "safe margin" in what_if
        assert app.screen.query_one("#what-if").has_class("-warn")
        await pilot.press("escape")
        assert isinstance(app.screen, OverviewScreen)


async def test_formula_typed_values_and_reverse_questions() -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        await pilot.press("f")
        await pilot.pause()
        screen = app.screen
        mfs = screen.query_one("#mfs")
        mfs.value = ""
        await pilot.press(*"0.97")
        assert "0.97" in str(screen.query_one("#what-if").render())
        mfs.value = ""
        await pilot.press(*"abc")
        assert "not a number" in str(screen.query_one("#what-if").render())
        screen.query_one("#tokens").focus()
        await pilot.press(*"qcf")  # typed into the field: not quit, compact or formula
        assert isinstance(app.screen, FormulaScreen) and not app.state.compact
        assert "is not a count of tokens" in str(screen.query_one("#tokens-answer").render())
        screen.query_one("#tokens").value = ""
        await pilot.press(*"300k")
        answer = str(screen.query_one("#tokens-answer").render())
        assert re.search(r"300,000 tokens in the KV cache: mem_fraction_static 0\.\d{3}", answer)
        screen.query_one("#requests").value = "4"
        screen.query_one("#length").value = ""
        screen.query_one("#length").focus()
        await pilot.press(*"262144")
        answer = str(screen.query_one("#requests-answer").render())
        assert "4 concurrent requests of 262,144 tokens" in answer
        assert "no mem_fraction_static fits" in answer  # 1M tokens cannot fit on 8 × 96 GB
        assert app.state.request_len == 262144


async def test_formula_from_detail_is_for_that_rank() -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        await pilot.press("j", "j", "enter", "f")
        await pilot.pause()
        assert isinstance(app.screen, FormulaScreen)
        assert app.screen.rank == "TP2"
        assert "TP2 (selected GPU) on its own" in screen_text(app)
        assert "TP2 (selected GPU) on its own: pre-load free" in screen_text(app)
        await pilot.press("escape")
        assert isinstance(app.screen, GpuDetailScreen)


async def test_pause_freezes_the_display_and_resume_catches_up() -> None:
    first, later = demo_snapshot(), demo_snapshot(serving_s=120)
    app = make_app(first)
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        before = screen_text(app).splitlines()[3]  # GPU 0 (under a two-line status line)
        await pilot.press("space")
        assert "PAUSED" in screen_text(app).splitlines()[0]
        app.feed.push(later)  # type: ignore[attr-defined]
        await until(pilot, "the new snapshot collected", lambda: app.state.latest is later)
        await pilot.pause()  # every repaint it could cause has run
        assert screen_text(app).splitlines()[3] == before  # still collected, not shown
        await pilot.press("space")
        await until(
            pilot,
            "the display to catch up after resuming",
            lambda: (
                "PAUSED" not in screen_text(app).splitlines()[0]
                and screen_text(app).splitlines()[3] != before
            ),
        )


async def test_interval_keys_change_the_feed_period() -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        await pilot.press("plus")
        assert app.feed.interval_s == 2.0
        assert "↻2s" in screen_text(app).splitlines()[0]
        await pilot.press("minus", "minus", "minus")
        assert app.feed.interval_s == 0.25
        await pilot.press("minus")
        assert app.feed.interval_s == 0.25  # the fastest step


async def test_compact_toggle_and_resize() -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        assert not app.compact
        full = screen_text(app)
        assert full.count("• ") >= 3
        await pilot.press("c")
        assert app.compact
        assert screen_text(app).count("• ") == 1
        await pilot.press("c")
        assert not app.compact
        for size in [(40, 12), (300, 50), SMALL, BIG]:
            await pilot.resize_terminal(*size)
            await pilot.pause()
            text = screen_text(app)
            assert "TP0" in text
        assert len(gpu_rows(app)) == 8


async def test_help_and_command_palette() -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = help_text(app)
        assert "space" in text and "pause the display" in text and "reserve" in text
        await pilot.press("escape")
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for title in ("GPU detail", "Formula", "Help", "Pause", "Compact"):
            assert title in titles
        await pilot.press("ctrl+p")
        await pilot.pause()
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"formula")
        # The palette searches in a worker: enter only once "Formula" is the highlighted hit.
        await until(
            pilot, "the palette to offer Formula", lambda: _palette_highlight(app) == "Formula"
        )
        await pilot.press("enter")
        await until(pilot, "the formula screen", lambda: isinstance(app.screen, FormulaScreen))


async def test_q_exits_with_status_zero() -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0


async def test_markup_and_escape_sequences_in_a_log_line_render_literally(tmp_path: Path) -> None:
    log = tmp_path / "hostile.log"
    hostile = (
        "[2026-02-27 09:06:00 TP3] torch.OutOfMemoryError: CUDA out of memory. "
        "[bold red]PWNED[/bold red] [link=http://evil]x[/link] \x1b[2J\x1b]0;title\x07 "
        "\x1b[31mred\x1b[0m $(rm -rf /)"
    )
    log.write_text(hostile + "\n", encoding="utf-8")
    app = make_app(log_snapshot(log), demo=False, label=str(log))
    async with app.run_test(size=(200, 30)) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert "[bold red]PWNED[/bold red]" in text
        assert "[link=http://evil]x[/link]" in text
        assert "␛[2J" in text and "␛[31mred" in text
        assert "\x1b" not in text and "\x07" not in text
        assert "failed: out of memory" in text.splitlines()[0]
        assert "→ Lower --mem-fraction-static" in text  # the failure's next step
        svg = app.export_screenshot()
        assert "PWNED" in svg and "\x1b" not in svg


async def test_without_gpus_the_overview_says_so_and_enter_is_harmless() -> None:
    snapshot = log_snapshot(FIXTURES / "sglang-logs" / "05-pr11830-single-gpu-b200.log")
    app = make_app(snapshot, demo=False, label="05.log")
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert "no GPU readings" in text
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, OverviewScreen)
        await pilot.press("f")
        await pilot.pause()
        assert "SGLang's KV sizing" in screen_text(app)


async def test_gpus_coming_and_going_add_and_remove_rows() -> None:
    full = demo_snapshot()
    fewer = type(full)(**{**{f: getattr(full, f) for f in full.__slots__}, "gpus": full.gpus[:5]})
    app = make_app(full)
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        await pilot.press("end")
        assert _selected(app) == [7]
        app.feed.push(fewer)  # type: ignore[attr-defined]
        await until(pilot, "five rows", lambda: len(gpu_rows(app)) == 5)
        await pilot.pause()
        assert _selected(app) == [4]  # the selection moved onto the last GPU left
        app.feed.push(full)  # type: ignore[attr-defined]
        await until(pilot, "eight rows again", lambda: len(gpu_rows(app)) == 8)


async def test_a_broken_feed_becomes_a_sentence_not_a_traceback() -> None:
    class Broken(Feed):
        async def snapshots(self):
            yield demo_snapshot()
            raise RuntimeError("journal reader exploded")

    app = make_app()
    app.feed = Broken()
    async with app.run_test(size=BIG) as pilot:
        await until(pilot, "the feed's failure", lambda: app.state.problem is not None)
        assert "journal reader exploded" in app.state.problem
        assert "restart kvtop" in app.state.problem
        assert "TP0" in screen_text(app)  # the last readings stay on screen


async def test_sixteen_gpus_scroll_and_the_selection_stays_visible() -> None:
    app = make_app(sixteen_gpus_snapshot())
    async with app.run_test(size=SMALL) as pilot:
        await pilot.pause()
        rows = gpu_rows(app)
        assert len(rows) == 16
        container = app.screen.query_one("#gpu-list")
        assert container.region.height < 16  # they do not all fit: the list scrolls
        await pilot.press("end")
        await pilot.pause()
        last = rows[-1]
        assert container.region.contains_region(last.region)
        assert "15 " in screen_text(app)
        await pilot.press("home")
        await pilot.pause()
        assert container.region.contains_region(rows[0].region)


async def test_formula_fits_80x24_with_steps_stacked() -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=SMALL) as pilot:
        await pilot.pause()
        await pilot.press("f")
        await pilot.pause()
        text = screen_text(app)
        # Below 100 columns each step is its label and result, the arithmetic on its own line.
        assert re.search(r"│ reserve\s+11\.18 GiB\s+│", text)
        assert "pre-load free × (1 − mfs) = 93.17 × (1 − 0.88)" in text
        assert "0.90 → 187,761 tokens" in text  # the what-if stays in view below the formula
        assert "Esc closes" in text


async def test_a_theme_change_recolours_the_cached_rows_and_panels() -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        table = gpu_table(app)

        def weights_colour() -> object:
            strip = table.render_line(0)
            return next(seg.style.color for seg in strip if "█" in seg.text and seg.style)

        before = weights_colour()
        app.theme = "textual-light" if app.theme != "textual-light" else "nord"
        await pilot.pause()
        assert weights_colour() != before  # with no new reading: the cache was dropped


async def test_the_legend_repaints_only_when_its_words_change() -> None:
    """A new reading of the selected GPU whose GiB are the same (its utilisation and
    temperature moved) leaves the legend's lines alone; another GPU's figures repaint it."""
    app = make_app(demo_snapshot())
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        legend = app.screen.query_one(MemoryLegend)
        snapshot = app.state.snapshot
        assert snapshot is not None
        first, second = snapshot.gpus[0], snapshot.gpus[1]
        repaints: list[bool] = []
        repaint = legend.refresh

        def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
            repaints.append(True)
            return repaint(*args, **kwargs)

        legend.refresh = counted  # type: ignore[method-assign]
        warmer = replace(first, sample=replace(first.sample, utilization_pct=3, temperature_c=71))
        assert warmer != first
        legend.show(warmer)
        assert repaints == []
        legend.show(second)
        assert repaints == [True]
        await pilot.pause()
        assert "GPU 1:" in screen_text(app)


def _count_renders(widget: Widget, rendered: list[str]) -> None:
    """Note the widget's class in `rendered` each time Textual asks it for its lines."""
    name, render_lines = type(widget).__name__, widget.render_lines

    def counted(crop):  # type: ignore[no-untyped-def]
        rendered.append(name)
        return render_lines(crop)

    widget.render_lines = counted  # type: ignore[method-assign]


async def test_new_gpu_figures_repaint_the_rows_not_the_panels_below() -> None:
    """Textual renders at each refresh every widget whose container overlaps the changed
    lines: the panels below the KV cache sit in their own container, so a reading that moves
    only the GPU rows leaves them unrendered."""
    app = make_app(demo_snapshot())
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        snapshot = app.state.snapshot
        assert snapshot is not None
        gpu = snapshot.gpus[0]

        def busier(util: int) -> Snapshot:
            sample = replace(gpu.sample, utilization_pct=util)
            return replace(snapshot, gpus=(replace(gpu, sample=sample), *snapshot.gpus[1:]))

        app.apply(busier(97))  # the first reading after start-up lays the screen out
        await pilot.pause()
        rendered: list[str] = []
        widgets = (
            gpu_table(app),
            app.screen.query_one(InsightsPanel),
            app.screen.query_one(EventsPanel),
        )
        for widget in widgets:
            _count_renders(widget, rendered)
        app.apply(busier(98))
        await pilot.pause()
        assert "GpuTable" in rendered
        assert "InsightsPanel" not in rendered and "EventsPanel" not in rendered
