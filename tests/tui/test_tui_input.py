"""Input that behaves under Textual's Pilot: the what-if field, the palette's
entries (Theme, Save theme to config, Screenshot, Keys), the help's key list, mouse clicks on
GPU rows and the GPU order. The real app on the demo's snapshot; only the feed is a stand-in
(tests/support/tui_support.py)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from textual.app import App
from textual.command import CommandList, CommandPalette
from textual.widgets import Input

from kvtop.config import parse_config
from kvtop.live.app import KvtopApp
from kvtop.live.key_list import bindings_of, key_entries, key_label
from kvtop.live.screens.events import EventsScreen
from kvtop.live.screens.formula import FormulaScreen
from kvtop.live.screens.gpu_detail import GpuDetailScreen
from kvtop.live.screens.help import HelpScreen
from kvtop.live.screens.overview import OverviewScreen
from kvtop.live.screens.processes import ProcessesScreen
from kvtop.live.widgets.gpu_rows import GpuHeader, GpuRow, GpuTable
from kvtop.model.sizing import tuning
from tests.support.tui_support import (
    demo_snapshot,
    gpu_rows,
    gpu_table,
    help_text,
    make_app,
    screen_text,
    sixteen_gpus_snapshot,
    until,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("utc_zone")]

SIZES = ((80, 24), (100, 30), (120, 40), (200, 60))
BIG = (120, 40)


def _answer(app: KvtopApp) -> str:
    return str(app.screen.query_one("#what-if").render())


async def _formula(pilot) -> FormulaScreen:  # type: ignore[no-untyped-def]
    await pilot.press("f")
    await until(pilot, "the formula", lambda: isinstance(pilot.app.screen, FormulaScreen))
    screen = pilot.app.screen
    await until(pilot, "the start value", lambda: screen.query_one("#mfs", Input).value != "")
    return screen


async def _type_mfs(pilot, text: str) -> str:  # type: ignore[no-untyped-def]
    """Select the field's value (as focusing it does) and type `text` over it."""
    field = pilot.app.screen.query_one("#mfs", Input)
    field.select_all()
    await pilot.press(*text)
    assert field.value == text
    return _answer(pilot.app)


# -- the what-if field ---------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_typing_replaces_the_what_if_value(size: tuple[int, int]) -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        screen = await _formula(pilot)
        field = screen.query_one("#mfs", Input)
        assert field.has_focus and field.value == "0.90"
        assert field.selected_text == "0.90"  # selected on opening: typing replaces it
        await pilot.press(*"0.95")
        assert field.value == "0.95"  # not 0.900.95
        assert _answer(app).startswith("0.95 → ")
        await pilot.press("up")  # kvtop sets the value: selected again
        assert field.value == "0.96" and field.selected_text == "0.96"
        await pilot.press(*"0.89")
        assert field.value == "0.89" and _answer(app).startswith("0.89 → ")
        screen.query_one("#tokens", Input).focus()
        await pilot.press("shift+tab")  # back on the field by Tab: selected again
        assert field.has_focus and field.selected_text == "0.89"


