"""The process table's rows: every process on the GPUs with its GPU memory, what it uses on the
host, whose it is (a rank of the server, the server's, foreign), and the orders `o` cycles.

One row per process and GPU, as NVML lists them and nvitop shows them: a process on two GPUs
has two rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvtop.model.snapshot import GpuView, Snapshot
from kvtop.model.str_enum import StrEnum


class Whose(StrEnum):
    """Whose a GPU process is (tui/kvtop/model/memory/process_owner.py decides)."""

    RANK = "rank"  # the server's, its title names a rank (the row shows the rank)
    SERVER = "server"  # the server's, without a rank (its main process, a child)
    FOREIGN = "foreign"  # not the server's
    UNKNOWN = "unknown"  # cannot be told: not readable here, on a GPU without a rank


@dataclass(frozen=True, slots=True)
class ProcessRow:
    """One process on one GPU. None: unknown (the host cannot read it, or NVML gave no
    figure); `elapsed_s`: since it started, at the snapshot's time."""

    gpu: int
    pid: int
    user: str | None
    gpu_memory_gib: float | None
    cpu_percent: float | None
    rss_gib: float | None
    elapsed_s: float | None
    command: str | None
    rank: str | None
    whose: Whose
    readable: bool

    @property
    def foreign(self) -> bool:
        return self.whose == Whose.FOREIGN

    @property
    def whose_word(self) -> str:
        """What the table's WHOSE column says: the rank, server, foreign or ?."""
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


def process_rows(snapshot: Snapshot) -> tuple[ProcessRow, ...]:
    """Every GPU process of the snapshot, by GPU index then pid."""
    rows = []
    for gpu in snapshot.gpus:
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
                )
            )
    return tuple(sorted(rows, key=lambda r: (r.gpu, r.pid)))


@dataclass(frozen=True, slots=True)
class ProcessOrder:
    """One way to sort the table: the column it sorts by and which end comes first."""

    key: str  # a column's key (tui/kvtop/model/processes/columns.py)
    descending: bool

    @property
    def arrow(self) -> str:
        return "▼" if self.descending else "▲"


# `o` cycles through these. GPU memory first, the largest on top, as nvitop; CPU, host memory
# and time the largest first (htop's habit); GPU, pid and user ascending.
ORDERS = (
    ProcessOrder("gpu_memory", descending=True),
    ProcessOrder("cpu", descending=True),
    ProcessOrder("rss", descending=True),
    ProcessOrder("time", descending=True),
    ProcessOrder("gpu", descending=False),
    ProcessOrder("pid", descending=False),
    ProcessOrder("user", descending=False),
)
ORDER_KEYS = tuple(o.key for o in ORDERS)
DEFAULT_ORDER = ORDERS[0].key


def order_named(key: str) -> ProcessOrder:
    return next((o for o in ORDERS if o.key == key), ORDERS[0])


def next_order(key: str) -> str:
    """The order after `key` in the cycle (GPU memory after the last one)."""
    position = ORDER_KEYS.index(key) if key in ORDER_KEYS else -1
    return ORDER_KEYS[(position + 1) % len(ORDER_KEYS)]


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
    return float(row.pid)


def sorted_rows(rows: Sequence[ProcessRow], key: str) -> tuple[ProcessRow, ...]:
    """ROWS in `key`'s order; rows without the value (unreadable, no figure) last; ties by
    GPU, then pid, so the order never flickers between refreshes."""
    order = order_named(key)
    if order.key == "user":

        def by_user(row: ProcessRow) -> tuple[int, str, int, int]:
            return (row.user is None, row.user or "", row.gpu, row.pid)

        return tuple(sorted(rows, key=by_user))
    sign = -1.0 if order.descending else 1.0

    def by_number(row: ProcessRow) -> tuple[int, float, int, int]:
        value = _number(row, order.key)
        if value is None:
            return (1, 0.0, row.gpu, row.pid)
        return (0, sign * value, row.gpu, row.pid)

    return tuple(sorted(rows, key=by_number))
