"""Styles of the memory segments, looked up from the stylesheet's component classes."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.style import Style
from textual.widget import Widget

SEGMENTS = (
    "baseline",
    "weights",
    "KV cache",
    "draft weights",
    "draft KV",
    "CUDA graphs",
    "runtime",
    "in use",
    "other processes",
    "free",
    "mamba",
    "other caches",
)


def css_name(segment: str) -> str:
    return "seg--" + segment.lower().replace(" ", "-")


SEGMENT_CLASSES = {css_name(s) for s in SEGMENTS} | {"seg--reserve", "seg--label"}
# A GPU row's alert levels (tui/kvtop/model/status/gpu_alerts.py): the values that set them, and the glyph.
ALERT_CLASSES = {"gpu--warning", "gpu--critical"}


class StyledWidget(Widget):
    """Component styles looked up once, not on every refresh.

    Textual drops its own component-style cache on every `refresh()`, and rebuilding one walks
    the widget's ancestors: measured at about 0.1 ms per lookup, a third of a GPU row's render.
    The styles change only when the CSS, the theme or the widget's classes do, and Textual
    calls `notify_style_update` then.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._kvtop_styles: dict[str, Style] = {}

    def component_style(self, name: str) -> Style:
        style = self._kvtop_styles.get(name)
        if style is None:
            style = self.get_component_rich_style(name, partial=True)
            self._kvtop_styles[name] = style
        return style

    def own_style(self) -> Style:
        """The widget's own style (Textual's rich_style), kept: Textual works it out from the
        ancestors at every call (~20 µs, more than drawing a GPU line)."""
        style = self._kvtop_styles.get("")
        if style is None:
            style = self._kvtop_styles[""] = self.rich_style
        return style

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._kvtop_styles.clear()


class MemoryWidget(StyledWidget):
    """A widget that draws memory segments; colours come from styles/kvtop.tcss."""

    COMPONENT_CLASSES: ClassVar[set[str]] = SEGMENT_CLASSES

    def segment_style(self, segment: str) -> Style:
        return self.component_style(css_name(segment))

    def reserve_style(self) -> Style:
        return self.component_style("seg--reserve")

    def label_style(self) -> Style:
        return self.component_style("seg--label")