async def test_every_value_sglang_cannot_start_with_gets_the_same_kind_of_answer() -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        screen = await _formula(pilot)
        inputs = app.state.snapshot.analysis.explanation.inputs
        lowest = tuning.minimum_viable_mfs(inputs)
        assert f"{lowest:.4f}" == "0.7682"  # 1 − 21.60 / 93.17, SGLang's own minimum
        out = screen.query_one("#what-if")
        # Over 1, at 1, at 0, under 0 and just under the minimum: SGLang fails at startup,
        # and the answer says so, why, and which values start.
        expected = {
            "1": "at 1.00 SGLang fails at startup: its reserve pre-load free × (1 − "
            "mem_fraction_static) would be 0.00 GiB, so the KV cache would claim all the free "
            "memory or more (CUDA out of memory); values from 0.7682 to under 1 can start",
            "1.2": "at 1.20 SGLang fails at startup: its reserve pre-load free × (1 − "
            "mem_fraction_static) would be −18.63 GiB, so the KV cache would claim all the free "
            "memory or more (CUDA out of memory); values from 0.7682 to under 1 can start",
            "88": "(did you mean 0.88?)",
            "0": "at 0.00 SGLang fails at startup: the KV cache would be empty (the weights leave "
            "it no memory); the minimum is 0.7682, use a value above it",
            "-0.5": "at -0.50 SGLang fails at startup: the KV cache would be empty",
            "0.768": "at 0.768 SGLang fails at startup: the KV cache would be empty (the weights "
            "leave it no memory); the minimum is 0.7682, use a value above it",
            "0.76": "the minimum is 0.7682, use a value above it",
        }
        for typed, words in expected.items():
            answer = await _type_mfs(pilot, typed)
            assert words in answer, typed
            assert out.has_class("-warn"), typed
        answer = await _type_mfs(pilot, "0.77")  # just over the minimum: it starts
        assert answer.startswith("0.77 → ") and "fails" not in answer
        answer = await _type_mfs(pilot, "abc")
        assert answer == "'abc' is not a number: type a fraction such as 0.90"
        assert isinstance(app.screen, FormulaScreen)


async def test_counts_are_decimal_300k_is_300000_tokens() -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        screen = await _formula(pilot)
        screen.query_one("#tokens", Input).focus()
        await pilot.press(*"300k")
        answer = str(screen.query_one("#tokens-answer").render())
        assert re.search(r"300,000 tokens in the KV cache: mem_fraction_static 0\.\d{3}", answer)
        length = screen.query_one("#length", Input)
        length.focus()
        await pilot.press(*"1.5M")  # focused: its value selected, typing replaces it
        assert length.value == "1.5M"
        answer = str(screen.query_one("#requests-answer").render())
        assert "4 concurrent requests of 1,500,000 tokens" in answer
        assert app.state.request_len == 1_500_000


# -- the palette -------------------------------------------------------------------------------
def _palette_highlight(app) -> str | None:  # type: ignore[no-untyped-def]
    if not isinstance(app.screen, CommandPalette):
        return None
    hits = app.screen.query_one(CommandList)
    if hits.highlighted is None:
        return None
    return str(hits.get_option_at_index(hits.highlighted).prompt).splitlines()[0]


async def _run_command(pilot, title: str) -> None:  # type: ignore[no-untyped-def]
    await pilot.press("ctrl+p")
    await until(pilot, "the palette", lambda: isinstance(pilot.app.screen, CommandPalette))
    await pilot.press(*title.lower())
    await until(
        pilot, f"the palette to offer {title}", lambda: _palette_highlight(pilot.app) == title
    )
    await pilot.press("enter")


def _notes(app: App[object]) -> list[str]:
    return [n.message for n in app._notifications]


async def test_palette_offers_only_entries_that_work() -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for title in ("Theme", "Save theme to config", "Screenshot", "Keys", "Sort", "Quit"):
            assert title in titles
        assert "Maximize" not in titles and titles.count("Keys") == 1
        await _run_command(pilot, "Keys")  # kvtop's key list, not Textual's summary
        await until(pilot, "the help", lambda: isinstance(app.screen, HelpScreen))
        assert "PgUp PgDn Home End" in screen_text(app)


OVERVIEW_ACTIONS = (
    "Events", "Raw log", "Formula", "GPU detail", "Sort", "Compact", "Pause", "Help",
    "Dismiss note", "Slower", "Faster", "Suspend", "Quit",
)  # fmt: skip


