"""The live view's first frame: the GPUs as NVML alone shows them, drawn before the rest of
kvtop (the session, the log's parsers, the sizing engine, the overview) is imported.

Importing those takes longer than Textual itself (about 0.15 s of dataclasses and modules on a
2-core VM); the GPU readings are there at once (the first NVML poll began before Textual was
imported). So the screen shows the status line, the GPU table's header and one row per GPU —
the same widgets the overview draws them with — and the app swaps in the overview as soon as
the rest is imported. Light on purpose: nothing here imports the model beyond the GPU views.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from kvtop.live.key_list import KeyBar
from kvtop.live.widgets.gpu_rows import GpuHeader, GpuTable
from kvtop.model.memory.gpu_view import GpuView

STARTING = "kvtop · starting: the log and the server are read next"


class FirstFrameScreen(Screen[None]):
    """The status line's two lines (what kvtop is doing, the host and the log), the GPU header
    and the GPU rows; the overview replaces it (same ids, so the same rules of the stylesheet
    place the rows)."""

    def __init__(self, host_name: str, source_label: str) -> None:
        super().__init__()
        self._status = Static(
            Text.assemble((f" {STARTING}", "bold"), f"\n {host_name} · {source_label}"),
            id="status",
        )
        self._header = GpuHeader(id="gpu-header", classes="memory")
        self._table = GpuTable(id="gpus")

    @property
    def table(self) -> GpuTable:
        return self._table

    def compose(self) -> ComposeResult:
        yield self._status
        yield self._header
        with VerticalScroll(id="gpu-list", can_focus=False):
            yield self._table
        yield KeyBar()

    def show_gpus(self, gpus: Sequence[GpuView]) -> None:
        """One row per GPU, the first selected (as the overview starts), no alerts yet (the
        verdict needs the model)."""
        table = self._table
        table.sync(len(gpus))
        table.select(0)
        self._header.total_gib = next((g.sample.total_gib for g in gpus if not g.lost), None)
        for position, gpu in enumerate(gpus):
            table.show_row(position, gpu)
