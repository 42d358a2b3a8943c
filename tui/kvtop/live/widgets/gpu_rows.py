"""The overview's GPU table: a header line, one row per GPU with its stacked bar, a legend."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.message import Message
from textual.reactive import reactive
from textual.strip import Strip

from kvtop import fmt
from kvtop.live.widgets.kept_lines import KeptLines
from kvtop.live.widgets.segments import ALERT_CLASSES, SEGMENT_CLASSES, MemoryWidget
from kvtop.live.widgets.stacked_bar import (
    GLYPHS,
    RESERVE_MARK,
    SHORT,
    Piece,
    bar_pieces,
    joined,
    pieces_text,
    wrap_items,
)
from kvtop.model.memory.gpu_order import order_named
from kvtop.model.memory.gpu_reading import GpuStatus
from kvtop.model.snapshot import GpuView
from kvtop.model.status.gpu_alerts import GpuAlert
from kvtop.model.status.levels import Level

LEFT_CELLS = 11  # "▶ 0   TP0  "
RIGHT_CELLS = 37  # "  88.2/95.6    7.4  61%  55C  400W ▲" (the glyph: the row's alert)
MIN_BAR = 10
NO_ALERT = GpuAlert(Level.OK)  # a row without an alert of its own


def bar_width(width: int) -> int:
    return max(MIN_BAR, width - LEFT_CELLS - RIGHT_CELLS)


def bar_segments(view: GpuView) -> list[tuple[str, float]]:
    """The model's segments; without a rank's log only "in use" and "free" are known."""
    memory = view.memory
    if not memory.known:
        return []
    if (
        memory.baseline_gib is None
        and memory.weights_gib is None
        and memory.runtime_gib is not None
    ):
        other = memory.other_processes_gib
        shown = [("in use", memory.runtime_gib)]
        if other:
            shown.append(("other processes", other))  # after the server's, as on every bar
        return [*shown, ("free", memory.free_gib or 0.0)]
    return memory.segments()


def _rank_label(ranks: tuple[str, ...]) -> str:
    if not ranks:
        return "—"
    if len(ranks) == 1:
        return ranks[0]
    return f"{ranks[0]}+{len(ranks) - 1}"


def _titles(order: str) -> dict[str, str]:
    """Column titles, the sorted column's with its arrow (shortened to keep the columns)."""
    titles = {"index": "GPU rank", "used": "used/total", "free": "free", "temperature": "temp"}
    sort = order_named(order)
    marked = {"index": "GPU▲ rank", "temperature": "tmp"}.get(sort.key, titles[sort.key])
    titles[sort.key] = marked if sort.key == "index" else marked + sort.arrow
    return titles


class GpuHeader(MemoryWidget):
    """Column titles; the memory column names the card size; the sorted column has ▲ or ▼."""

    DEFAULT_CSS = "GpuHeader { height: 1; }"
    total_gib: reactive[float | None] = reactive(None)
    order: reactive[str] = reactive("index")

    def render(self) -> Text:
        width = self.size.width
        bar = bar_width(width)
        total = f"memory ({fmt.gib(self.total_gib)} GiB)" if self.total_gib else "memory"
        titles = _titles(self.order)
        text = Text(no_wrap=True, overflow="crop")
        # Sorted by index, "GPU▲" starts one cell left so that "rank" stays over the ranks.
        index_title = titles["index"]
        text.append(
            (f" {index_title} " if "▲" in index_title else f"  {index_title}").ljust(LEFT_CELLS)
        )
        text.append(total[:bar].ljust(bar))
        text.append(
            f" {titles['used']:>11} {titles['free']:>6} {'util':>4} "
            f"{titles['temperature']:>4} {'power':>5}  "
        )
        return text


