"""The process table's rows: every process on the GPUs with its GPU memory, what it uses on the
host, whose it is (a rank of the server, the server's, foreign), and the orders `o` cycles.

One row per process and GPU, as NVML lists them and nvitop shows them: a process on two GPUs
has two rows. A GPU NVML cannot read keeps a row too (one per rank the log places there), as
nvitop keeps an ERROR row: a table without it would read as a GPU with nothing on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kvtop.model.column_order import ColumnOrder, OrderCycle, sorted_by_number
from kvtop.model.memory.gpu_reading import GpuSample, GpuStatus
from kvtop.model.snapshot import GpuView, Snapshot
from kvtop.model.status.orphans import orphan_pids
from kvtop.model.str_enum import StrEnum
from kvtop.sglang.control_chars import make_visible


class Whose(StrEnum):
    """Whose a GPU process is (tui/kvtop/model/memory/process_owner.py decides)."""

    RANK = "rank"  # the server's, its title names a rank (the row shows the rank)
    SERVER = "server"  # the server's, without a rank (its main process, a child)
    FOREIGN = "foreign"  # not the server's
    UNKNOWN = "unknown"  # cannot be told: not readable here, on a GPU without a rank


@dataclass(frozen=True, slots=True)
class ProcessRow:
    """One process on one GPU. None: unknown (the host cannot read it, or NVML gave no
    figure); `elapsed_s`: since it started, at the snapshot's time. `lost`: the GPU cannot be
    read through NVML (why, in NVML's words), so this row stands for what the log places there
    (its rank, or nothing known): no pid, no figures."""

    gpu: int
    pid: int | None
    user: str | None
    gpu_memory_gib: float | None
    cpu_percent: float | None
    rss_gib: float | None
    elapsed_s: float | None
    command: str | None
    rank: str | None
    whose: Whose
    readable: bool
    lost: str | None = None
    # SGLang's own process with no server running it (tui/kvtop/model/status/orphans.py).
    orphan: bool = False

    @property
    def foreign(self) -> bool:
        return self.whose == Whose.FOREIGN

    @property
    def whose_word(self) -> str:
        """What the table's WHOSE column says: orphan, the rank, server, foreign or ?."""
        if self.orphan:
            return "orphan"
        if self.whose == Whose.RANK and self.rank:
            return self.rank
        return "?" if self.whose == Whose.UNKNOWN else str(self.whose)


def _whose(gpu: GpuView, rank: str | None, other: bool, readable: bool) -> Whose:
    if other:
        return Whose.FOREIGN
    if rank is not None:
        return Whose.RANK
    # Not another's: the server's when kvtop can see it, or when it stands for the rank on a
    # GPU of the server's (process_owner's rules 2 and 3); otherwise no claim either way.
    return Whose.SERVER if readable or gpu.ranks else Whose.UNKNOWN


class ProcessRows(tuple[ProcessRow, ...]):
    """The rows, and how many GPUs NVML lists (the summary's "on 7 of 8 GPUs")."""

    gpu_count: int

    def __new__(cls, rows: Iterable[ProcessRow], gpu_count: int) -> ProcessRows:
        made = super().__new__(cls, rows)
        made.gpu_count = gpu_count
        return made


def lost_words(sample: GpuSample) -> str:
    """Why NVML cannot read the GPU, in its words: "cannot be read through NVML (handle:
    Unknown Error, code 999)"; "lost (fallen off the bus)"."""
    if sample.status == GpuStatus.LOST:
        return "lost (fallen off the bus)"
    if sample.cause is not None:
        why = f"{sample.cause[0]}: {sample.cause[1]}"
    else:
        why = "; ".join(f"{name}: {error}" for name, error in sample.field_errors[:3])
    why = " ".join(make_visible(why).split())  # the library's words, on one line, visible
    lib = sample.vendor.library
    return f"cannot be read through {lib} ({why})" if why else f"cannot be read through {lib}"


def _lost_rows(gpu: GpuView, words: str) -> list[ProcessRow]:
    """A lost GPU's rows when NVML lists no process on it: one per rank the log places there,
    else one that says only that it cannot be read."""
    return [
        ProcessRow(
            gpu=gpu.sample.index,
            pid=None,
            user=None,
            gpu_memory_gib=None,
            cpu_percent=None,
            rss_gib=None,
            elapsed_s=None,
            command=None,
            rank=rank,
            whose=Whose.RANK if rank is not None else Whose.UNKNOWN,
            readable=False,
            lost=words,
        )
        for rank in (gpu.ranks or (None,))
    ]


def row_order(row: ProcessRow) -> tuple[int, int, str]:
    """GPU, then pid (a lost GPU's rows first on it, by rank): the order ties fall back to."""
    return (row.gpu, -1 if row.pid is None else row.pid, row.rank or "")


def process_rows(snapshot: Snapshot) -> ProcessRows:
    """Every GPU process of the snapshot, by GPU index then pid; a lost GPU's rows with them."""
    rows = []
    orphans = orphan_pids(snapshot)
    for gpu in snapshot.gpus:
        lost = lost_words(gpu.sample) if gpu.lost else None
        if lost is not None and not gpu.processes:
            rows.extend(_lost_rows(gpu, lost))
        for p in gpu.processes:
            elapsed = None
            if p.started_at is not None:
                elapsed = max(0.0, snapshot.taken_at - p.started_at)
            rows.append(
                ProcessRow(
                    gpu=gpu.sample.index,
                    pid=p.pid,
                    user=p.user,
                    gpu_memory_gib=p.used_gib,
                    cpu_percent=p.cpu_percent,
                    rss_gib=p.rss_gib,
                    elapsed_s=elapsed,
                    command=p.command,
                    rank=p.rank,
                    whose=_whose(gpu, p.rank, p.other, p.readable),
                    readable=p.readable,
                    lost=lost,
                    orphan=p.pid in orphans,
                )
            )
    return ProcessRows(sorted(rows, key=row_order), len(snapshot.gpus))


# `o` cycles through these. GPU memory first, the largest on top, as nvitop; CPU, host memory
# and time the largest first (htop's habit); GPU, pid and user ascending.
ORDERS = OrderCycle(
    ColumnOrder("gpu_memory", descending=True),
    ColumnOrder("cpu", descending=True),
    ColumnOrder("rss", descending=True),
    ColumnOrder("time", descending=True),
    ColumnOrder("gpu", descending=False),
    ColumnOrder("pid", descending=False),
    ColumnOrder("user", descending=False),
)
ORDER_KEYS = ORDERS.keys
DEFAULT_ORDER = ORDERS.default
order_named = ORDERS.named
next_order = ORDERS.after  # the order after a key in the cycle (GPU memory after the last one)


def _number(row: ProcessRow, key: str) -> float | None:
    if key == "gpu_memory":
        return row.gpu_memory_gib
    if key == "cpu":
        return row.cpu_percent
    if key == "rss":
        return row.rss_gib
    if key == "time":
        return row.elapsed_s
    if key == "gpu":
        return float(row.gpu)
    return None if row.pid is None else float(row.pid)


def sorted_rows(rows: Sequence[ProcessRow], key: str) -> tuple[ProcessRow, ...]:
    """ROWS in `key`'s order; rows without the value (unreadable, no figure) last; ties by
    GPU, then pid, so the order never flickers between refreshes."""
    order = order_named(key)
    if order.key == "user":

        def by_user(row: ProcessRow) -> tuple[int, str, tuple[int, int, str]]:
            return (row.user is None, row.user or "", row_order(row))

        return tuple(sorted(rows, key=by_user))
    return sorted_by_number(rows, order, lambda row: _number(row, order.key), row_order)
