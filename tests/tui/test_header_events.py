"""A status line that keeps what matters at every size, a legend that wraps
between items, and the events pane (e) / raw log (l): scroll, search, filters, +N more, order
within one second, tracebacks shown literally, noise folded, save to a file, OSC 52 copy.

Real parts: the demo still and real log files through the real parser and Session; the app is
the real KvtopApp under Pilot. The feed is tests/support/still.StillFeed (prepared snapshots); where
the raw log view needs lines, the feed carries the real Session's ring (`raw_lines`), as a live
Session does.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from kvtop.live.app import KvtopApp
from kvtop.live.screens.events import EventsScreen
from kvtop.live.screens.help import HelpScreen
from kvtop.live.view_file import save_dir
from kvtop.live.view_state import StatusFacts, header_layout
from kvtop.live.widgets.lines_view import LinesView
from kvtop.live.widgets.stacked_bar import wrap_items
from kvtop.model.event_view import Filters, event_lines, log_lines, matches
from kvtop.model.status.server_status import short_model
from kvtop.model.timeline import timeline
from kvtop.session import Options, Session
from kvtop.sglang.raw_lines import RawLines
from kvtop.sglang.story import fold_lines
from tests.support.paths import STORY_LOG
from tests.support.still import StillFeed
from tests.support.tui_support import (
    demo_snapshot,
    fixed_clock,
    judged_in_turn,
    make_app,
    screen_text,
    until,
    utc,
)

SIZES = [(80, 24), (100, 30), (120, 40), (200, 60)]
# What must survive on the first line at every size: state and uptime, model, TP, mfs, the
# EAGLE3 and HiCache flags (HiCache may read HiC) and the three source markers.
MUST = ("ready 1m00s", "Kimi-K2.5", "TP8", "mfs 0.88", "EAGLE3")
MARKERS = (r"●log", r"●NV(ML)?\b", r"●met(rics)?\b")


def _head(text: str) -> str:
    return text.splitlines()[0]


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
async def test_header_keeps_what_matters(size: tuple[int, int]) -> None:
    with utc():
        app = make_app(demo_snapshot())
        async with app.run_test(size=size) as pilot:
            await until(pilot, "the status line", lambda: "ready 1m00s" in screen_text(app))
            text = screen_text(app)
            first = _head(text)
            assert len(first) <= size[0]
            for value in MUST:
                assert value in first, (value, first)
            assert re.search(r"\bHiC(ache)?\b", first), first
            for marker in MARKERS:
                assert re.search(marker, first), (marker, first)
            assert "DEMO" in first
            # Host, log source and version: on the first line, else the second when the screen
            # has room (30 rows), else in the help's sources view.
            lines = text.splitlines()[: 2 if size[1] >= 30 else 1]
            shown = "\n".join(lines)
            if size[1] >= 30:
                for value in ("gpu-host", "SGLang 0.5.3–0.5.8"):
                    assert value in shown, (value, shown)
            else:
                await pilot.press("question_mark")
                await until(pilot, "help", lambda: isinstance(app.screen, HelpScreen))
                help_screen = app.screen
                assert isinstance(help_screen, HelpScreen)
                console = Console(width=200, record=True, file=io.StringIO())
                console.print(help_screen._content(app.state))
                sources_view = console.export_text()
                assert "gpu-host · demo" in sources_view and "SGLang 0.5.3–0.5.8" in sources_view


def _facts(**changes: object) -> StatusFacts:
    base = {
        "left": ("a-very-long-host-name.example.com", "/var/log/sglang/server.log"),
        "state": "ready 2h14m",
        "state_kind": "ready",
        "sources": (),
        "paused": True,
        "interval_s": 1.0,
        "demo": False,
        "facts": (),
    }
    base.update(changes)
    return StatusFacts(**base)  # type: ignore[arg-type]


def test_header_layout_drops_by_priority_and_shortens() -> None:
    from kvtop.model.status.server_status import EXTRA, MUST, HeaderItem

    model = "Meta-Llama-3.1-405B-Instruct-FP8"
    items = (
        HeaderItem("SGLang 0.5.8", "SGLang 0.5.8", EXTRA),
        HeaderItem(model, short_model(model), MUST),
        HeaderItem("TP8", "TP8", MUST),
        HeaderItem("DP2", "DP2", MUST),
        HeaderItem("EP8", "EP8", MUST),
        HeaderItem("mfs 0.85", "mfs 0.85", MUST),
        HeaderItem("HiCache", "HiC", MUST),
    )
    layout = header_layout(_facts(fact_items=items, facts=tuple(i.text for i in items)), 80)
    first = "".join(t for t, _ in layout.left + layout.right)
    assert len(first) <= 80
    for value in ("ready 2h14m", "Meta-Llama-3.…", "TP8", "DP2", "EP8", "mfs 0.85", "HiC"):
        assert value in first, (value, first)
    assert "PAUSED" in first  # paused is never dropped
    assert "a-very-long-host-name.example.com" in layout.moved
    assert "SGLang 0.5.8" in layout.moved
    wide = header_layout(_facts(fact_items=items, facts=tuple(i.text for i in items)), 300)
    assert not wide.moved and model in "".join(t for t, _ in wide.left)


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
async def test_legend_never_splits_an_item(size: tuple[int, int]) -> None:
    with utc():
        app = make_app(demo_snapshot())
        async with app.run_test(size=size) as pilot:
            await until(pilot, "the legend", lambda: "GPU 0" in screen_text(app))
            legend = str(app.screen.query_one("#legend").render()).splitlines()
            assert legend and all(len(line) <= size[0] for line in legend)
            joined = "\n".join(legend)
            for line in legend:
                assert not line.rstrip().endswith(("│", "▚", "█", "▓", "·")), joined
            # The reserve item whole on one line, with its figures.
            assert re.search(r"│ ?reserve 11\.2( from 84\.4)?", joined), joined
            assert re.search(r"█ ?(weights )?71\.6", joined), joined


def test_wrap_items_breaks_between_items() -> None:
    from rich.text import Text

    items = [Text(f"▓ item{i} {i}.5") for i in range(6)]  # 11 cells each
    text = wrap_items(items, 30, lead=Text("GPU: "))
    lines = text.plain.splitlines()
    assert lines == [
        "GPU: ▓ item0 0.5  ▓ item1 1.5",
        "     ▓ item2 2.5  ▓ item3 3.5",
        "     ▓ item4 4.5  ▓ item5 5.5",
    ]
    one = wrap_items(items, 30, lead=Text("GPU: "), lines=1).plain
    assert one == "GPU: ▓ item0 0.5  ▓ item1 1.5 …"


# -- events -----------------------------------------------------------------------------------
def _story_head() -> list[str]:
    """The story log's lines before its first rank line: the server_args line and the rest."""
    lines = STORY_LOG.read_text().splitlines()
    first_rank = next(i for i, line in enumerate(lines) if " TP" in line[:30])
    return lines[:first_rank]


