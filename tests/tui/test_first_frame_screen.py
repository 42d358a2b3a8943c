"""The live view as the CLI starts it: the GPUs first (the first frame, before the session and
the overview are imported), then the feed made and the overview in its place.

The real KvtopApp under Pilot; the feed is a StillFeed and the first frame's GPUs are the demo's
views handed over by a coroutine (the CLI's reads NVML's early poll: tests/process covers it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from kvtop.live.app import KvtopApp
from kvtop.live.screens.first_frame import FirstFrameScreen
from kvtop.live.screens.formula import FormulaScreen
from kvtop.live.screens.overview import OverviewScreen
from kvtop.live.widgets.gpu_rows import GpuTable
from kvtop.model.memory.gpu_view import GpuView
from kvtop.session import Session
from tests.support.still import StillFeed
from tests.support.tui_support import demo_snapshot, fixed_clock, gpu_rows, screen_text, until

SIZE = (120, 40)


def starting_app(make_feed, first_gpus) -> KvtopApp:  # type: ignore[no-untyped-def]
    return KvtopApp(
        make_feed=make_feed,
        first_gpus=first_gpus,
        source_label="demo",
        demo=True,
        clock=fixed_clock,
        host_name="gpu-host",
    )


def overview_up(app: KvtopApp) -> bool:
    """The overview on screen with the feed's snapshot in its GPU rows."""
    screen = app.screen
    if not (isinstance(screen, OverviewScreen) and app.began and screen.query(GpuTable)):
        return False  # not pushed yet, or not composed yet
    return app.state.snapshot is not None and any(r.view is not None for r in gpu_rows(app))


async def test_the_gpus_first_then_the_overview() -> None:
    snapshot = demo_snapshot()
    seen: dict[str, object] = {}

    async def first_gpus() -> Sequence[GpuView]:
        return snapshot.gpus

    def make_feed() -> StillFeed:
        # Made once the first frame is drawn: what is on screen now is that frame.
        seen["screen"] = type(app.screen).__name__
        seen["rows"] = [row.render().plain for row in gpu_rows(app)]
        seen["text"] = screen_text(app)
        return StillFeed(snapshot)

    app = starting_app(make_feed, first_gpus)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, "the overview with the feed's snapshot", lambda: overview_up(app))
        overview_rows = [row.render().plain for row in gpu_rows(app)]
        # The first frame under it, emptied (its rows let go), never shown again.
        first, overview = app.screen_stack
        await until(pilot, "the first frame emptied", lambda: not first.children)
        assert isinstance(first, FirstFrameScreen) and overview is app.screen
    assert seen["screen"] == "FirstFrameScreen"
    text = str(seen["text"])
    assert "kvtop · starting" in text
    assert "gpu-host · demo" in text
    assert "GPU▲ rank" in text  # the header, as the overview's
    # Every GPU drawn, and drawn as the overview then draws the same views (the row's alert
    # glyph aside: the verdict comes with the feed).
    rows = list(seen["rows"])  # type: ignore[call-overload]
    assert len(rows) == len(snapshot.gpus) == 8
    assert [r.rstrip(" ▲●") for r in rows] == [r.rstrip(" ▲●") for r in overview_rows]
    assert rows[0].startswith("▶ 0")  # the first GPU selected, as the overview starts


async def test_keys_on_the_first_frame_wait_for_the_overview() -> None:
    """A view's key typed on the first frame opens nothing (its state is not there yet); the
    overview comes all the same, and its keys work."""
    release = asyncio.Event()

    async def first_gpus() -> Sequence[GpuView]:
        await release.wait()
        return demo_snapshot().gpus

    app = starting_app(lambda: StillFeed(demo_snapshot()), first_gpus)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, "the first frame", lambda: isinstance(app.screen, FirstFrameScreen))
        await pilot.press("f", "e", "t", "c", "space", "o", "enter", "question_mark")
        assert isinstance(app.screen, FirstFrameScreen) and not app.began
        release.set()
        await until(pilot, "the overview", lambda: overview_up(app))
        await pilot.press("f")
        await until(pilot, "the formula", lambda: isinstance(app.screen, FormulaScreen))


async def test_q_on_the_first_frame_leaves_without_a_session() -> None:
    release = asyncio.Event()
    made: list[object] = []

    async def first_gpus() -> Sequence[GpuView]:
        await release.wait()
        return ()

    app = starting_app(lambda: made.append("feed") or StillFeed(), first_gpus)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, "the first frame", lambda: isinstance(app.screen, FirstFrameScreen))
        await pilot.press("q")
        await until(pilot, "the app leaving", lambda: app.leaving)
        release.set()
        await pilot.pause(0.05)
    assert app.return_code == 0
    assert made == [] and not app.began


async def test_the_overview_comes_when_the_first_gpus_fail() -> None:
    """The first frame is a head start, not a gate: its GPUs failing (a bug) leaves it without
    rows, and the session, which reads the GPUs again and says what is wrong, follows."""

    async def first_gpus() -> Sequence[GpuView]:
        raise RuntimeError("the early reading broke")

    app = starting_app(lambda: StillFeed(demo_snapshot()), first_gpus)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, "the overview", lambda: overview_up(app))
        assert "Traceback" not in screen_text(app)


async def test_a_session_that_cannot_be_made_is_handed_to_the_cli() -> None:
    """make_feed raising ends the app with the error kept for the CLI, which says it in one
    sentence on stderr (KVTOP_DEBUG=1: the traceback), as a one-shot report says a bug."""

    def make_feed() -> Session:
        raise PermissionError("cannot read /var/log/sglang.log")

    async def first_gpus() -> Sequence[GpuView]:
        return ()

    app = starting_app(make_feed, first_gpus)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, "the app leaving", lambda: app.leaving)
    assert isinstance(app.start_error, PermissionError)
    assert app.return_value == 1


def test_one_of_feed_and_make_feed() -> None:
    with pytest.raises(ValueError, match="feed or make_feed"):
        KvtopApp(source_label="x")
    with pytest.raises(ValueError, match="feed or make_feed"):
        KvtopApp(StillFeed(), make_feed=StillFeed, source_label="x")
