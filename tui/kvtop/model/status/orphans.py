"""Orphans: SGLang's own processes still holding GPU memory with no server running them.

After a crash or a stop, a scheduler (`sglang::scheduler_TP0`), the detokenizer or the data
parallel controller can outlive its server and keep its memory: the next start then sizes its
KV cache around memory nobody uses, or fails. A GPU process (NVML's list) is an orphan when its
title is SGLang's (`sglang::…`, set by SGLang for these children) and
- its parent is PID 1 or a subreaper (the server's main process that started it is gone), or
- the log says the server stopped (its shutdown finished) or failed, and the process started
  before the log's last word on it (a process started later belongs to another start).

kvtop never signals anything: the words give the command that would end them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from kvtop import fmt
from kvtop.model.snapshot import GpuProcessView, Snapshot
from kvtop.model.status.levels import Alert, Level
from kvtop.model.status.liveness import gpus_text
from kvtop.sglang.start_state import FAILED, STARTING, STOPPED, Startup

SGLANG_TITLE = "sglang::"  # the titles SGLang sets for its scheduler, detokenizer, DP controller
KILL_GRACE_S = 10  # seconds to wait after `kill` before `kill -9`
_MAX_NAMED = 8  # orphans named one by one in the alert's words


@dataclass(frozen=True, slots=True)
class Orphan:
    """One orphan on one GPU (JSON `orphans[]`): its pid, GPU, GiB held (None: NVML gives no
    figure), seconds since it started (None: unknown), its title and the command that ends it."""

    pid: int
    gpu: int
    gib: float | None
    age_s: float | None
    title: str
    kill: str


@dataclass(frozen=True, slots=True)
class LogEnd:
    """Whether the log says the server ended (stopped with its shutdown done, not still
    draining; or failed) and when (None: untimed)."""

    ended: bool
    at: datetime | None = None


def log_end(startup: Startup) -> LogEnd:
    if startup.state == STOPPED and not (startup.drain_remaining and not startup.shutdown_finished):
        return LogEnd(True, startup.stopped_at or startup.last_time)
    if startup.state == FAILED:
        return LogEnd(True, startup.last_time)
    return LogEnd(False)


def is_orphan(process: GpuProcessView, end: LogEnd) -> bool:
    """PROCESS is SGLang's own child process with no server running it (the rule above)."""
    title = process.command
    if title is None or not title.startswith(SGLANG_TITLE):
        return False
    if process.adopted:
        return True
    if not end.ended:
        return False
    if end.at is None or process.started_at is None:
        return True  # no time to tell by: the log's word stands
    # SGLang stamps its lines in local time without a zone, as datetime.timestamp() reads them;
    # a process started after the log's last word belongs to another start.
    return process.started_at <= end.at.timestamp()


def kill_command(pids: Sequence[int]) -> str:
    """`kill 4101 4102`, then `kill -9` for any still there after the grace."""
    listed = " ".join(str(p) for p in sorted(set(pids)))
    return f"kill {listed} (then kill -9 {listed} if still there after {KILL_GRACE_S} s)"


def find_orphans(snapshot: Snapshot) -> tuple[Orphan, ...]:
    """Every orphan on the GPUs, by GPU then pid."""
    end = log_end(snapshot.analysis.startup)
    found = []
    for gpu in snapshot.gpus:
        for p in gpu.processes:
            if not is_orphan(p, end):
                continue
            age = None if p.started_at is None else max(0.0, snapshot.taken_at - p.started_at)
            gib = None if p.used_gib is None else round(p.used_gib, 2)
            found.append(
                Orphan(p.pid, gpu.sample.index, gib, age, p.command or "", f"kill {p.pid}")
            )
    return tuple(sorted(found, key=lambda o: (o.gpu, o.pid)))


def orphan_pids(snapshot: Snapshot) -> frozenset[int]:
    return frozenset(o.pid for o in find_orphans(snapshot))


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "age unknown"
    whole = int(seconds)
    if whole >= 86400:
        return f"up {whole // 86400}d {whole % 86400 // 3600}h"
    if whole >= 3600:
        return f"up {whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"up {whole // 60}m{whole % 60:02d}s"


def orphan_words(orphan: Orphan) -> str:
    """`sglang::scheduler_TP0 pid 4101 on GPU 0, 70.00 GiB, up 2h05m`."""
    held = f", {fmt.gib(orphan.gib, 2)} GiB" if orphan.gib is not None else ""
    return f"{orphan.title} pid {orphan.pid} on GPU {orphan.gpu}{held}, {_age(orphan.age_s)}"


def orphans_alert(snapshot: Snapshot, orphans: Sequence[Orphan]) -> Alert | None:
    """A warning naming the orphans and the command that ends them; critical when the log's
    server is starting on a GPU they hold: SGLang sizes its KV cache from the free memory it
    sees at startup, so their memory comes off the new pool, or the start fails outright."""
    if not orphans:
        return None
    startup = snapshot.analysis.startup
    starting = (
        {g.sample.index for g in snapshot.gpus if g.ranks} if startup.state == STARTING else set()
    )
    blocking = sorted({o.gpu for o in orphans if o.gpu in starting})
    held = sum(o.gib for o in orphans if o.gib is not None)
    pids = {o.pid for o in orphans}
    named = "; ".join(orphan_words(o) for o in orphans[:_MAX_NAMED])
    more = f"; and {len(orphans) - _MAX_NAMED} more" if len(orphans) > _MAX_NAMED else ""
    count = f"{len(pids)} SGLang process{'es' if len(pids) != 1 else ''}"
    text = (
        f"{count} with no server running {'them' if len(pids) != 1 else 'it'} still "
        f"hold{'s' if len(pids) == 1 else ''} {fmt.gib(held, 2)} GiB of GPU memory: {named}{more}"
    )
    if blocking:
        text += f"; the starting server needs that memory on {gpus_text(blocking)}"
        level = Level.CRITICAL
    else:
        level = Level.WARNING
    text += f". End them: {kill_command(sorted(pids))}"
    return Alert(level, "orphans", text, "GPU processes")