SAME_SECOND = [  # one rank's phases, all logged at 09:02:14, in log order
    "[2026-02-27 09:02:14 TP0] Init torch distributed begin.",
    "[2026-02-27 09:02:14 TP0] Init torch distributed ends. mem usage=1.25 GB",
    "[2026-02-27 09:02:14 TP0] Load weight begin. avail mem=93.17 GB",
    "[2026-02-27 09:02:14 TP0] Load weight end. type=KimiK25ForConditionalGeneration, "
    "dtype=torch.bfloat16, avail mem=21.60 GB, mem usage=71.57 GB.",
    "[2026-02-27 09:02:14 TP0] KV Cache is allocated. #tokens: 159277, KV size: 10.42 GB",
    "[2026-02-27 09:02:14 TP0] Memory pool end. avail mem=11.18 GB",
]

TRACEBACK = [
    "[2026-02-27 09:02:15 TP1] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/sgl/managers/scheduler.py", line 2710, in run_scheduler_process',
    "    [bold red]not markup[/bold red] \x1b[2J",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
]


def _session(tmp_path: Path, lines: list[str]) -> Session:
    log = tmp_path / "sglang.log"
    log.write_text("\n".join(lines) + "\n")
    session = Session(Options(log_file=str(log), nvml=False, metrics=False), clock=fixed_clock)
    session._read_whole_log()
    return session