async def test_the_palette_lists_every_action_of_the_view() -> None:
    """Built from the bindings: every key's action by its key bar name, with the key; in the
    events pane its own (search, save, copy, filters) and the app's it does not rebind."""
    app = make_app(demo_snapshot())
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        commands = {c.title: c.help for c in app.get_system_commands(app.screen)}
        assert set(OVERVIEW_ACTIONS) <= commands.keys(), sorted(commands)
        assert commands["Raw log"].endswith("(l)") and commands["Sort"].endswith("(o)")
        assert "(q / ctrl+c ctrl+q)" in commands["Quit"] or "ctrl+c" in commands["Quit"]
        await _run_command(pilot, "Raw log")
        await until(pilot, "the raw log", lambda: isinstance(app.screen, EventsScreen))
        assert app.screen.mode == "log"
        titles = {c.title for c in app.get_system_commands(app.screen)}
        want = {"Events", "Search", "Save", "Copy", "Rank filter", "Failures only", "Back"}
        assert want <= titles, sorted(titles)
        assert {"Formula", "Help", "Pause", "Quit"} <= titles  # the app's, not rebound here
        assert "GPU detail" not in titles  # the overview's key, not this view's
        assert "Compact" not in titles and "Raw log" not in titles  # nothing here; shown
        await _run_command(pilot, "Events")
        await until(pilot, "the events list", lambda: app.screen.mode == "events")


async def test_palette_screenshot_writes_an_svg_and_says_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    app = make_app(demo_snapshot())
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        await _run_command(pilot, "Screenshot")
        await until(
            pilot, "the screenshot's toast", lambda: any("screenshot" in n for n in _notes(app))
        )
        files = list(tmp_path.glob("kvtop-*.svg"))
        assert len(files) == 1
        assert f"screenshot saved: {files[0]}" in _notes(app)
        svg = files[0].read_text(encoding="utf-8")
        assert svg.startswith("<svg") and "TP7" in svg  # kvtop's screen, not the palette
        assert "Search for commands" not in svg


def _cells(app: KvtopApp) -> list[list[tuple[str, str]]]:
    strips = app.screen._compositor.render_strips()
    return [[(seg.text, str(seg.style)) for seg in strip] for strip in strips]


async def _started_with(theme: str, keys: tuple[str, ...] = ()) -> list[list[tuple[str, str]]]:
    app = make_app(demo_snapshot())
    app.theme = theme
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        for key in keys:
            await pilot.press(key)
        await pilot.pause()
        return _cells(app)


@pytest.mark.parametrize("keys", [(), ("enter",)], ids=["overview", "detail"])
async def test_a_theme_from_the_palette_colours_every_element(keys: tuple[str, ...]) -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        for key in keys:
            await pilot.press(key)
        before = _cells(app)
        await _run_command(pilot, "Theme")
        await until(pilot, "the theme list", lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"nord")
        await until(pilot, "nord offered", lambda: _palette_highlight(app) == "nord")
        await pilot.press("enter")
        await until(pilot, "the palette closed", lambda: not isinstance(app.screen, CommandPalette))
        assert app.theme == "nord"
        # No new reading arrives: every cell, bar segments and panels included, is exactly
        # what kvtop started with nord shows.
        want = await _started_with("nord", keys)
        await until(pilot, "every cell in nord's colours", lambda: _cells(app) == want)
        assert _cells(app) != before
        table = gpu_table(app) if not keys else None
        if table is not None:
            kv = table.segment_style("KV cache")
            assert (
                kv.color is not None and kv.color.triplet.hex == app.current_theme.success.lower()
            )


async def test_save_theme_to_config_keeps_the_files_other_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    config = tmp_path / "kvtop" / "config.toml"
    config.parent.mkdir()
    config.write_text(
        "# my kvtop\n"
        'url = "http://127.0.0.1:30000"   # the server\n'
        'theme = "gruvbox"  # was\n'
        "\n[thresholds]\nqueue_warning_s = 45\n",
        encoding="utf-8",
    )
    app = make_app(demo_snapshot())
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        app.theme = "dracula"
        await _run_command(pilot, "Save theme to config")
        await until(pilot, "the saved toast", lambda: any("saved in" in n for n in _notes(app)))
        assert f'theme = "dracula" saved in {config}' in _notes(app)
    text = config.read_text(encoding="utf-8")
    assert text == (
        "# my kvtop\n"
        'url = "http://127.0.0.1:30000"   # the server\n'
        'theme = "dracula"  # was\n'
        "\n[thresholds]\nqueue_warning_s = 45\n"
    )
    read = parse_config(text)
    assert read.theme == "dracula" and read.thresholds.queue_warning_s == 45


