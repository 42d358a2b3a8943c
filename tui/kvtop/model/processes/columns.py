"""The process table laid out for a width: each column sized to what it shows, and when the
line is too narrow the command shortens first, then TIME, RSS, %CPU and USER leave, in that
order (GPU, PID, WHOSE and GPU-MEM always stay: they say what holds the memory).

The words of every cell are made here, once, for the live table and the one-shot report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvtop import fmt
from kvtop.model.processes.table import ProcessRow, Whose, order_named


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    title: str
    right: bool  # numbers align right
    most: int = 0  # the widest it grows to (0: no limit); longer words are cut with …


GPU = Column("gpu", "GPU", right=True)
PID = Column("pid", "PID", right=True)
USER = Column("user", "USER", right=False, most=12)
WHOSE = Column("whose", "WHOSE", right=False, most=12)
GPU_MEMORY = Column("gpu_memory", "GPU-MEM", right=True)
CPU = Column("cpu", "%CPU", right=True)
RSS = Column("rss", "RSS", right=True)
TIME = Column("time", "TIME", right=True)
COMMAND = Column("command", "COMMAND", right=False)
COLUMNS = (GPU, PID, USER, WHOSE, GPU_MEMORY, CPU, RSS, TIME, COMMAND)
# Which leave first when the line is too narrow (after the command has shortened to its least).
DROP_ORDER = ("time", "rss", "cpu", "user")
COMMAND_LEAST = 16  # the command shortens to this before a column leaves
COMMAND_FLOOR = 8  # narrower than this the command is left out (its start says too little)
GAP = "  "  # between columns

UNREADABLE = "(cannot be read here)"  # another user's under hidepid, or a container's (help says)


def elapsed(seconds: float | None) -> str:
    """Time since a process started, as nvitop and ps show it: 4:05, 1:02:03, 3d 04:05."""
    if seconds is None:
        return fmt.UNKNOWN
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}:{minutes:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def _gib(value: float | None) -> str:
    return fmt.UNKNOWN if value is None else f"{fmt.gib(value, 2)} GiB"


def _command(row: ProcessRow) -> str:
    if row.pid is None and row.lost:
        return row.lost  # a lost GPU's row: why NVML cannot read it, where a command would be
    return row.command if row.readable and row.command else UNREADABLE


def cells(row: ProcessRow) -> dict[str, str]:
    """The words of ROW's cells, by column key (uncut)."""
    return {
        "gpu": str(row.gpu),
        "pid": fmt.UNKNOWN if row.pid is None else str(row.pid),
        "user": row.user or fmt.UNKNOWN,
        "whose": row.whose_word,
        "gpu_memory": _gib(row.gpu_memory_gib),
        "cpu": fmt.number(row.cpu_percent, 1),
        "rss": _gib(row.rss_gib),
        "time": elapsed(row.elapsed_s),
        "command": _command(row),
    }


@dataclass(frozen=True, slots=True)
class Layout:
    """The columns shown and their widths (the command's is what is left, maybe 0)."""

    columns: tuple[Column, ...]
    widths: tuple[int, ...]

    def keys(self) -> tuple[str, ...]:
        return tuple(c.key for c in self.columns)


def _cut(word: str, width: int) -> str:
    if len(word) <= width:
        return word
    return word[: max(0, width - 1)] + "…" if width > 0 else ""


def layout(rows: Sequence[dict[str, str]], width: int) -> Layout:
    """The columns for a line of WIDTH cells, given the rows' cells (`cells`)."""

    def natural(column: Column) -> int:
        # One cell more than the title: room for the sort arrow, wherever it is.
        size = max([len(column.title) + 1, *(len(r[column.key]) for r in rows)])
        return min(size, column.most) if column.most else size

    shown = [c for c in COLUMNS if c is not COMMAND]
    fixed = {c.key: natural(c) for c in shown}
    command_wants = natural(COMMAND)

    def room(columns: list[Column]) -> int:
        return width - sum(fixed[c.key] for c in columns) - len(GAP) * len(columns)

    for key in DROP_ORDER:
        if room(shown) >= min(command_wants, COMMAND_LEAST):
            break
        shown = [c for c in shown if c.key != key]
    command = min(command_wants, room(shown))
    if command < COMMAND_FLOOR:
        command = 0
    columns = tuple(shown) + ((COMMAND,) if command else ())
    widths = tuple(fixed[c.key] for c in shown) + ((command,) if command else ())
    return Layout(columns, widths)


def _line(words: Sequence[str], shape: Layout) -> str:
    parts = []
    for word, column, size in zip(words, shape.columns, shape.widths, strict=True):
        word = _cut(word, size)
        parts.append(word.rjust(size) if column.right else word.ljust(size))
    return GAP.join(parts).rstrip()


def header(shape: Layout, order: str) -> str:
    """The title line; the sorted column's title carries the arrow (▼ largest first)."""
    sort = order_named(order)
    titles = [c.title + (sort.arrow if c.key == sort.key else "") for c in shape.columns]
    return _line(titles, shape)


def row_line(row_cells: dict[str, str], shape: Layout) -> str:
    return _line([row_cells[c.key] for c in shape.columns], shape)


def row_kind(row: ProcessRow) -> str:
    """How a row is drawn: "warn" foreign, an orphan or on a GPU NVML cannot read, "dim" not
    readable here, "" the server's."""
    if row.whose == Whose.FOREIGN or row.lost or row.orphan:
        return "warn"
    return "" if row.readable else "dim"


@dataclass(frozen=True, slots=True)
class TableLines:
    """The table as lines for a width: the header, then each row with how it is drawn."""

    header: str
    rows: tuple[tuple[str, str], ...]  # (line, kind)
    columns: tuple[str, ...]  # the keys of the columns shown


def table_lines(rows: Sequence[ProcessRow], width: int, order: str) -> TableLines:
    """ROWS (already in their order) laid out for WIDTH."""
    words = [cells(r) for r in rows]
    shape = layout(words, width)
    lines = tuple((row_line(w, shape), row_kind(r)) for w, r in zip(words, rows, strict=True))
    return TableLines(header(shape, order), lines, shape.keys())
