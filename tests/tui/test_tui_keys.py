"""Every key a view offers does something there: each key of the key bar (Textual's Footer) and
of the events pane's keys line, pressed on the view as a fresh app shows it, changes the screen,
opens another, says why not, or (q) quits. The real app on the demo's snapshot (only the feed is
a stand-in: tests/support/tui_support.py)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import pytest
from textual.screen import Screen
from textual.widgets._toast import Toast

from kvtop.live.app import KvtopApp
from kvtop.live.screens.events import KEYS_HINT, EventsScreen
from kvtop.live.screens.formula import FormulaScreen
from kvtop.live.screens.gpu_detail import GpuDetailScreen
from kvtop.live.screens.overview import OverviewScreen
from tests.support.tui_support import demo_snapshot, make_app, screen_text, until

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("utc_zone")]

SIZE = (120, 40)
TOAST = "Toast-7f3a"
# How the keys line writes a key, as Textual names it.
HINT_KEYS = {"/": "slash", "Esc": "escape"}

# (the keys that open the view, the view's screen class, the events pane's mode or None)
VIEWS: dict[str, tuple[tuple[str, ...], type, str | None]] = {
    "overview": ((), OverviewScreen, None),
    "GPU detail": (("enter",), GpuDetailScreen, None),
    "events": (("e",), EventsScreen, "events"),
    "raw log": (("l",), EventsScreen, "log"),
}


def footer_keys(app: KvtopApp) -> list[str]:
    """The keys the key bar shows now: shown, enabled bindings of the screen and the app."""
    return sorted({key for key, active in app.active_bindings.items() if active.binding.show})


def hint_keys(mode: str) -> list[str]:
    """The keys the events pane's keys line offers in `mode` ("n/N next/prev": n and N)."""
    keys = []
    for item in KEYS_HINT[mode].split("  "):
        word = item.strip().split(" ", 1)[0]
        parts = [word] if word == "/" else word.split("/")
        keys += [HINT_KEYS.get(p, p) for p in parts]
    return keys


async def _open(pilot, keys: tuple[str, ...], screen: type, mode: str | None) -> None:  # type: ignore[no-untyped-def]
    app = pilot.app
    await pilot.pause()
    for key in keys:
        await pilot.press(key)
    await until(pilot, f"the {screen.__name__}", lambda: isinstance(app.screen, screen))
    if mode is not None:
        await until(pilot, f"the {mode} mode", lambda: app.screen.mode == mode)
    await pilot.pause()


def _seen(app: KvtopApp) -> tuple[object, ...]:
    return (
        type(app.screen),
        getattr(app.screen, "mode", None),
        screen_text(app),
        len(app._notifications),
    )


def _offered(app: KvtopApp, mode: str | None) -> list[str]:
    """The keys the view on screen offers: the key bar's and the events pane's keys line's; q
    last, since it ends the app."""
    offered = set(footer_keys(app)) | set(hint_keys(mode) if mode else ())
    return sorted(offered, key=lambda key: (key == "q", key))


@dataclass
class Fresh:
    """A view as a fresh app shows it: what is seen there, the view state the app started
    with, and the view's own screen (a new one each time the view is opened again)."""

    view: str
    seen: tuple[object, ...]
    state: dict[str, object]
    screen: Screen[object]
    depth: int  # the screens on the stack with the view's on top


async def _as_fresh(pilot, fresh: Fresh) -> None:  # type: ignore[no-untyped-def]
    """Back to where a fresh app stands in the view: the view state the app started with
    (compact, paused, orders, selection …), no toasts, the screens a key opened over the view
    closed; and the screen must then be the very one a fresh app showed there before any key,
    so each key is pressed on what a fresh app shows. Where it is not (the key changed the
    view's own screen: a filter, a search, a sentence), every screen over the overview is
    closed and the view opened again on a new screen, which must show it."""
    app = pilot.app
    for name, value in fresh.state.items():
        setattr(app.state, name, value)
    app.feed.interval_s = app.state.interval_s
    app.clear_notifications()
    stack = app.screen_stack
    if len(stack) >= fresh.depth and stack[fresh.depth - 1] is fresh.screen:
        while len(app.screen_stack) > fresh.depth:
            app.pop_screen()
        app.show_state()
        await pilot.pause()
        if _seen(app) == fresh.seen:
            return
    while len(app.screen_stack) > 1:
        app.pop_screen()
    app.show_state()
    keys, screen, mode = VIEWS[fresh.view]
    await until(pilot, "the overview", lambda: isinstance(app.screen, OverviewScreen))
    await _open(pilot, keys, screen, mode)
    await until(
        pilot, f"the {fresh.view} as a fresh app shows it", lambda: _seen(app) == fresh.seen
    )
    fresh.screen = app.screen


