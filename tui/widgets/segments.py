"""Styles of the memory segments, looked up from the stylesheet's component classes."""

from __future__ import annotations

from typing import ClassVar

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
    "free",
)


def css_name(segment: str) -> str:
    return "seg--" + segment.lower().replace(" ", "-")


SEGMENT_CLASSES = {css_name(s) for s in SEGMENTS} | {"seg--reserve", "seg--label"}


class MemoryWidget(Widget):
    """A widget that draws memory segments; colours come from styles/kvtop.tcss."""

    COMPONENT_CLASSES: ClassVar[set[str]] = SEGMENT_CLASSES

    def segment_style(self, segment: str) -> Style:
        return self.get_component_rich_style(css_name(segment), partial=True)

    def reserve_style(self) -> Style:
        return self.get_component_rich_style("seg--reserve", partial=True)

    def label_style(self) -> Style:
        return self.get_component_rich_style("seg--label", partial=True)