async def test_save_theme_to_a_broken_config_says_so_and_changes_nothing(
    tmp_path: Path,
) -> None:
    config = tmp_path / "config.toml"
    config.write_text("url = \n", encoding="utf-8")
    app = make_app(demo_snapshot())
    app.config_path = str(config)  # as --config PATH
    async with app.run_test(size=BIG) as pilot:
        await pilot.pause()
        await _run_command(pilot, "Save theme to config")
        await until(pilot, "the error toast", lambda: any("not saved" in n for n in _notes(app)))
        note = next(n for n in _notes(app) if "not saved" in n)
        assert str(config) in note and "line 1" in note and "fix the file" in note
    assert config.read_text(encoding="utf-8") == "url = \n"


# -- the help lists every key ------------------------------------------------------------------
VIEWS = [KvtopApp, OverviewScreen, GpuDetailScreen, ProcessesScreen, EventsScreen, FormulaScreen]


async def test_the_help_lists_every_binding_of_every_view() -> None:
    """Read from the views' own bindings: a key added to a view is in the help with no list to
    keep in step, under the view's heading, with its meaning."""
    app = make_app(demo_snapshot())
    async with app.run_test(size=(200, 200)) as pilot:
        await pilot.pause()
        await pilot.press("question_mark")
        await until(pilot, "the help", lambda: isinstance(app.screen, HelpScreen))
        text = help_text(app)
        for view in VIEWS:
            entries = key_entries(bindings_of(view))
            for binding in bindings_of(view):  # every key, with its line's meaning
                entry = next(
                    e
                    for e in entries
                    if binding.action == e.action
                    or e.meaning in (binding.tooltip, binding.description)
                )
                lines = [line for line in text.splitlines() if entry.meaning in line]
                assert lines, f"{view.__name__}: {binding.key} ({entry.meaning}) not in the help"
                for key in binding.key.split(","):
                    assert any(key_label(key) in line for line in lines), (key, lines)
        for heading in (
            "overview",
            "GPU detail",
            "processes",
            "events pane and raw log",
            "formula",
        ):
            assert re.search(rf"^{heading} *$", text, re.M), heading
        assert "ctrl+c" in text and "ctrl+z" in text and "ctrl+q" in text and "ctrl+p" in text
        assert re.search(r"ctrl\+z\s+suspend to the shell \(fg comes back\)", text)
        assert re.search(r"q ctrl\+c ctrl\+q +quit \(status 0\)", text)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_help_shows_the_paging_keys(size: tuple[int, int]) -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        await pilot.press("question_mark")
        await until(pilot, "the help", lambda: "PgUp PgDn Home End" in screen_text(app))
        assert "select 8 GPUs up / down, the first / the last GPU" in screen_text(app)


# -- mouse -------------------------------------------------------------------------------------
def _row(app: KvtopApp, gpu: int) -> GpuRow:
    return next(r for r in gpu_rows(app) if r.view and r.view.sample.index == gpu)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_a_click_selects_a_gpu_and_a_double_click_opens_it(size: tuple[int, int]) -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        assert await pilot.click(GpuTable, offset=(20, _row(app, 3).position))
        await until(pilot, "GPU 3 selected", lambda: _row(app, 3).selected)
        assert app.state.selected_gpu == 3 and isinstance(app.screen, OverviewScreen)
        assert [r.index for r in gpu_rows(app) if r.selected] == [3]
        assert await pilot.click(GpuTable, offset=(4, _row(app, 5).position), times=2)
        await until(pilot, "GPU detail", lambda: isinstance(app.screen, GpuDetailScreen))
        assert app.state.selected_gpu == 5
        await until(pilot, "GPU 5's detail", lambda: "GPU 5" in screen_text(app))


