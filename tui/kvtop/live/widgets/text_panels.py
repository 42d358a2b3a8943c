"""Text panels of the overview: host KV lane, insights, events, and source notices.

Log text and messages are always appended as plain Text: markup in a log line is never parsed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from rich.console import RenderableType
from rich.style import Style
from rich.table import Table
from rich.text import Text

from kvtop import fmt
from kvtop.live.widgets.segments import StyledWidget
from kvtop.model.event_view import event_words
from kvtop.model.kv_usage import KvUsage
from kvtop.model.notes import Note
from kvtop.model.snapshot import HostMemory, SourceHealth, SourceState
from kvtop.model.status.levels import Alert, Level
from kvtop.model.timeline import EventRow
from kvtop.sglang.control_chars import make_visible

LOG_TAIL_FROM_LINES = 3  # the events panel shows the log's tail when this many lines are spare
PANEL_CLASSES = {"panel--label", "panel--dim", "panel--bad", "panel--warn", "panel--good"}


class TextPanel(StyledWidget):
    """Refreshes only when the content key changes; subclasses build the Text."""

    DEFAULT_CSS = "TextPanel { height: auto; }"
    COMPONENT_CLASSES: ClassVar[set[str]] = PANEL_CLASSES

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._key: object = object()
        self._text = Text()

    # Panels whose lines never wrap: their height is their line count.
    _fixed_lines = True

    def style_of(self, name: str) -> Style:
        return self.component_style(f"panel--{name}")

    def set_content(self, key: object, build: Callable[[], Text]) -> None:
        if key == self._key:
            return
        self._key = key
        text = build()
        visible = bool(text.plain)
        if self.display != visible:
            self.display = visible  # an empty panel takes no line
        if text == self._text:
            return  # inputs moved, the display did not (host RAM 412.61 → 412.58 GB)
        old_lines = self._text.plain.count("\n") if self._text.plain else -1
        self._text = text
        lines = text.plain.count("\n") if text.plain else -1
        # A new layout only when the height changes; otherwise a repaint of this widget alone
        # (a layout pass costs more than the repaint: it re-arranges the whole screen).
        self.refresh(layout=lines != old_lines or self._wrapped_height_changed())

    def _wrapped_height_changed(self) -> bool:
        """A wrapping panel's new text, measured as Textual measures it for the layout, against
        the height it has on screen now."""
        if self._fixed_lines:
            return False
        width = self.content_region.width
        if not self.is_attached or not self.display or width <= 0:
            return True
        self.clear_cached_dimensions()
        return (
            self.get_content_height(self.size, self.app.size, width) != self.content_region.height
        )

    def render(self) -> RenderableType:
        return self._text

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._key = object()  # rebuild on the next show(): the text carries the old styles


class HostKvLane(TextPanel):
    """Hierarchical cache: the host pool per rank and in total, host RAM, pool usage. Its line
    wraps between words under its label (a narrow screen keeps every number whole)."""

    _fixed_lines = False

    def show(
        self,
        per_rank_gb: Sequence[float],
        total_gb: float | None,
        host: HostMemory | None,
        usage: KvUsage,
        too_big: Level = Level.OK,
    ) -> None:
        """`host`: this host's RAM, None when the log is another host's; `too_big`: the
        verdict's level for a host pool larger than it."""
        key = (
            tuple(per_rank_gb),
            total_gb,
            host,
            usage.host_used_tokens,
            usage.host_total_tokens,
            too_big,
        )
        self.set_content(key, lambda: self._build(per_rank_gb, total_gb, host, usage, too_big))

    def _build(
        self,
        per_rank: Sequence[float],
        total_gb: float | None,
        host: HostMemory | None,
        usage: KvUsage,
        too_big: Level = Level.OK,
    ) -> Text:
        if not per_rank:
            return Text()
        text = Text()
        # Host memory in decimal GB, the unit SGLang logs the host KV cache in (not GiB).
        low, high = min(per_rank), max(per_rank)
        each = f"{low:,.2f} GB" if low == high else f"{low:,.2f}–{high:,.2f} GB"
        text.append(f"{each} per rank × {len(per_rank)} = {fmt.gib(total_gb, 2)} GB")
        if host is not None:
            text.append(f" · host RAM {host.used_gb:,.0f} / {host.total_gb:,.0f} GB used")
            if too_big != Level.OK:
                text.append(
                    f" {too_big.glyph} host KV cache exceeds host RAM", self.style_of("bad")
                )
        if usage.host_usage_pct is not None:
            text.append(
                f" · {fmt.pct(usage.host_usage_pct)} in use ({usage.host_used_tokens:,} / "
                f"{usage.host_total_tokens:,} tokens)"
            )
        return text

    def render(self) -> RenderableType:
        if not self._text.plain:
            return self._text
        grid = Table.grid()
        grid.add_column(width=10, no_wrap=True)
        grid.add_column(ratio=1)
        grid.add_row(Text("host KV", self.style_of("label")), self._text)
        return grid


