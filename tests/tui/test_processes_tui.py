"""The processes view (t) and the overview's processes line, on the real app: the demo's
still joined with a foreign and an unreadable process by the real model (Pilot)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvtop.live.screens.overview import OverviewScreen
from kvtop.live.screens.processes import ProcessesScreen
from kvtop.live.widgets.lines_view import LinesView
from tests.support.tui_support import (
    FOREIGN_PID,
    HIDDEN_PID,
    demo_snapshot,
    make_app,
    processes_snapshot,
    screen_text,
    until,
)

pytestmark = pytest.mark.usefixtures("utc_zone")


def _rows(text: str) -> list[str]:
    """The table's rows on screen: from the header down to the key bar."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "WHOSE" in line)
    return [line for line in lines[start + 1 :] if line.strip() and "esc back" not in line]


async def test_overview_line_names_the_foreign_process() -> None:
    app = make_app(processes_snapshot())
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, "processes line", lambda: "processes" in screen_text(app))
        text = screen_text(app)
        assert (
            "processes (t) 10 processes on 8 GPUs, 2 foreign, the largest: python3 train.py "
            "--epochs 3 4.00 GiB on GPU 2"
        ) in text


async def test_table_marks_ranks_and_foreign_sorts_and_goes_back() -> None:
    app = make_app(processes_snapshot())
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, "the overview", lambda: isinstance(app.screen, OverviewScreen))
        await pilot.press("t")
        await until(pilot, "the table", lambda: "WHOSE" in screen_text(app))
        text = screen_text(app)
        assert "host CPU 6.4%  MEM 37.5% (412.6/1,099.5 GB)  SWP 0.0% (0.0/8.6 GB)" in text
        assert "sorted by GPU memory ▼ (o) · 10 processes on 8 GPUs" in text
        rows = _rows(text)
        assert len(rows) == 10
        # GPU memory first: the eight ranks (87.8 GiB each), then the trainer and the hidden one.
        assert sorted(r.split()[3] for r in rows[:8]) == [f"TP{i}" for i in range(8)]
        assert all("87.8" in r for r in rows[:8])
        trainer, hidden = rows[8], rows[9]
        assert trainer.split()[:4] == ["2", str(FOREIGN_PID), "bob", "foreign"]
        assert "4.00 GiB" in trainer and "312.5" in trainer and "1:02:05" in trainer
        assert trainer.endswith("python3 train.py --epochs 3")
        assert hidden.split()[:4] == ["5", str(HIDDEN_PID), "—", "foreign"]
        assert hidden.endswith("(cannot be read here)")

        await pilot.press("o")  # host CPU, the largest first
        await until(pilot, "sorted by CPU", lambda: "%CPU▼" in screen_text(app))
        rows = _rows(screen_text(app))
        assert rows[0].split()[1] == str(FOREIGN_PID) and rows[-1].split()[1] == str(HIDDEN_PID)
        assert app.state.process_order == "cpu"

        await pilot.press("t")  # t again: back to the overview
        await until(pilot, "the overview", lambda: isinstance(app.screen, OverviewScreen))
        await pilot.press("t", "escape")
        await until(pilot, "the overview", lambda: isinstance(app.screen, OverviewScreen))


async def test_columns_follow_the_width_at_once() -> None:
    app = make_app(processes_snapshot())
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("t")
        await until(pilot, "the table", lambda: "WHOSE" in screen_text(app))
        assert " TIME " in screen_text(app)
        await pilot.resize_terminal(80, 24)
        await until(pilot, "TIME gone at 80 columns", lambda: " TIME " not in screen_text(app))
        header = next(line for line in screen_text(app).splitlines() if "WHOSE" in line)
        assert header.split() == [
            "GPU",
            "PID",
            "USER",
            "WHOSE",
            "GPU-MEM▼",
            "%CPU",
            "RSS",
            "COMMAND",
        ]
        assert all(len(line) <= 80 for line in screen_text(app).splitlines())


async def test_table_is_not_redrawn_when_its_rows_did_not_change() -> None:
    snapshot = processes_snapshot()
    app = make_app(snapshot)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("t")
        await until(pilot, "the table", lambda: "WHOSE" in screen_text(app))
        view = app.screen.query_one(LinesView)
        drawn = view.lines
        # A new snapshot a second later whose GPU memory moved under a hundredth of a GiB on
        # another GPU's utilisation only: the rows are the same, the table keeps its lines.
        same = replace(snapshot, taken_at=snapshot.taken_at)
        app.feed.push(same)  # type: ignore[attr-defined]
        await until(pilot, "the new snapshot shown", lambda: app.state.snapshot is same)
        assert view.lines is drawn
        moved = processes_snapshot()
        moved = replace(moved, taken_at=moved.taken_at + 60.0)  # every TIME one minute later
        app.feed.push(moved)  # type: ignore[attr-defined]
        await until(pilot, "the table redrawn", lambda: view.lines is not drawn)
        assert "1:03:05" in screen_text(app)


async def test_processes_view_without_gpu_readings() -> None:
    snapshot = demo_snapshot()
    bare = replace(snapshot, gpus=())
    app = make_app(bare)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("t")
        await until(pilot, "the table", lambda: isinstance(app.screen, ProcessesScreen))
        await until(pilot, "why none", lambda: "no process on the GPUs" in screen_text(app))
