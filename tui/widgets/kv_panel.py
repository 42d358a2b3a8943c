"""The KV panel: token usage bar, load, a usage sparkline and how many requests fit."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text

from tui import fmt
from tui.model.history import Series
from tui.model.kv_usage import KvUsage, load_line
from tui.model.server_status import duration_text
from tui.widgets.segments import StyledWidget
from tui.widgets.sparkline import sparkline

LABEL = "KV cache  "


class KvPanel(StyledWidget):
    DEFAULT_CSS = "KvPanel { height: auto; }"
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "kv--used",
        "kv--free",
        "kv--spark",
        "kv--label",
        "kv--dim",
    }

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._key: tuple | None = None
        self._usage: KvUsage | None = None
        self._series: Series | None = None
        self._compact = False
        self._shown: Text | None = None
        self._shown_width = 0

    def show(self, usage: KvUsage, series: Series, compact: bool) -> None:
        key = (usage, series.values[-1:] if series.values else (), len(series.values), compact)
        if key != self._key:
            self._key = key
            self._usage, self._series, self._compact = usage, series, compact
            width = self.size.width
            text = self._build(width) if width else None
            if text is None or text != self._shown:
                self._shown, self._shown_width = text, width
                # Its height is fixed by the stylesheet: a repaint, never a new layout.
                self.refresh()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._shown = None  # its colours are baked into the cached text (a theme change)

    def _style(self, name: str):
        return self.component_style(name)

    def render(self) -> Text:
        # Built once in show() to compare with what is on screen; reused here unless resized.
        width = self.size.width
        if self._shown is None or self._shown_width != width:
            self._shown, self._shown_width = self._build(width), width
        return self._shown

    def _build(self, width: int) -> Text:
        usage = self._usage
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(LABEL, self._style("kv--label"))
        if usage is None:
            text.append("waiting for the first snapshot")
            return text
        bar = max(10, min(40, width // 5))
        if usage.usage_pct is not None:
            filled = round(min(100.0, max(0.0, usage.usage_pct)) / 100 * bar)
            text.append("█" * filled, self._style("kv--used"))
            text.append("░" * (bar - filled), self._style("kv--free"))
        else:
            text.append("·" * bar, self._style("kv--dim"))
        text.append(f" {fmt.count(usage.used_tokens)} / {fmt.count(usage.max_tokens)} tokens")
        text.append(f" ({fmt.pct(usage.usage_pct)})")
        # The rest flows into as many lines as the width needs: load, where the numbers come
        # from, capacity, and (full view) the usage sparkline.
        pieces: list[Text] = [Text(load_line(usage.load))]
        if usage.source == "none":
            pieces.append(Text("no metrics and no batch line yet", self._style("kv--dim")))
        elif usage.source != "metrics":
            pieces.append(Text(f"({usage.source})", self._style("kv--dim")))
        fits = self._fits(usage)
        if fits:
            pieces.append(Text(fits))
        series = self._series
        if not self._compact and series is not None and series.values:
            spark = sparkline(series.values, max(10, min(60, width // 3)), 0, 100)
            spark.append(f" usage, last {duration_text(series.seconds)}", self._style("kv--dim"))
            pieces.append(spark)
        line_len = text.cell_len
        for piece in pieces:
            if line_len + 3 + piece.cell_len > width:
                text.append("\n" + " " * len(LABEL))
                line_len = len(LABEL)
            else:
                text.append("   ")
                line_len += 3
            text.append_text(piece)
            line_len += piece.cell_len
        return text

    @staticmethod
    def _fits(usage: KvUsage) -> str:
        parts = []
        for cap in usage.capacity:
            now = "" if cap.fit_free_now is None else f" ({fmt.ratio(cap.fit_free_now)} free now)"
            parts.append(f"{fmt.ratio(cap.fit_in_pool)} × {cap.length_tokens:,}{now}")
        return ("fits " + " · ".join(parts)) if parts else ""
