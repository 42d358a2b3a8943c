"""The SGLang rank each GPU process's title names, read straight from /proc/<pid>/cmdline: what
the live view's first frame shows in the rank column before psutil and the process records
(tui/kvtop/sources/gpu_processes.py, which read the same title with the rest) are imported."""

from __future__ import annotations

from collections.abc import Iterable

from kvtop.sglang.process_title import rank_from_title

CMDLINE_BYTES = 4096  # a title is argv[0]; the rest of a long command line is not needed


def title_rank(pid: int) -> str | None:
    """The rank PID's title names (its argv[0], where setproctitle writes it, spaces and all);
    None for another process, or one gone or hidden from this user (another PID namespace,
    hidepid)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv0 = f.read(CMDLINE_BYTES).split(b"\0", 1)[0]
    except OSError:
        return None
    return rank_from_title(argv0.decode("utf-8", errors="replace"))


def title_ranks(pids: Iterable[int]) -> dict[int, str]:
    """pid -> the rank its title names, for the pids that name one."""
    found = {}
    for pid in set(pids):
        rank = title_rank(pid)
        if rank is not None:
            found[pid] = rank
    return found
