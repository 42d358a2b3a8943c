"""The KV panel: token usage bar, load, where the numbers come from and how old they are, a
usage sparkline and how many requests fit. Alert levels come formed (tui/kvtop/live/view_state.kv_facts):
a warning or critical usage or queue gets its colour and its glyph (readable without colour)."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.style import Style
from rich.text import Text

from kvtop import fmt
from kvtop.live.view_state import KvFacts
from kvtop.live.widgets.kept_lines import KeptLines
from kvtop.live.widgets.sparkline import sparkline
from kvtop.model.history import PERCENT_FLOOR, Series
from kvtop.model.kv_usage import KvUsage, load_line
from kvtop.model.state_pool import slots_text
from kvtop.model.status.levels import Level
from kvtop.model.status.server_status import duration_text

LABEL = "KV cache  "


class KvPanel(KeptLines):
    DEFAULT_CSS = "KvPanel { height: auto; }"
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "kv--used",
        "kv--free",
        "kv--spark",
        "kv--label",
        "kv--dim",
        "kv--warning",
        "kv--critical",
    }

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._key: tuple | None = None
        self._facts: KvFacts | None = None
        self._compact = False
        self._shown: Text | None = None
        self._shown_width = 0

    def show(self, facts: KvFacts, compact: bool) -> None:
        series = facts.series
        key = (
            facts.usage,
            facts.source,
            facts.usage_level,
            facts.queue_level,
            facts.queued_for_s,
            facts.retractions,
            facts.retractions_level,
            series.values[-1:] if series.values else (),
            len(series.values),
            series.runs,
            compact,
            facts.binding,
        )
        if key != self._key:
            self._key = key
            self._facts, self._compact = facts, compact
            width = self.size.width
            text = self._build(width) if width else None
            if text is None or text != self._shown:
                self._shown, self._shown_width = text, width
                # Its height is fixed by the stylesheet: a repaint, never a new layout.
                self.refresh()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._shown = None  # its colours are baked into the cached text (a theme change)

    def _style(self, name: str) -> Style:
        return self.component_style(name)

    def render(self) -> Text:
        # Built once in show() to compare with what is on screen; reused here unless resized.
        width = self.size.width
        if self._shown is None or self._shown_width != width:
            self._shown, self._shown_width = self._build(width), width
        return self._shown

    def _level_style(self, level: Level, ok: str) -> Style:
        return self._style(ok if level == Level.OK else f"kv--{level}")

    def _usage_line(self, text: Text, facts: KvFacts, width: int) -> None:
        """The bar and the tokens: in the usage's alert colour while current, dim when the
        numbers are only the last known ones (an old batch line)."""
        usage, level = facts.usage, facts.usage_level
        bar = max(10, min(40, width // 5))
        if usage.usage_pct is not None:
            filled = round(min(100.0, max(0.0, usage.usage_pct)) / 100 * bar)
            used = "kv--used" if usage.current else "kv--dim"
            text.append("█" * filled, self._level_style(level, used))
            text.append("░" * (bar - filled), self._style("kv--free"))
        else:
            text.append("·" * bar, self._style("kv--dim"))
        tokens = f" {fmt.count(usage.used_tokens)} / {fmt.count(usage.max_tokens)} tokens"
        text.append(tokens, None if usage.current else self._style("kv--dim"))
        # One decimal, and never a threshold the usage is not on (94.99 % is not "95%").
        pct = fmt.pct(usage.usage_pct, 1, edges=facts.usage_edges)
        if level == Level.OK:
            text.append(f" ({pct})")
        else:
            text.append(" (")
            text.append(f"{level.glyph} {pct}", self._style(f"kv--{level}"))
            text.append(")")
        if usage.evictable_pct is not None and usage.current:
            # Cached prefixes SGLang frees when a request needs room: held, but not in use.
            text.append(f" · evictable {fmt.pct(usage.evictable_pct, 1)}", self._style("kv--dim"))

    def _load(self, facts: KvFacts) -> Text:
        """The load; a queue that has not emptied for a while in its alert colour, for how long."""
        usage, level = facts.usage, facts.queue_level
        load = Text(load_line(usage.load), "" if usage.current else self._style("kv--dim"))
        if level != Level.OK and facts.queued_for_s is not None:
            style = self._style(f"kv--{level}")
            load.highlight_regex(r"[\d,]+ queued", style)
            load.append(f" {level.glyph} queued {duration_text(facts.queued_for_s)}", style)
        return load

    def _build(self, width: int) -> Text:
        facts = self._facts
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(LABEL, self._style("kv--label"))
        if facts is None:
            text.append("waiting for the first snapshot")
            return text
        usage = facts.usage
        self._usage_line(text, facts, width)
        # The rest flows into as many lines as the width needs: load, where the numbers come
        # from and how old, capacity, and (full view) the usage sparkline.
        pieces: list[Text] = [self._load(facts)]
        state_pool = self._state_pool(usage)
        if state_pool is not None:
            pieces.append(state_pool)
        if facts.retractions is not None:  # requests taken back: the pool filled at decode
            level = facts.retractions_level
            glyph = f"{level.glyph} " if level != Level.OK else ""
            pieces.append(Text(glyph + facts.retractions, self._level_style(level, "kv--dim")))
        binding = facts.binding
        if binding is not None and binding.limit is not None:  # what holds requests back
            pieces.append(Text(binding.short))
        if facts.source is not None:
            said = facts.source if usage.source_kind == "none" else f"({facts.source})"
            pieces.append(Text(said, self._style("kv--dim")))
        fits = self._fits(usage)
        if fits:
            pieces.append(Text(fits))
        series: Series | None = facts.series
        if not self._compact and series is not None and series.values:
            shown = series.shown_range(PERCENT_FLOOR, 0, 100)
            low, high = (shown.low, shown.high) if shown is not None else (0, 100)
            spark = sparkline(series.values, max(10, min(60, width // 3)), low, high)
            span = f" {shown.text('%', 0, facts.usage_edges)}" if shown is not None else ""
            spark.append(
                f" usage{span}, last {duration_text(series.seconds)}", self._style("kv--dim")
            )
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

    def _state_pool(self, usage: KvUsage) -> Text | None:
        """A hybrid model's state slots in use (`state pool 72.0% (46 / 64 slots)`); nothing
        for a model without a state pool."""
        pool = usage.state_pool
        if pool is None:
            return None
        slots = slots_text(pool)
        words = f"state pool {fmt.pct(pool.usage_pct, 1)}" + (f" ({slots})" if slots else "")
        return Text(words, "" if usage.current else self._style("kv--dim"))

    @staticmethod
    def _fits(usage: KvUsage) -> str:
        """`fits 0.61 × 262,144 (0.18 free now) · 19.44 × 8,192 (…)`: one part per length. The
        length asked (--request-len, the formula's question) is often the context length itself:
        the same requests, said once."""
        parts = []
        lengths: set[int] = set()
        for cap in usage.capacity:
            if cap.length_tokens in lengths:
                continue
            lengths.add(cap.length_tokens)
            now = "" if cap.fit_free_now is None else f" ({fmt.ratio(cap.fit_free_now)} free now)"
            parts.append(f"{fmt.ratio(cap.fit_in_pool)} × {cap.length_tokens:,}{now}")
        return ("fits " + " · ".join(parts)) if parts else ""