class GpuRow(MemoryWidget):
    """One GPU: index, rank, stacked memory bar with the reserve mark, and NVML figures.

    Hand-made on purpose, with the overview's selection (a class and a ▶, the selected GPU kept
    in ViewState): measured against Textual's stock pieces with bench/bench_rows_widget.py (CPU
    per snapshot repaint, headless, 120x40, median of 5 rounds of 60 snapshots), these rows
    cost 3.3 ms at 8 GPUs and 16.5 ms at 64; the same rows in a ListView (its cursor, ListItem
    around each row) 3.9 and 23.0 ms (+20 %, +39 %); a DataTable with the bar as a cell 9.5 and
    47.8 ms (x2.9). A DataTable also cannot give the bar "the rest of the width".
    """

    DEFAULT_CSS = "GpuRow { height: 1; }"
    COMPONENT_CLASSES: ClassVar[set[str]] = SEGMENT_CLASSES | ALERT_CLASSES

    def __init__(self, index: int) -> None:
        super().__init__(id=f"gpu-{index}", classes="memory")
        self.index = index
        self._view: GpuView | None = None
        self._alert: GpuAlert | None = None
        self._strip: Strip | None = None
        self._base: Style | None = None  # the row's own style (selected or not), kept
        self._shown: list[Piece] | None = None  # the runs on screen, made for this width
        self._shown_width = 0

    @property
    def view(self) -> GpuView | None:
        return self._view

    @property
    def alert(self) -> GpuAlert | None:
        return self._alert

    def show(self, view: GpuView, alert: GpuAlert | None = None) -> None:
        """The GPU and its alert (tui/kvtop/model/status/gpu_alerts.py; None: no alert styling)."""
        if view == self._view and alert == self._alert:
            return
        self._view, self._alert = view, alert
        # Repaint only when what the row shows changed: a reading that moved by less than the
        # digits on screen (88.23 → 88.24 GiB) costs nothing.
        width = self.size.width
        pieces = self._pieces() if width else None
        if pieces is None or pieces != self._shown:
            self._shown, self._shown_width = pieces, width
            self._strip = None
            self.refresh()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        # Selected or not, or a new theme: the cached text and strip carry the old styles.
        self._strip, self._shown, self._base = None, None, None

    class Clicked(Message):
        """A row was clicked: its GPU's NVML index, and 2 for a double click."""

        def __init__(self, gpu_index: int, clicks: int) -> None:
            super().__init__()
            self.gpu_index, self.clicks = gpu_index, clicks

    def on_click(self, event: events.Click) -> None:
        """The screen turns a click into a selection, a double click into GPU detail."""
        if self._view is None:
            return
        event.stop()
        self.post_message(self.Clicked(self._view.sample.index, event.chain))

    def render_line(self, y: int) -> Strip:
        """Textual's line API: the row's one line as segments, kept until the GPU or the width
        changes. It skips the Text → Content → strips conversion of render() (measured: a
        third of the overview's repaint cost with 8 GPUs changing every second)."""
        width = self.size.width
        base = self._base
        if base is None:  # Textual works it out from the ancestors at every call: ~20 µs
            base = self._base = self.rich_style
        if y != 0:
            return Strip.blank(width, base)
        if self._strip is None or self._strip.cell_length != width:
            if self._shown is None or self._shown_width != width:  # resized, or first paint
                self._shown, self._shown_width = self._pieces(), width
            # The row's style under each run's, as Strip.apply_style would: one Strip made
            # instead of three (each Strip builds eight caches of its own).
            segments = [
                Segment(words, base + style if style is not None else base)
                for words, style in self._shown
            ]
            cells = sum(cell_len(words) for words, _ in self._shown)
            strip = Strip(segments, cells)
            self._strip = strip if cells == width else strip.crop_extend(0, width, base)
        return self._strip

    def render(self) -> Text:
        return pieces_text(self._pieces())

    def _pieces(self) -> list[Piece]:
        """The row as runs of (characters, style): compared with the runs on screen and drawn
        as segments, with no Text between (building, slicing and rendering Text was most of
        a row's cost, measured with cProfile on the live view)."""
        view = self._view
        if view is None:
            return []
        sample = view.sample
        label = f"{sample.index:<3} {_rank_label(view.ranks)[:6]:<6}"[: LEFT_CELLS - 2]
        pieces: list[Piece] = [
            ("▶ " if self.has_class("-selected") else "  ", None),
            (label.ljust(LEFT_CELLS - 2), None),
        ]
        width = bar_width(self.size.width)
        if view.lost:
            critical = self._level_style(Level.CRITICAL)
            lib, hint = sample.vendor.library, sample.vendor.kernel_log_hint
            why = f"fell off the bus ({lib}); {hint}"
            if sample.status != GpuStatus.LOST:
                call, error = next(iter(sample.field_errors), ("memory", ""))
                said = f" ({error})" if error else ""
                why = f"{call} unreadable through {lib}{said}; {hint}"
            reason = f"{Level.CRITICAL.glyph} lost: {why}"
            pieces += [
                (reason[:width].ljust(width), critical),
                (f" {'—':>11} {'—':>6} {'—':>4} {'—':>4} {'—':>5} ", None),
                (Level.CRITICAL.glyph, critical),
            ]
            return joined(pieces)
        memory = view.memory
        pieces += bar_pieces(
            bar_segments(view),
            memory.total_gib or 0.0,  # unknown: no segments, an empty bar
            width,
            self.segment_style,
            memory.reserve_starts_at_gib,
            self.reserve_style(),
        )
        alert = self._alert or NO_ALERT
        used = f"{fmt.gib(sample.used_gib)}/{fmt.gib(sample.total_gib)}"
        util = fmt.pct(sample.utilization_pct)
        temp = "—" if sample.temperature_c is None else f"{sample.temperature_c}C"
        power = "—" if sample.power_w is None else f"{sample.power_w:.0f}W"
        pieces += [
            (f" {used:>11} ", None),
            (f"{fmt.gib(memory.free_gib):>6}", self._level_style(alert.free)),
            (f" {util:>4} ", None),
            (f"{temp:>4}", self._level_style(alert.temperature)),
            (" ", None),
            (f"{power:>5}", self._level_style(alert.power)),
            (" ", None),
            (alert.level.glyph or " ", self._level_style(alert.level)),
        ]
        return joined(pieces)

    def _level_style(self, level: Level) -> Style | None:
        """The stylesheet's colour for an alert level (nothing for ok)."""
        if level == Level.OK:
            return None
        return self.component_style(f"gpu--{level}")