class InsightsPanel(StyledWidget):
    """Findings from the model, as sentences with a hanging indent (a grid wraps them)."""

    DEFAULT_CSS = "InsightsPanel { height: auto; }"
    COMPONENT_CLASSES: ClassVar[set[str]] = PANEL_CLASSES

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._key: object = None
        self._grid: Table | None = None

    def show(self, insights: Sequence[str], limit: int) -> None:
        key = (tuple(insights), limit)
        if key == self._key:
            return
        self._key = key
        label = self.component_style("panel--label")
        dim = self.component_style("panel--dim")
        grid = Table.grid(padding=(0, 1))
        grid.add_column(width=8, no_wrap=True)
        grid.add_column(width=1, no_wrap=True)
        grid.add_column(ratio=1)
        for i, line in enumerate(insights[:limit]):
            grid.add_row(Text("insights" if i == 0 else "", label), "•", Text(line))
        if len(insights) > limit:
            more = f"+{len(insights) - limit} more (c: full view)"
            grid.add_row("", "", Text(more, dim))
        self._grid = grid
        self.display = bool(insights)
        self.refresh(layout=True)

    def render(self) -> RenderableType:
        return self._grid if self._grid is not None else Text()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._key = None  # rebuild on the next show(): the grid carries the old styles


def _blocks_that_fit(heights: Sequence[int], height: int) -> int:
    """How many blocks (a row and its next step) fit in `height` lines (0: all), keeping one
    line for "+N more" when some do not."""
    if not height or sum(heights) <= height:
        return len(heights)
    kept, used = 0, 1
    while kept < len(heights) and used + heights[kept] <= height:
        used += heights[kept]
        kept += 1
    return kept


class EventsPanel(TextPanel):
    """Newest first: phases across ranks with the memory they moved; failures with a next step.
    As many rows as its height holds, then "+N more (e: all events)"; when every event fits
    and room is left, the log's latest lines under them (l: the whole raw log)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._rows: tuple[EventRow, ...] = ()
        self._tail: tuple[str, ...] = ()

    def show(self, rows: Sequence[EventRow], limit: int, tail: Sequence[str] = ()) -> None:
        shown, tail = tuple(rows[:limit]), tuple(tail)
        if tail != self._tail:
            self._tail = tail
            self.refresh()
        self._rows = shown
        self.set_content(shown, lambda: self._build(shown, 0))

    def render(self) -> Text:
        height = self.size.height
        return self._build(self._rows, height) if height and self._rows else self._text

    def _build(self, rows: Sequence[EventRow], height: int) -> Text:
        """The rows that fit in `height` lines (0: all), a line counting the rest, and the
        log's tail in the rows left over."""
        blocks = [self._row_lines(row) for row in rows]
        kept = _blocks_that_fit([len(b) for b in blocks], height)
        flat = [line for block in blocks[:kept] for line in block]
        lines = [("events    " if i == 0 else "", line) for i, line in enumerate(flat)]
        if kept < len(blocks):
            more = f"+{len(blocks) - kept} more (e: all events)"
            lines.append(("", Text(more, self.style_of("dim"))))
        elif height:
            lines += self._tail_lines(height - len(lines) - 1)  # a blank line between
        text = Text(no_wrap=True, overflow="ellipsis")
        for i, (label, line) in enumerate(lines):
            text.append(label or " " * 10, self.style_of("label"))
            text.append_text(line)
            if i < len(lines) - 1:
                text.append("\n")
        return text

    def _tail_lines(self, spare: int) -> list[tuple[str, Text]]:
        if spare < LOG_TAIL_FROM_LINES or not self._tail:
            return []
        lines = [("", Text())]
        for i, raw in enumerate(self._tail[-spare:]):
            line = Text(make_visible(raw), self.style_of("dim"), no_wrap=True)
            lines.append(("log       " if i == 0 else "", line))
        return lines

    def _row_lines(self, row: EventRow) -> list[Text]:
        if not row.failure:
            return [Text(event_words(row), no_wrap=True, overflow="ellipsis")]
        lines = [Text(event_words(row), self.style_of("bad"), no_wrap=True, overflow="ellipsis")]
        if row.next_step:
            lines.append(Text("→ " + row.next_step, self.style_of("warn")))
        return lines


