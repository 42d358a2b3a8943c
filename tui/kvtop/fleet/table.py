"""The fleet view's widgets: the table of deployments and hosts, Prometheus' problem, and the
selected row's alerts. They only lay out and style what tui/kvtop/fleet/rows words
(`row_cells`); no number is computed here, and none is cut (a long name is, with "…")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text

from kvtop.fleet.rows import DEPLOYMENT, FleetRow, row_cells
from kvtop.live.widgets.segments import StyledWidget
from kvtop.model.status.levels import Alert, Level

# (row_cells key, title, justify); the name column takes what the others leave.
COLUMNS = (
    ("state", "state", "left"),
    ("shape", "TP/DP/PP", "left"),
    ("nodes", "nodes", "right"),
    ("kv", "KV use", "right"),
    ("headroom", "headroom", "right"),
    ("restarts", "restarts", "right"),
    ("alerts", "alerts", "left"),
)
# Shown, before the alerts, when the name keeps NAME_MIN + 8 cells with them.
OPTIONAL = (("memory", "used/total GiB", "right"), ("exporters", "exporters", "left"))
NAME_MIN = 14
MARK = 2  # "▶ " before the selected row
HOST_INDENT = "  "


def _widths(rows: Sequence[FleetRow], columns: Sequence[tuple[str, str, str]]) -> list[int]:
    cells = [row_cells(r) for r in rows]
    return [max([cell_len(title)] + [cell_len(c[key]) for c in cells]) for key, title, _ in columns]


def table_columns(
    rows: Sequence[FleetRow], width: int
) -> tuple[list[tuple[str, str, str]], list[int], int]:
    """The columns shown at `width`, their widths and the name column's width."""
    columns = list(COLUMNS)
    widths = _widths(rows, columns)
    for extra in OPTIONAL:
        wider = [*columns[:-1], extra, *columns[-1:]]
        extra_widths = _widths(rows, wider)
        if width - MARK - sum(extra_widths) - len(wider) >= NAME_MIN + 8:
            columns, widths = wider, extra_widths
    name = max(NAME_MIN, width - MARK - sum(widths) - len(widths))
    return columns, widths, name


def _fit(text: str, width: int) -> str:
    if cell_len(text) <= width:
        return text
    return text[: max(0, width - 1)] + "…"


class FleetTable(StyledWidget):
    """One row per deployment, then its hosts; the selected row marked ▶ and highlighted. The
    alert levels' colours are the stylesheet's (styles/kvtop.tcss), as every view's."""

    DEFAULT_CSS = """
    FleetTable { height: 1fr; }
    FleetTable > .fleet--header { text-style: bold; color: $primary; }
    FleetTable > .fleet--deployment { text-style: bold; }
    FleetTable > .fleet--selected { background: $boost; text-style: bold; }
    FleetTable > .fleet--stale { color: $foreground-muted; }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "fleet--header",
        "fleet--deployment",
        "fleet--selected",
        "fleet--warning",
        "fleet--critical",
        "fleet--stale",
    }

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rows: tuple[FleetRow, ...] = ()
        self.selected = 0
        self.stale = False
        self._top = 0  # the first row shown

    def show(self, rows: tuple[FleetRow, ...], selected: int, stale: bool) -> None:
        if (rows, selected, stale) == (self.rows, self.selected, self.stale):
            return
        self.rows, self.selected, self.stale = rows, selected, stale
        self.refresh()

    def _visible(self, room: int) -> range:
        if self.selected < self._top:
            self._top = self.selected
        elif self.selected >= self._top + room:
            self._top = self.selected - room + 1
        self._top = max(0, min(self._top, max(0, len(self.rows) - room)))
        return range(self._top, min(len(self.rows), self._top + room))

    def _line(
        self,
        row: FleetRow | None,
        columns: Sequence[tuple[str, str, str]],
        widths: Sequence[int],
        name: int,
    ) -> Text:
        if row is None:
            cells = {key: title for key, title, _ in columns} | {"name": "deployment / host"}
        else:
            cells = row_cells(row)
        label = (
            cells["name"] if row is None or row.kind == DEPLOYMENT else HOST_INDENT + cells["name"]
        )
        text = Text(no_wrap=True, overflow="crop")
        text.append(" " * MARK)
        text.append(_fit(label, name).ljust(name))
        for (key, _title, justify), width in zip(columns, widths, strict=True):
            value = cells[key]
            text.append(" ")
            cell = value.rjust(width) if justify == "right" else value.ljust(width)
            style = Style()
            if row is not None and key == "alerts" and row.level in (Level.WARNING, Level.CRITICAL):
                style = self.component_style(f"fleet--{row.level}")
            text.append(cell, style)
        return text

    def render(self) -> Text:
        width, height = self.size.width, self.size.height
        columns, widths, name = table_columns(self.rows, width)
        out = self._line(None, columns, widths, name)
        out.stylize(self.component_style("fleet--header"))
        for i in self._visible(max(1, height - 1)):
            row = self.rows[i]
            line = self._line(row, columns, widths, name)
            if row.kind == DEPLOYMENT:
                line.stylize(self.component_style("fleet--deployment"))
            if self.stale:
                line.stylize(self.component_style("fleet--stale"))
            if i == self.selected:
                line = Text("▶") + line[1:]
                line.stylize(self.component_style("fleet--selected"))
            out.append("\n")
            out.append_text(line)
        return out


class FleetSentences(StyledWidget):
    """Sentences with a glyph each, wrapped at word boundaries: Prometheus' problem, or the
    selected row's alerts. Takes no line when empty."""

    DEFAULT_CSS = """
    FleetSentences { height: auto; max-height: 8; padding: 0 1; }
    FleetSentences > .fleet--dim { color: $foreground-muted; }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {"fleet--warning", "fleet--critical", "fleet--dim"}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._lines: tuple[tuple[str, str], ...] = ()

    def show_alerts(self, title: str | None, alerts: Sequence[Alert]) -> None:
        lines = tuple((str(a.level), f"{a.level.glyph} {a.text}") for a in alerts)
        if title is not None and not alerts:
            lines = (("dim", f"{title}: no alerts"),)
        self._set(lines)

    def show_problem(self, sentence: str | None, warnings: Sequence[str] = ()) -> None:
        """Prometheus' problem (✖), then its warnings about partial data (▲)."""
        critical, warning = Level.CRITICAL, Level.WARNING
        lines: tuple[tuple[str, str], ...] = (
            () if sentence is None else ((str(critical), f"{critical.glyph} {sentence}"),)
        )
        lines += tuple((str(warning), f"{warning.glyph} Prometheus warns: {w}") for w in warnings)
        self._set(lines)

    def _set(self, lines: tuple[tuple[str, str], ...]) -> None:
        if lines == self._lines:
            return
        self._lines = lines
        self.display = bool(lines)
        self.refresh(layout=True)

    def render(self) -> Text:
        text = Text()
        for n, (level, words) in enumerate(self._lines):
            if n:
                text.append("\n")
            text.append(words, self.component_style(f"fleet--{level}"))
        return text
