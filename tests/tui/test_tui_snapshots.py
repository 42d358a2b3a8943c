"""SVG snapshots of the four screens at fixed sizes (the demo at a fixed clock and zone).

Regenerate after an intended change with `./scripts/test.sh tests/tui/test_tui_snapshots.py
--snapshot-update`, then look at the SVGs before committing them.
"""

from __future__ import annotations

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from tests.support.tui_support import demo_snapshot, make_app, processes_snapshot

pytestmark = pytest.mark.usefixtures("utc_zone")


async def _steady(pilot: Pilot) -> None:
    await pilot.pause()
    for field in pilot.app.screen.query(Input):
        field.cursor_blink = False  # a blinking cursor makes screenshots differ run to run


def test_overview_120x40(snap_compare) -> None:
    assert snap_compare(make_app(demo_snapshot()), terminal_size=(120, 40), run_before=_steady)


def test_compact_overview_80x24(snap_compare) -> None:
    assert snap_compare(make_app(demo_snapshot()), terminal_size=(80, 24), run_before=_steady)


def test_gpu_detail_120x40(snap_compare) -> None:
    assert snap_compare(
        make_app(demo_snapshot()),
        terminal_size=(120, 40),
        press=["j", "j", "j", "enter"],
        run_before=_steady,
    )


def test_formula_120x40(snap_compare) -> None:
    async def open_formula(pilot: Pilot) -> None:
        await pilot.pause()
        await pilot.press("f")
        await _steady(pilot)

    assert snap_compare(make_app(demo_snapshot()), terminal_size=(120, 40), run_before=open_formula)


def test_processes_120x40(snap_compare) -> None:
    """The processes view: the server's ranks, a foreign trainer (a warning) and a process that
    cannot be read here (dim)."""
    assert snap_compare(
        make_app(processes_snapshot()), terminal_size=(120, 40), press=["t"], run_before=_steady
    )
