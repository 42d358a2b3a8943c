"""The overview's GPU table: a header line, one row per GPU with its stacked bar, a legend."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

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
from kvtop.model.status.gpu_alerts import GpuAlert
from kvtop.model.status.levels import Level

if TYPE_CHECKING:
    from kvtop.model.memory.gpu_view import GpuView

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


class GpuRow:
    """One GPU's line of the table: index, rank, stacked memory bar with the reserve mark, and
    NVML figures; the runs of (characters, style) it draws and the strip made from them, kept
    until the GPU, its alert, the selection or the width changes."""

    def __init__(self, table: GpuTable, position: int) -> None:
        self.table = table
        self.position = position  # its line in the table
        self.selected = False
        self._view: GpuView | None = None
        self._alert: GpuAlert | None = None
        self._strip: Strip | None = None
        self._shown: list[Piece] | None = None  # the runs on screen, made for this width
        self._shown_width = 0

    @property
    def view(self) -> GpuView | None:
        return self._view

    @property
    def alert(self) -> GpuAlert | None:
        return self._alert

    @property
    def index(self) -> int:
        """The NVML index of the GPU on this line (its position before the first reading)."""
        return self._view.sample.index if self._view is not None else self.position

    @property
    def region(self) -> Region:
        """Where the line is on the screen (as a widget's region: scrolled, maybe outside)."""
        table = self.table.region
        return Region(table.x, table.y + self.position, table.width, 1)

    def show(self, view: GpuView, alert: GpuAlert | None, width: int) -> bool:
        """The GPU and its alert; True when what the line shows changed. A reading that moved
        by less than the digits on screen (88.23 → 88.24 GiB) changes nothing."""
        if view == self._view and alert == self._alert:
            return False
        self._view, self._alert = view, alert
        pieces = self._pieces(width) if width else None
        if pieces is not None and pieces == self._shown:
            return False
        self._shown, self._shown_width, self._strip = pieces, width, None
        return True

    def forget(self) -> None:
        """Selected or not, or a new theme: the kept runs and strip carry the old styles."""
        self._shown, self._strip = None, None

    def strip(self, width: int, base: Style) -> Strip:
        """The line as one strip of `width` cells, `base` (the table's style, the selection's)
        under each run's style, as Strip.apply_style would: one Strip made, not three."""
        if self._strip is None or self._strip.cell_length != width:
            if self._shown is None or self._shown_width != width:  # resized, or first paint
                self._shown, self._shown_width = self._pieces(width), width
            segments = [
                Segment(words, base + style if style is not None else base)
                for words, style in self._shown
            ]
            cells = sum(cell_len(words) for words, _ in self._shown)
            strip = Strip(segments, cells)
            self._strip = strip if cells == width else strip.crop_extend(0, width, base)
        return self._strip

    def render(self) -> Text:
        """The line as Text (what the table draws, for a test or a screenshot)."""
        return pieces_text(self._pieces(self.table.size.width))

    def _pieces(self, total_width: int) -> list[Piece]:
        """The line as runs of (characters, style): compared with the runs on screen and drawn
        as segments, with no Text between (building, slicing and rendering Text was most of
        a row's cost, measured with cProfile on the live view)."""
        view = self._view
        if view is None:
            return []
        table = self.table
        sample = view.sample
        label = f"{sample.index:<3} {_rank_label(view.ranks)[:6]:<6}"[: LEFT_CELLS - 2]
        pieces: list[Piece] = [
            ("▶ " if self.selected else "  ", None),
            (label.ljust(LEFT_CELLS - 2), None),
        ]
        width = bar_width(total_width)
        if view.lost:
            critical = table.level_style(Level.CRITICAL)
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
            table.segment_style,
            memory.reserve_starts_at_gib,
            table.reserve_style(),
        )
        alert = self._alert or NO_ALERT
        used = f"{fmt.gib(sample.used_gib)}/{fmt.gib(sample.total_gib)}"
        util = fmt.pct(sample.utilization_pct)
        temp = "—" if sample.temperature_c is None else f"{sample.temperature_c}C"
        power = "—" if sample.power_w is None else f"{sample.power_w:.0f}W"
        pieces += [
            (f" {used:>11} ", None),
            (f"{fmt.gib(memory.free_gib):>6}", table.level_style(alert.free)),
            (f" {util:>4} ", None),
            (f"{temp:>4}", table.level_style(alert.temperature)),
            (" ", None),
            (f"{power:>5}", table.level_style(alert.power)),
            (" ", None),
            (alert.level.glyph or " ", table.level_style(alert.level)),
        ]
        return joined(pieces)


