"""CPU per snapshot repaint of the overview's GPU rows: kvtop's hand-made table against Textual's
stock ListView (the same lines, a one-line GpuTable in each ListItem, ListView's cursor) and
DataTable (one table row per GPU, the bar as a cell).

    python bench/bench_rows_widget.py                # 8 and 64 GPUs, 60 snapshots each
    python bench/bench_rows_widget.py --gpus 8 --snapshots 120 --rounds 5

Each variant runs headless under Textual's run_test at 120x40 with kvtop's stylesheet. A round
shows `--snapshots` demo snapshots (a still series: the GPUs' figures move as they do live),
waiting for Textual to go idle after each, and takes the process CPU time; the same loop without
new snapshots is subtracted (the wait itself costs CPU). Prints the median over rounds, in ms per
snapshot; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.text import Text  # noqa: E402
from textual.app import App, ComposeResult  # noqa: E402
from textual.containers import VerticalScroll  # noqa: E402
from textual.widgets import DataTable, ListItem, ListView  # noqa: E402

from kvtop import fmt  # noqa: E402
from kvtop.live.app import KvtopApp  # noqa: E402
from kvtop.live.widgets.gpu_rows import GpuTable, bar_segments, bar_width  # noqa: E402
from kvtop.live.widgets.segments import MemoryWidget  # noqa: E402
from kvtop.live.widgets.stacked_bar import bar_pieces, pieces_text  # noqa: E402
from kvtop.model.snapshot import GpuView, Snapshot  # noqa: E402
from tests.support.still import still_series  # noqa: E402

SIZE = (120, 40)


def widen(snapshot: Snapshot, gpus: int) -> Snapshot:
    """`gpus` GPUs: the demo's eight repeated under new indices."""
    base = snapshot.gpus
    views = tuple(
        replace(g, sample=replace(g.sample, index=i, uuid=f"{g.sample.uuid}-{i}"))
        for i, g in ((i, base[i % len(base)]) for i in range(gpus))
    )
    return replace(snapshot, gpus=views)


class RowsApp(App[None]):
    CSS_PATH = KvtopApp.CSS_PATH

    def show(self, snapshot: Snapshot) -> None:
        raise NotImplementedError


class HandMade(RowsApp):
    """kvtop today: one GpuTable of lines in a VerticalScroll, the selection drawn by it."""

    def __init__(self, gpus: int) -> None:
        super().__init__()
        self.gpus = gpus
        self.table = GpuTable(id="gpus")

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="gpu-list"):
            yield self.table

    def on_mount(self) -> None:
        self.table.sync(self.gpus)
        self.table.select(0)

    def show(self, snapshot: Snapshot) -> None:
        for position, gpu in enumerate(snapshot.gpus[: self.gpus]):
            self.table.show_row(position, gpu)


class StockList(RowsApp):
    """ListView's cursor over the same lines (ListItem > a one-line GpuTable each)."""

    CSS = "ListItem { height: 1; }"

    def __init__(self, gpus: int) -> None:
        super().__init__()
        self.tables = [GpuTable() for _ in range(gpus)]

    def compose(self) -> ComposeResult:
        yield ListView(*(ListItem(table) for table in self.tables))

    def on_mount(self) -> None:
        for table in self.tables:
            table.sync(1)

    def show(self, snapshot: Snapshot) -> None:
        for table, gpu in zip(self.tables, snapshot.gpus, strict=False):
            table.show_row(0, gpu)


class _Styles(MemoryWidget):
    """Only for the segment colours of the stylesheet, as GpuTable has them."""


COLUMNS = ("GPU", "rank", "memory", "used/total", "free", "util", "temp", "power")


class StockTable(RowsApp):
    """DataTable: one row per GPU, the stacked bar as a Text cell; a cell is updated only when
    its text changed (as a GpuTable line repaints only then)."""

    def __init__(self, gpus: int) -> None:
        super().__init__()
        self.gpus = gpus
        self.cells: dict[tuple[int, int], Text] = {}

    def compose(self) -> ComposeResult:
        yield _Styles(id="styles", classes="memory")
        yield DataTable(cursor_type="row", zebra_stripes=False)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for name in COLUMNS:
            table.add_column(name, key=name)
        for i in range(self.gpus):
            table.add_row(*([""] * len(COLUMNS)), key=str(i))

    def _cells(self, gpu: GpuView, bar: int) -> list[Text]:
        styles = self.query_one(_Styles)
        s, memory = gpu.sample, gpu.memory
        return [
            Text(str(s.index)),
            Text(gpu.ranks[0] if gpu.ranks else "—"),
            pieces_text(
                bar_pieces(
                    bar_segments(gpu),
                    memory.total_gib,
                    bar,
                    styles.segment_style,
                    memory.reserve_starts_at_gib,
                    styles.reserve_style(),
                )
            ),
            Text(f"{fmt.gib(s.used_gib)}/{fmt.gib(s.total_gib)}"),
            Text(fmt.gib(memory.free_gib)),
            Text(fmt.pct(s.utilization_pct)),
            Text("—" if s.temperature_c is None else f"{s.temperature_c}C"),
            Text("—" if s.power_w is None else f"{s.power_w:.0f}W"),
        ]

    def show(self, snapshot: Snapshot) -> None:
        table = self.query_one(DataTable)
        bar = bar_width(self.size.width) - 8  # DataTable pads every cell
        for row, gpu in enumerate(snapshot.gpus):
            for col, text in enumerate(self._cells(gpu, bar)):
                if self.cells.get((row, col)) != text:
                    self.cells[(row, col)] = text
                    table.update_cell(str(row), COLUMNS[col], text)


async def cost_ms(kind: type[RowsApp], snapshots: list[Snapshot], gpus: int) -> float:
    app = kind(gpus)
    async with app.run_test(size=SIZE) as pilot:
        app.show(snapshots[-1])
        await pilot.pause()
        start = time.process_time()
        for snapshot in snapshots:
            app.show(snapshot)
            await pilot.pause()
        busy = time.process_time() - start
        start = time.process_time()
        for _ in snapshots:
            await pilot.pause()
        idle = time.process_time() - start
    return (busy - idle) / len(snapshots) * 1000


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, action="append")
    parser.add_argument("--snapshots", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    series = still_series(args.snapshots)
    for gpus in args.gpus or [8, 64]:
        snapshots = [widen(s, gpus) for s in series]
        print(f"{gpus} GPUs, {args.snapshots} snapshots, median of {args.rounds} rounds:")
        for kind in (HandMade, StockList, StockTable):
            figures = [await cost_ms(kind, snapshots, gpus) for _ in range(args.rounds)]
            spread = f"{min(figures):.2f}–{max(figures):.2f}"
            print(
                f"  {kind.__name__:<10} {statistics.median(figures):6.2f} ms per snapshot"
                f"  ({spread})"
            )


if __name__ == "__main__":
    asyncio.run(main())