def _app(session: Session) -> KvtopApp:
    feed = StillFeed(session.snapshot())
    feed.raw_lines = session.raw_lines  # as a live Session has
    return KvtopApp(feed, source_label="sglang.log", clock=fixed_clock, host_name="gpu-host")


def test_same_second_events_keep_log_order_reversed(tmp_path: Path) -> None:
    session = _session(tmp_path, _story_head() + SAME_SECOND)
    rows = timeline(session.snapshot().analysis.startup).rows
    names = [row.what for row in rows]
    assert names[:4] == ["memory pool", "KV cache", "load weights", "init torch distributed"]


async def test_events_pane_order_within_one_second(tmp_path: Path) -> None:
    session = _session(tmp_path, _story_head() + SAME_SECOND)
    app = _app(session)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, "the overview", lambda: "memory pool" in screen_text(app))
        await pilot.press("e")
        await until(pilot, "the events pane", lambda: isinstance(app.screen, EventsScreen))
        text = screen_text(app)
        at = [
            text.index(f"09:02:14 TP0     {n}") for n in ("memory pool", "KV cache", "load weights")
        ]
        assert at == sorted(at), text


async def test_raw_log_shows_a_traceback_literally(tmp_path: Path) -> None:
    session = _session(tmp_path, _story_head() + SAME_SECOND + TRACEBACK)
    app = _app(session)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, "the overview", lambda: "memory pool" in screen_text(app))
        await pilot.press("l")
        await until(pilot, "the raw log", lambda: "raw log, oldest first" in screen_text(app))
        await until(pilot, "the traceback", lambda: "illegal memory access" in screen_text(app))
        text = screen_text(app)
        assert "Scheduler hit an exception: Traceback (most recent call last):" in text
        assert '  File "/sgl/managers/scheduler.py", line 2710, in run_scheduler_process' in text
        assert "[bold red]not markup[/bold red] ␛[2J" in text  # literal, escape made visible
        assert "\x1b" not in text
        # failures only: the failure line and its traceback, nothing else
        await pilot.press("x")
        await until(pilot, "failures only", lambda: "failures only" in screen_text(app))
        view = app.screen.query_one(LinesView)
        assert [line.text for line in view.lines] == [
            TRACEBACK[0],
            TRACEBACK[1],
            "    [bold red]not markup[/bold red] ␛[2J",
            TRACEBACK[3],
        ]
        # rank filter: TP0 first (the traceback is TP1's)
        await pilot.press("r")
        await until(pilot, "rank filter", lambda: "rank TP0" in screen_text(app))
        assert all("TP1" not in line.text for line in view.lines)