class NoticesPanel(TextPanel):
    """The verdict's active alerts that no GPU row or source line shows (critical in red,
    first; sources that disagree about the server among them), sources degraded or off with
    their reason, then the snapshot's notes (collapsed by kind in the model; dismissed advisories
    left out). At most `max_lines` entries: the rest are counted, and the help lists them all.
    """

    _fixed_lines = False  # reasons are sentences: they wrap

    def show(
        self,
        sources: Sequence[SourceHealth],
        notes: Sequence[Note | str],
        demo: bool = False,
        *,
        mismatches: Sequence[str] = (),
        max_lines: int = 6,
        alerts: Sequence[Alert] = (),
    ) -> None:
        down = any(a.kind == "server_down" for a in alerts)
        # A source's own line says more than its alert (the whole sentence, the next step);
        # the server's alert quotes what the scrape met.
        bad = tuple(
            h
            for h in sources
            if h.state != SourceState.OK and h.detail and not (down and h.name == "metrics")
        )
        named = {h.name for h in bad}
        shown = tuple(
            a
            for a in alerts
            if not a.subject.startswith("GPU ")  # the GPU rows say those
            and not (a.kind == "source_down" and a.subject in named)
        )
        items = tuple(n if isinstance(n, Note) else Note("other", n) for n in notes)
        width = self.app.size.width if self.is_attached else 0
        key = (shown, bad, items, tuple(mismatches), max_lines, width)
        self.set_content(key, lambda: self._build(shown, bad, items, mismatches, max_lines, width))

    def _build(
        self,
        alerts: Sequence[Alert],
        bad: Sequence[SourceHealth],
        notes: Sequence[Note],
        mismatches: Sequence[str],
        max_lines: int,
        width: int = 0,
    ) -> Text:
        text = Text(overflow="fold")
        # Sources about another server stay red, as before they were alerts: a warning that
        # says every other number may be someone else's.
        lines: list[tuple[str, str, str]] = [
            (
                f"{a.level.glyph} {'mismatch' if a.kind == 'mismatch' else a.subject}",
                a.text,
                "bad" if a.level == Level.CRITICAL or a.kind == "mismatch" else "warn",
            )
            for a in alerts
        ]
        lines += [("mismatch", m, "bad") for m in mismatches]
        lines += [(h.name, h.detail or "", "warn") for h in bad]
        for note in notes:
            hint = " (d: dismiss; ? shows it again)" if note.advisory else ""
            lines.append(("note", note.text + hint, "dim"))
        lines = _within(lines, max(1, max_lines), width)
        for i, (name, detail, kind) in enumerate(lines):
            style = self.style_of(kind)
            if name:
                text.append(f" {name}: ", style)
                text.append(detail, style if kind == "bad" else "")
            else:
                text.append(f" {detail}", style)
            if i < len(lines) - 1:
                text.append("\n")
        return text


def _within(
    lines: list[tuple[str, str, str]], budget: int, width: int
) -> list[tuple[str, str, str]]:
    """The notices that fit in `budget` screen lines once wrapped at `width` (0: one line
    each), the rest counted on a last line: nothing is cut off without a word."""

    def height(line: tuple[str, str, str]) -> int:
        cells = len(line[0]) + len(line[1]) + 3
        return max(1, -(-cells // width)) if width > 0 else 1

    if sum(height(line) for line in lines) <= budget:
        return lines
    kept: list[tuple[str, str, str]] = []
    used = 1  # the "+N more" line
    for line in lines:
        if used + height(line) > budget:
            break
        kept.append(line)
        used += height(line)
    more = len(lines) - len(kept)
    return [*kept, ("", f"+{more} more notice{'s' if more != 1 else ''} (? lists them all)", "dim")]
