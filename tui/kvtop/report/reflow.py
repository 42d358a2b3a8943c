"""Tables and sentences that fit the width they are given, never cutting a number.

`FitTable` chooses its layout when Rich renders it, from the width it gets:
- wide: one row per record (a rank, a GPU), as long as every column fits at its full width
  (a column marked `wrap` may wrap at word boundaries; nothing else does);
- transposed: one column per record and one row per field, in as many chunks as the width needs
  (8 ranks side by side fit 80 columns where 12 fields do not);
- blocks: one block per record, a field a line, when not even two records fit side by side.
`Hanging` wraps a sentence at word boundaries with a hanging indent.
A cell is never cut or replaced by "…"; a word wider than the whole line keeps its own line
(print with crop=False so the console does not cut it either).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, JustifyMethod, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

HANG = 2  # continuation lines of a sentence start this many cells further in than its first
WRAP_MIN = 24  # a wrapping column narrower than this reads as a word a line: blocks instead
# A word, with a following lone "·" kept on its line (a line never starts with the separator).
_WORD = re.compile(r"\S+(?: [·|](?= |$))?")


def _cell(value: RenderableType) -> Text:
    return value if isinstance(value, Text) else Text(str(value))


def _widest_line(text: Text) -> int:
    return max((cell_len(line) for line in text.plain.split("\n")), default=0)


def _widest_word(text: Text) -> int:
    return max((cell_len(word) for word in _WORD.findall(text.plain)), default=0)


@dataclass(frozen=True, slots=True)
class FitColumn:
    name: str  # the wide table's header; may hold "\n" to stack its words
    justify: JustifyMethod = "right"
    wrap: bool = False  # prose that may wrap at word boundaries (an arithmetic, an answer)

    @property
    def label(self) -> str:
        """The header on one line, for the transposed table and the blocks."""
        return " ".join(self.name.split())


class FitTable:
    """A table of records (rows) that reflows to the width it is rendered at (module doc).

    `key` is the column that names a record (rank, GPU index): the transposed table's header.
    `aside` is a long text column (a GPU's name) that, once the table is not wide, is said once
    above it instead of taking a column. `transpose=False` keeps records as rows or blocks (the
    startup phases: fifteen phases side by side say nothing)."""

    def __init__(
        self,
        columns: Sequence[FitColumn],
        *,
        gap: int = 2,
        key: int = 0,
        aside: int | None = None,
        transpose: bool = True,
        key_prefix: str = "",
    ) -> None:
        self.columns = list(columns)
        self.rows: list[list[Text]] = []
        self.gap = gap
        self.key = key
        self.aside = aside
        self.transpose = transpose
        self.key_prefix = key_prefix  # "GPU " before a bare index in the transposed header

    def add_row(self, *cells: RenderableType) -> None:
        self.rows.append([_cell(c) for c in cells])

    # -- measuring ---------------------------------------------------------------------------

    def wide_width(self) -> int:
        """The cells the wide table needs: full width for each column, the longest word for a
        wrapping one."""
        total = self.gap * (len(self.columns) - 1)
        for i, column in enumerate(self.columns):
            header = max(cell_len(part) for part in column.name.split("\n"))
            cells = [row[i] for row in self.rows]
            if column.wrap:
                words = max([_widest_word(c) for c in cells] + [_widest_word(Text(column.name))])
                widest = max([cell_len(column.label)] + [_widest_line(c) for c in cells])
                total += max(words, min(WRAP_MIN, widest))
            else:
                total += max([header] + [_widest_line(c) for c in cells])
        return total

    def _fields(self) -> list[int]:
        return [i for i in range(len(self.columns)) if i not in (self.key, self.aside)]

    def _heading(self, row: list[Text], stacked: bool = True) -> Text:
        """The record's name over its column: "GPU 0"; a rank's tags one a line ("DP0" over
        "TP0"), so that side by side the columns cannot be misread."""
        key = row[self.key].plain
        prefix = self.key_prefix if key.isdigit() else ""
        return Text(prefix + ("\n".join(key.split()) if stacked else key))

    def _record_width(self, row: list[Text]) -> int:
        cells = [row[i] for i in self._fields()] + [self._heading(row)]
        return max(_widest_line(c) for c in cells)

    def _label_width(self) -> int:
        return max((cell_len(self.columns[i].label) for i in self._fields()), default=0)

    def _chunks(self, width: int) -> list[list[list[Text]]] | None:
        """The records in groups that fit side by side; None when not even two fit (blocks)."""
        chunks: list[list[list[Text]]] = []
        used = self._label_width()
        for row in self.rows:
            need = self.gap + self._record_width(row)
            if chunks and used + need <= width:
                chunks[-1].append(row)
                used += need
                continue
            chunks.append([row])
            used = self._label_width() + need
        if len(self.rows) > 1 and all(len(c) < 2 for c in chunks):
            return None
        if self._label_width() + self.gap + max(map(self._record_width, self.rows)) > width:
            return None
        return chunks

    # -- the three layouts -------------------------------------------------------------------

    def _table(self) -> Table:
        return Table(
            box=None,
            pad_edge=False,
            show_edge=False,
            padding=(0, self.gap - 1, 0, 1),
            show_header=True,
        )

    def _wide(self) -> Table:
        table = self._table()
        for column in self.columns:
            table.add_column(
                column.name,
                justify=column.justify,
                no_wrap=not column.wrap,
                overflow="fold",
            )
        for row in self.rows:
            table.add_row(*row)
        return table

    def _transposed(self, chunk: list[list[Text]]) -> Table:
        table = self._table()
        table.add_column("", justify="left", no_wrap=True, overflow="fold")
        for row in chunk:
            table.add_column(self._heading(row), justify="right", no_wrap=True, overflow="fold")
        for i in self._fields():
            table.add_row(Text(self.columns[i].label), *(row[i] for row in chunk))
        return table

    def _aside_lines(self) -> list[RenderableType]:
        if self.aside is None or not self.rows:
            return []
        label = self.columns[self.aside].label
        values = [row[self.aside] for row in self.rows]
        if len({v.plain for v in values}) == 1:
            count = f" (all {len(values)})" if len(values) > 1 else ""
            return [Hanging(Text(f"{label}: ").append_text(values[0]).append(count))]
        return [
            Hanging(
                Text(f"{self._heading(row, False).plain} {label}: ").append_text(row[self.aside])
            )
            for row in self.rows
        ]

    def _blocks(self) -> list[RenderableType]:
        lines: list[RenderableType] = []
        for row in self.rows:
            lines.append(Text(self._heading(row, stacked=False).plain, style="bold"))
            for i, column in enumerate(self.columns):
                if i == self.key:
                    continue
                lines.append(Hanging(Text(f"  {column.label}: ").append_text(row[i]), hang=4))
        return lines

    def layout(self, width: int) -> list[RenderableType]:
        """The renderables that show the table in `width` cells."""
        if self.wide_width() <= width or not self.rows:
            return [self._wide()]
        chunks = self._chunks(width) if self.transpose else None
        if chunks is None:
            return self._blocks()
        parts: list[RenderableType] = self._aside_lines()
        for n, chunk in enumerate(chunks):
            if n:
                parts.append(Text(""))
            parts.append(self._transposed(chunk))
        return parts

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield Group(*self.layout(options.max_width))

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(min(self.wide_width(), options.max_width), options.max_width)


def wrap_offsets(plain: str, width: int, hang: int) -> list[tuple[int, int]]:
    """(start, end) of each line of `plain` wrapped at word boundaries: the first line `width`
    cells, the others `width - hang`. A word wider than a line (a long path, a URL) gets a line
    of its own and is never split, so it can still be copied whole."""
    lines: list[tuple[int, int]] = []
    start = 0
    end = None  # the end of the last word on the current line
    room = width
    for word in _WORD.finditer(plain):
        if end is not None and cell_len(plain[start : word.end()]) > room:
            lines.append((start, end))
            start, room = word.start(), max(1, width - hang)
        end = word.end()
    lines.append((start, end if end is not None else len(plain)))
    return lines


class Hanging:
    """A sentence (or several lines of them) wrapped at word boundaries, each line's
    continuations indented `hang` cells further than the line's own leading spaces."""

    def __init__(self, text: Text, hang: int = HANG) -> None:
        self.text = text
        self.hang = hang

    def lines(self, width: int) -> Iterable[Text]:
        offset = 0
        for line in self.text.plain.split("\n"):
            lead = len(line) - len(line.lstrip(" "))
            indent = min(lead + self.hang, max(0, width // 2))
            piece = self.text[offset : offset + len(line)]
            for n, (start, end) in enumerate(wrap_offsets(line, width, indent)):
                out = Text(" " * indent if n else "").append_text(piece[start:end])
                out.no_wrap, out.overflow = True, "ignore"  # a word wider than the line stays
                yield out
            offset += len(line) + 1

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line in self.lines(options.max_width):
            line.end = "\n"
            yield line

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(
            min(_widest_word(self.text) + self.hang, options.max_width),
            min(_widest_line(self.text), options.max_width),
        )


def hang(renderable: RenderableType) -> RenderableType:
    """`renderable` with its sentences (Text, also inside Groups) as `Hanging` text."""
    if isinstance(renderable, Text):
        return Hanging(renderable)
    if isinstance(renderable, Group):
        return Group(*(hang(part) for part in renderable.renderables))
    return renderable