@pytest.mark.parametrize("view", list(VIEWS))
async def test_every_key_offered_does_something(
    view: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One app for the view's keys: each key is pressed on the view as a fresh app shows it
    (_as_fresh puts the app back between keys), so a key that only undoes the one before
    cannot pass for one that does something."""
    monkeypatch.chdir(tmp_path)  # s saves the lines shown here
    keys, screen, mode = VIEWS[view]
    app = make_app(demo_snapshot())
    dead = []
    async with app.run_test(size=SIZE) as pilot:
        await _open(pilot, keys, screen, mode)
        offered = _offered(app, mode)
        assert offered, f"{view}: no keys offered"
        state = {f.name: getattr(app.state, f.name) for f in fields(app.state)}
        fresh = Fresh(view, _seen(app), state, app.screen, len(app.screen_stack))
        for n, key in enumerate(offered):
            if n:
                await _as_fresh(pilot, fresh)
            before = _seen(app)
            await pilot.press(key)

            def changed(before: tuple[object, ...] = before) -> bool:
                return app.return_code is not None or _seen(app) != before

            try:
                await until(pilot, f"{key!r} to do something in {view}", changed, timeout_s=3)
            except AssertionError:
                dead.append(key)
    if "q" in offered:
        assert app.return_code == 0
    assert dead == [], f"{view}: keys offered that do nothing: {dead} (offered: {offered})"


async def test_the_raw_log_does_not_offer_the_phase_filter_and_says_why_when_typed() -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=SIZE) as pilot:
        await _open(pilot, ("l",), EventsScreen, "log")
        assert "p" not in hint_keys("log") and "k" not in hint_keys("log")
        assert "p phase" not in screen_text(app)
        await pilot.press("p")
        await until(pilot, "why p does nothing here", lambda: "have no phase" in screen_text(app))
        await pilot.press("r")  # the next key clears the sentence
        await until(pilot, "the sentence gone", lambda: "have no phase" not in screen_text(app))
        assert "rank TP" in screen_text(app)


def _toasts(app: KvtopApp) -> str:
    """The toasts drawn on the screen on top."""
    return " ".join(str(toast.render()) for toast in app.screen.query(Toast) if toast.display)


async def test_a_toast_does_not_cover_the_help_or_the_formula() -> None:
    """A toast shown before (here the "no search yet" kind: a long one) is cleared when the
    operator opens the help or the formula, so it hides none of their text."""
    app = make_app(demo_snapshot())
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.pause()
        for key, screen in (("question_mark", "HelpScreen"), ("f", "FormulaScreen")):
            app.notify(f"{TOAST} covering the box's right edge for a while", timeout=15)
            await until(pilot, "the toast", lambda: TOAST in _toasts(app))
            await pilot.press(key)
            await until(pilot, screen, lambda s=screen: type(app.screen).__name__ == s)
            await until(pilot, "the toast gone", lambda: TOAST not in _toasts(app))
            assert not app._notifications
            await pilot.press("escape")
            await until(pilot, "the overview", lambda: isinstance(app.screen, OverviewScreen))


async def test_the_formula_names_the_selected_rank_in_its_headings() -> None:
    app = make_app(demo_snapshot())
    async with app.run_test(size=(120, 80)) as pilot:
        await pilot.pause()
        await pilot.press("down", "down")  # GPU 2, TP2
        await until(pilot, "GPU 2 selected", lambda: app.state.selected_gpu == 2)
        await pilot.press("f")
        await until(pilot, "the formula", lambda: isinstance(app.screen, FormulaScreen))
        await until(pilot, "its text", lambda: "Where the reserve went" in screen_text(app))
        text = screen_text(app)
        assert "Where the reserve went (TP2)" in text
        assert "Where the reserve went (TP0)" not in text
        assert "TP2 (selected GPU) on its own" in text


@pytest.mark.parametrize("where", ["fleet", "host"])
async def test_the_fleet_view_quits_on_ctrl_c_and_binds_ctrl_z(where: str) -> None:
    """The fleet view is a live view too: Ctrl-C quits with status 0 from the fleet and from a
    host's GPUs; Ctrl-Z is bound to the suspension (the tmux test suspends the live view)."""
    from tests.support.fleet_examples import make_fleet_app, story_fleet

    app, _reader = make_fleet_app(story_fleet())
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, "the fleet", lambda: "gpu-node-01" in screen_text(app))
        if where == "host":
            await pilot.press("down", "enter")
            await until(pilot, "a host's GPUs", lambda: isinstance(app.screen, OverviewScreen))
        keys = {key: active.binding.action for key, active in app.active_bindings.items()}
        assert keys.get("ctrl+z") == "suspend_process"
        await pilot.press("ctrl+c")
        await until(pilot, "the fleet view to leave", lambda: app.return_code is not None)
    assert app.return_code == 0