class MemoryLegend(MemoryWidget, KeptLines):
    """The glyph and colour of every segment, with the selected GPU's GiB per segment."""

    DEFAULT_CSS = "MemoryLegend { height: auto; }"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(classes="memory", **kwargs)
        self._view: GpuView | None = None
        self._compact = False
        self._shown: Text | None = None  # what the screen shows, built for this width
        self._shown_width = 0

    def show(self, view: GpuView | None, compact: bool = False) -> None:
        if (view, compact) == (self._view, self._compact):
            return
        self._view, self._compact = view, compact
        # The selected GPU's view is new every second (its utilisation, its temperature), the
        # legend's GiB to one decimal seldom: repainted only when its words change, so that a
        # refresh with only the rows changed repaints only the rows' lines (Textual renders
        # every widget between the first and the last line that changed).
        width = self.size.width
        text = self._text() if width else None
        if text is None or text != self._shown:
            self._shown, self._shown_width = text, width  # render() draws it, not built again
            self.refresh()  # its height is fixed by the stylesheet

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._shown = None  # a new theme: the same words in other colours

    def render(self) -> Text:
        width = self.size.width
        if self._shown is None or self._shown_width != width:  # first paint, resized, restyled
            self._shown, self._shown_width = self._text(), width
        return self._shown

    def _text(self) -> Text:
        view = self._view
        text = Text(overflow="fold")
        if view is None:
            text.append("no GPU readings: memory bars need NVML (see the source markers above)")
            return text
        memory = view.memory
        if not memory.known:
            text.append(f"  GPU {view.sample.index}: ", self.label_style())
            text.append(
                f"lost: {view.sample.vendor.library} gives no numbers for it, so none are shown"
            )
            return text
        segments = bar_segments(view)
        # Whole items, wrapped between items (never `│` on one line and its words on the next).
        width = self.size.width
        if self._compact:  # one line: glyphs and GiB only (? explains the glyphs)
            lead = Text(f"  GPU {view.sample.index} GiB: ", self.label_style())
            items = [self._item(name, fmt.gib(value)) for name, value in segments]
            if memory.reserve_gib is not None:
                items.append(self._reserve_item(f"reserve {fmt.gib(memory.reserve_gib)}"))
            return wrap_items(items, width, lead=lead, gap=1, lines=1)
        lead = Text(f"  GPU {view.sample.index}: ", self.label_style())
        items = [
            self._item(name, f" {SHORT.get(name, name)} {fmt.gib(value)}")
            for name, value in segments
        ]
        if memory.reserve_starts_at_gib is not None:
            items.append(
                self._reserve_item(
                    f" reserve {fmt.gib(memory.reserve_gib)} from {fmt.gib(memory.reserve_starts_at_gib)}"
                )
            )
        if memory.log_excess_gib is not None:
            # Runtime would be negative: unknown, and the notes say why in words.
            items.append(self._item("runtime", f" {SHORT['runtime']} unknown"))
        items.append(Text("(GiB)"))
        return wrap_items(items, width, lead=lead)

    def _item(self, name: str, words: str) -> Text:
        item = Text(GLYPHS.get(name, "▀"), self.segment_style(name))
        item.append(words)
        return item

    def _reserve_item(self, words: str) -> Text:
        item = Text(RESERVE_MARK, self.reserve_style())
        item.append(words)
        return item