async def test_events_pane_scroll_search_filter_save_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    session = _session(tmp_path, STORY_LOG.read_text().splitlines())
    app = _app(session)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(
            pilot, "the overview", lambda: "GPU" in screen_text(app) or "events" in screen_text(app)
        )
        await pilot.press("l")
        await until(pilot, "the raw log", lambda: "raw log, oldest first" in screen_text(app))
        view = app.screen.query_one(LinesView)
        assert len(view.lines) > 200
        await until(pilot, "the log's end", lambda: view.scroll_y == view.max_scroll_y > 0)
        await pilot.press("home")
        await until(pilot, "the log's start", lambda: view.scroll_y == 0)
        assert "FutureWarning" in screen_text(app)
        await pilot.press("pagedown")
        await until(pilot, "a page down", lambda: view.scroll_y > 0)
        await pilot.press("end")
        await until(pilot, "the end again", lambda: view.scroll_y == view.max_scroll_y)
        # search
        await pilot.press("e")
        await until(pilot, "events", lambda: "events, newest first" in screen_text(app))
        await pilot.press("slash", *"graph", "enter")
        await until(pilot, "matches", lambda: '"graph": 1/3 matches' in screen_text(app))
        found = matches(view.lines, "graph")
        assert view.current == found[0] and view.query_text == "graph"
        drawn = view._text(found[0])  # the match highlighted, its line marked as current
        assert any(span.end - span.start == len("graph") for span in drawn.spans)
        await pilot.press("n")
        await until(pilot, "next match", lambda: '"graph": 2/3 matches' in screen_text(app))
        await pilot.press("N", "N")
        await until(pilot, "previous match (wraps)", lambda: '"graph": 3/3' in screen_text(app))
        # filters: a phase, then failures only (none in this story)
        await pilot.press("p")
        await until(pilot, "phase filter", lambda: "phase " in screen_text(app))
        assert len(view.lines) == 1
        screen = app.screen
        assert isinstance(screen, EventsScreen)
        while screen.filters.phase is not None:  # each press: the next phase, then off
            await pilot.press("p")
        assert len(view.lines) > 10
        await pilot.press("x")
        await until(pilot, "failures only", lambda: "failures only" in screen_text(app))
        await pilot.press("x")
        await until(pilot, "no failures filter", lambda: "failures only" not in screen_text(app))
        # save: the file named on screen holds the view
        shown = [line.text for line in view.lines]
        await pilot.press("s")
        await until(pilot, "the saved path", lambda: screen.saved_to is not None)
        path = Path(str(screen.saved_to))
        assert path.parent == tmp_path / "state" / "kvtop"
        assert path.read_text().splitlines() == shown
        assert any(str(path) in n.message for n in app._notifications)
        # OSC 52: Textual's copy_to_clipboard, which the app records as app.clipboard
        await pilot.press("y")
        await until(pilot, "the clipboard", lambda: app.clipboard == "\n".join(shown) + "\n")
        await pilot.press("escape")
        await until(pilot, "back", lambda: not isinstance(app.screen, EventsScreen))


async def test_overview_counts_hidden_events_and_folds_noise() -> None:
    with utc():
        app = make_app(demo_snapshot())
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, "events", lambda: "events    " in screen_text(app))
            text = screen_text(app)
            total = len(timeline(demo_snapshot().analysis.startup).rows)
            shown = len(re.findall(r"^(?:events)?\s+\d\d:\d\d:\d\d ", text, re.M))
            more = re.search(r"\+(\d+) more \(e: all events\)", text)
            assert more is not None and shown + int(more.group(1)) == total, text
            assert "init torch distributed (draft)" not in text  # −0.00 GiB: folded
        app = make_app(demo_snapshot())
        async with app.run_test(size=(200, 60)) as pilot:
            await until(pilot, "events", lambda: "events    " in screen_text(app))
            text = screen_text(app)
            assert "more (e: all events)" not in text
            assert "09:54:42 TP0–7   init torch distributed  −1.25 GiB" in text


def test_noise_rows_are_folded_with_a_count() -> None:
    events = timeline(demo_snapshot().analysis.startup)
    assert [r.what for r in events.folded] == ["init torch distributed (draft)"]
    assert all(not r.noise for r in events.rows)
    lines = event_lines(events)
    assert lines[-1].text.startswith("folded: 1 row with no memory moved and no time taken")
    unfolded = timeline(demo_snapshot().analysis.startup, fold_noise=False)
    assert len(unfolded.rows) == len(events.rows) + 1


def test_raw_line_ring_is_bounded() -> None:
    ring = RawLines(max_lines=10, max_line_chars=50)
    fold_lines([f"line {i}" for i in range(1000)] + ["x" * 500], None, ring)
    assert len(ring) == 10 and ring.seen == 1001
    assert ring.lines()[-2] == "line 999"
    assert ring.lines()[-1] == "x" * 50 + " …"
    assert log_lines(ring.lines(), Filters(rank="TP0")) == []


def test_save_dir_prefers_xdg_state_home(tmp_path: Path) -> None:
    assert save_dir({"XDG_STATE_HOME": str(tmp_path)}, "/cwd") == tmp_path / "kvtop"
    assert save_dir({"HOME": str(tmp_path / "nohome")}, "/cwd") == Path("/cwd")


