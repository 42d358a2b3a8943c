"""The process table in one line for the overview ("9 processes on 8 GPUs, 1 foreign: python3
train.py 4.00 GiB on GPU 2"), the sentence naming a foreign process, and the host's CPU, RAM
and swap in one line as nvitop shows them."""

from __future__ import annotations

from collections.abc import Sequence

from kvtop import fmt
from kvtop.model.notes import gpu_span
from kvtop.model.processes.table import ProcessRow, ProcessRows, row_order
from kvtop.model.snapshot import HostMemory

SHORT_COMMAND = 32  # characters of a foreign command named in a sentence


def short_command(row: ProcessRow) -> str:
    """The command as a sentence names it: its words up to SHORT_COMMAND characters, or the
    pid when it cannot be read here."""
    if not row.readable or not row.command:
        return f"pid {row.pid}"
    command = row.command
    return command if len(command) <= SHORT_COMMAND else command[: SHORT_COMMAND - 1] + "…"


def foreign_sentence(row: ProcessRow) -> str:
    """ "python3 train.py 4.00 GiB on GPU 2" (the memory unknown: "python3 train.py on GPU 2")."""
    held = f" {fmt.gib(row.gpu_memory_gib, 2)} GiB" if row.gpu_memory_gib is not None else ""
    return f"{short_command(row)}{held} on GPU {row.gpu}"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 'es' if word.endswith('s') else 's'}"


def processes_summary(rows: Sequence[ProcessRow]) -> str:
    """The overview's line: how many processes on how many GPUs, the foreign ones (the largest
    named), the GPUs NVML cannot read ("7 processes on 7 of 8 GPUs; GPU 3 cannot be read": a
    lost GPU is counted, never taken for one with nothing on it) and how many processes cannot
    be read here."""
    if not rows:
        return "no process on the GPUs (NVML lists none)"
    listed = [r for r in rows if r.pid is not None]
    pids = {r.pid for r in listed}
    gpus = {r.gpu for r in listed}
    lost = {r.gpu for r in rows if r.lost}
    if lost:
        count = rows.gpu_count if isinstance(rows, ProcessRows) else len(gpus | lost)
        if count <= len(lost):
            every = f"GPU {gpu_span(lost)}"
            return f"none of the {_plural(count, 'GPU')} can be read through NVML ({every})"
        if pids:
            text = f"{_plural(len(pids), 'process')} on {len(gpus)} of {_plural(count, 'GPU')}"
        else:
            others = count - len(lost)
            text = "no process on the other " + (f"{others} GPUs" if others > 1 else "GPU")
    else:
        text = f"{_plural(len(pids), 'process')} on {_plural(len(gpus), 'GPU')}"
    foreign = [r for r in listed if r.foreign]
    if foreign:
        largest = min(foreign, key=lambda r: (-(r.gpu_memory_gib or 0.0), row_order(r)))
        many = len({r.pid for r in foreign})
        lead = f"{many} foreign" + (", the largest" if many > 1 else "")
        text += f", {lead}: {foreign_sentence(largest)}"
    if lost:
        text += f"; GPU {gpu_span(lost)} cannot be read"
    unreadable = len({r.pid for r in listed if not r.readable})
    if unreadable:
        text += f"; {unreadable} unreadable here"
    return text


def host_line(host: HostMemory | None) -> str:
    """ "CPU 12.3%  MEM 37.5% (412.6/1,099.5 GB)  SWP 0.0% (0.0/8.0 GB)"; unknowns as —."""
    if host is None:
        return "host: CPU, memory and swap cannot be read now"
    mem = f"MEM {fmt.pct(host.memory_pct, 1)} ({fmt.number(host.used_gb, 1)}/"
    mem += f"{fmt.number(host.total_gb, 1)} GB)"
    swap = f"SWP {fmt.pct(host.swap_pct, 1)}"
    if host.swap_total_gb is not None and host.swap_used_gb is not None:
        swap += f" ({fmt.number(host.swap_used_gb, 1)}/{fmt.number(host.swap_total_gb, 1)} GB)"
    return f"CPU {fmt.pct(host.cpu_percent, 1)}  {mem}  {swap}"