async def test_a_click_on_a_scrolled_table_selects_the_gpu_under_the_mouse() -> None:
    # Sixteen GPUs at 80x24: the table scrolls; a click maps the line under the mouse, not
    # the line that would be there unscrolled.
    app = make_app(sixteen_gpus_snapshot())
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, "sixteen lines", lambda: len(gpu_rows(app)) == 16)
        await pilot.press("end")
        await until(pilot, "GPU 15 selected", lambda: _row(app, 15).selected)
        container = app.screen.query_one("#gpu-list")
        assert container.scroll_offset.y > 0
        target = _row(app, 13)
        assert container.region.contains_region(target.region)  # on screen after the scroll
        # The offset is from the table's top, which has scrolled above the list's.
        assert gpu_table(app).region.y < container.region.y
        assert await pilot.click(GpuTable, offset=(20, target.position))
        await until(pilot, "GPU 13 selected", lambda: app.state.selected_gpu == 13)
        assert [r.index for r in gpu_rows(app) if r.selected] == [13]


async def test_a_new_reading_of_one_gpu_redraws_its_line_only() -> None:
    snapshot = demo_snapshot()
    app = make_app(snapshot)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, "eight lines", lambda: len(gpu_rows(app)) == 8)
        table = gpu_table(app)
        width = table.size.width
        before = [table.render_line(y) for y in range(8)]
        gpu = snapshot.gpus[4]
        busier = replace(gpu, sample=replace(gpu.sample, utilization_pct=12))
        app.apply(replace(snapshot, gpus=(*snapshot.gpus[:4], busier, *snapshot.gpus[5:])))
        await until(pilot, "GPU 4 at 12 %", lambda: " 12% " in table.render_line(4).text)
        after = [table.render_line(y) for y in range(8)]
        assert [a is b for a, b in zip(before, after, strict=True)] == [
            True,
            True,
            True,
            True,
            False,
            True,
            True,
            True,
        ]
        assert all(s.cell_length == width for s in after)


# -- the GPU order -----------------------------------------------------------------------------
def _order(app: KvtopApp) -> list[int]:
    return [r.index for r in gpu_rows(app)]


def _header(app: KvtopApp) -> str:
    return str(app.screen.query_one(GpuHeader).render())


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_o_sorts_the_gpus_with_an_indicator_and_keeps_the_selection(
    size: tuple[int, int],
) -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        await pilot.press("j", "j")  # GPU 2
        assert app.state.selected_gpu == 2
        assert "GPU▲" in _header(app) and _order(app) == list(range(8))
        # free GiB per GPU in the demo: 0 7.2409, 2 and 6 7.2509, 1 and 4 7.2609, 3 and 7
        # 7.2709, 5 7.2809; temperatures 1 3 4 49C, 6 48C, 2 5 47C, 0 7 46C.
        expected = {
            "free▲": [0, 2, 6, 1, 4, 3, 7, 5],
            "used/total▼": [0, 2, 6, 1, 4, 3, 7, 5],
            "tmp▼": [1, 3, 4, 6, 2, 5, 0, 7],
            "GPU▲": list(range(8)),
        }
        for marker, order in expected.items():
            await pilot.press("o")
            await until(pilot, f"the rows in {marker} order", lambda o=order: _order(app) == o)
            assert marker in screen_text(app).splitlines()[_header_line(app)]
            # The selection stays on GPU 2, wherever its row is now.
            assert app.state.selected_gpu == 2
            selected = [r.index for r in gpu_rows(app) if r.selected]
            assert selected == [2]
        await pilot.press("o", "j")  # free order: the row after GPU 2 is GPU 6
        assert app.state.selected_gpu == 6


def _header_line(app: KvtopApp) -> int:
    return app.screen.query_one(GpuHeader).region.y