class GpuTable(MemoryWidget):
    """The GPUs, one line each (GpuRow), the selected one marked with ▶ and its background.

    One widget for all the lines, drawn with Textual's line API: Textual repaints every widget
    of a container that overlaps the lines that changed, so eight row widgets cost eight
    widget repaints and eight refresh messages each second, one table one (measured headless,
    120x40, a line changed on each of 8 rows per repaint: 2.7 ms per repaint as eight widgets,
    1.4 ms as one). The selection is the app's (ViewState); the table only draws it.
    bench/bench_rows_widget.py (CPU per snapshot repaint, headless, 120x40, median of 3 rounds
    of 60): this table 1.80 ms at 8 GPUs and 5.40 ms at 64; the same lines in a ListView (its
    cursor, a ListItem around each) 3.31 and 17.33 ms; a DataTable with the bar as a cell 11.30
    and 43.45 ms (and it cannot give the bar "the rest of the width"). Eight row widgets had
    cost 3.3 and 16.5 ms against a ListView's 3.9 and 23.0 on an earlier day.
    """

    DEFAULT_CSS = "GpuTable { height: auto; }"
    COMPONENT_CLASSES: ClassVar[set[str]] = SEGMENT_CLASSES | ALERT_CLASSES | {"gpu--selected"}

    class Clicked(Message):
        """A line was clicked: its GPU's NVML index, and 2 for a double click."""

        def __init__(self, gpu_index: int, clicks: int) -> None:
            super().__init__()
            self.gpu_index, self.clicks = gpu_index, clicks

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(classes="memory", **kwargs)
        self.rows: list[GpuRow] = []
        self._marked = -1  # the line drawn as selected
        self._selected_base: Style | None = None  # the selected line's style, kept

    def sync(self, count: int) -> None:
        """As many lines as GPUs (GPUs come and go: lost, reset, MIG)."""
        if count == len(self.rows):
            return
        del self.rows[count:]
        self.rows.extend(GpuRow(self, i) for i in range(len(self.rows), count))
        if self._marked >= count:
            self._marked = -1
        self.refresh(layout=True)  # its height is its line count

    def show_row(self, position: int, view: GpuView, alert: GpuAlert | None = None) -> None:
        """A GPU and its alert (tui/kvtop/model/status/gpu_alerts.py; None: no alert styling)
        on a line; only that line is repainted, and only when what it shows changed."""
        if self.rows[position].show(view, alert, self.size.width):
            self._refresh_line(position)

    def select(self, position: int) -> None:
        """Draw `position` as the selected line (▶ and the background), scrolled into view."""
        if position == self._marked:
            return
        for i, row in enumerate(self.rows):
            if row.selected != (i == position):
                row.selected = i == position
                row.forget()
                self._refresh_line(i)
        self._marked = position
        parent = self.parent
        if 0 <= position < len(self.rows) and isinstance(parent, Widget):
            line = Region(0, self.virtual_region.y + position, self.size.width, 1)
            parent.scroll_to_region(line, animate=False, immediate=True)

    def _refresh_line(self, position: int) -> None:
        if self.is_attached:
            self.refresh(Region(0, position, self.size.width, 1))

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.rows)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._selected_base = None
        for row in self.rows:
            row.forget()

    def level_style(self, level: Level) -> Style | None:
        """The stylesheet's colour for an alert level (nothing for ok)."""
        if level == Level.OK:
            return None
        return self.component_style(f"gpu--{level}")

    def _base(self, selected: bool) -> Style:
        if not selected:
            return self.own_style()
        if self._selected_base is None:  # over the table's own: the background blended
            self._selected_base = self.own_style() + self.get_component_rich_style("gpu--selected")
        return self._selected_base

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if not 0 <= y < len(self.rows):
            return Strip.blank(width, self._base(False))
        row = self.rows[y]
        return row.strip(width, self._base(row.selected))

    def on_click(self, event: events.Click) -> None:
        """The screen turns a click into a selection, a double click into GPU detail."""
        y = event.y
        if not 0 <= y < len(self.rows) or self.rows[y].view is None:
            return
        event.stop()
        self.post_message(self.Clicked(self.rows[y].index, event.chain))


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