async def test_overview_uses_spare_rows_for_the_log_tail(tmp_path: Path) -> None:
    """Every event shown and rows left: the log's latest lines under them (literally); where
    the events are cut (the demo's eight GPUs at 120x40), none."""
    lines = STORY_LOG.read_text().splitlines()
    session = _session(tmp_path, lines)
    last = lines[-1].rstrip()
    app = _app(session)
    async with app.run_test(size=(200, 60)) as pilot:
        await until(pilot, "the log tail", lambda: re.search(r"(?m)^log {7}\S", screen_text(app)))
        text = screen_text(app)
        assert "more (e: all events)" not in text
        assert last[:150] in text
    with utc():
        app = make_app(demo_snapshot())  # eight GPUs: the events are cut at 120x40
        app.feed.raw_lines = session.raw_lines
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, "+N more", lambda: "more (e: all events)" in screen_text(app))
            assert not re.search(r"(?m)^log {7}\S", screen_text(app))


def test_a_long_state_drops_its_clock_before_the_facts_after_it() -> None:
    from kvtop.model.status.server_status import MUST, HeaderItem

    items = tuple(
        HeaderItem(t, s, MUST)
        for t, s in (
            ("Kimi-K2.5",) * 2,
            ("TP8",) * 2,
            ("mfs 0.88",) * 2,
            ("EAGLE3",) * 2,
            ("HiCache", "HiC"),
        )
    )
    state = "starting: cuda graph since 2026-02-27 09:02:14 (3m05s)"
    facts = _facts(state=state, state_kind="starting", paused=False, fact_items=items)
    layout = header_layout(facts, 80)
    first = "".join(t for t, _ in layout.left + layout.right)
    assert len(first) <= 80
    # Whole words leave, never part of one: the clock first, the duration stays.
    assert first.startswith(" starting: cuda graph (3m05s) · ") and "…" not in first, first
    for value in ("Kimi-K2.5", "TP8", "mfs 0.88", "EAGLE3", "HiC"):
        assert value in first, (value, first)


async def test_what_kvtop_saw_in_the_events_pane_and_the_saved_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GPU 3 lost, then back: the events pane lists it after the log's events (the saved file
    too), and `k` keeps only what kvtop saw."""
    from dataclasses import replace

    from kvtop.model.memory.gpu_memory import lost_memory
    from tests.support.still import still_snapshot

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    base = still_snapshot()
    gpus = list(base.gpus)
    gpus[3] = replace(gpus[3], sample=replace(gpus[3].sample, status="lost"), memory=lost_memory())
    beats = judged_in_turn(
        base,
        replace(base, taken_at=base.taken_at + 1, gpus=tuple(gpus)),
        replace(base, taken_at=base.taken_at + 2),
    )
    with utc():
        app = make_app(*beats)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, "GPU 3 back", lambda: app.state.latest is beats[-1])
            await pilot.press("e")
            await until(pilot, "the events pane", lambda: isinstance(app.screen, EventsScreen))
            screen = app.screen
            assert isinstance(screen, EventsScreen)
            view = screen.query_one(LinesView)
            await until(pilot, "kvtop's timeline", lambda: "what kvtop saw" in screen_text(app))
            texts = [line.text for line in view.lines]
            title = texts.index("what kvtop saw, newest first (kvtop's clock)")
            assert [t[9:] for t in texts[title + 1 :]] == [
                "· cleared     cleared: GPU 3 (TP3) is lost (fallen off the bus): check "
                "nvidia-smi and dmesg",
                "· GPU back    GPU 3 back",
                "✖ alert       GPU 3 (TP3) is lost (fallen off the bus): check nvidia-smi and "
                "dmesg",
                "✖ GPU lost    GPU 3 lost",
            ]
            assert title > 10  # after the log's events
            await pilot.press("s")
            await until(pilot, "the saved path", lambda: screen.saved_to is not None)
            assert Path(str(screen.saved_to)).read_text().splitlines() == texts
            await pilot.press("k")
            await until(pilot, "only kvtop's", lambda: "what kvtop saw only" in screen_text(app))
            assert [line.text for line in view.lines] == texts[title + 1 :]
            await pilot.press("k")
            await until(pilot, "all again", lambda: "what kvtop saw only" not in screen_text(app))
            assert [line.text for line in view.lines] == texts
