"""Whether the server is still there, by NVML's own accounting, whatever its log last said.

A server killed without a word in its log (SIGKILL, the OOM killer, a node reboot) leaves a log
that still says ready. NVML tells: its processes are gone from every GPU it ran on and their
memory is released. Pure: judged from the GPUs' readings joined with the log by rank.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kvtop.model.memory.gpu_reading import GpuStatus
from kvtop.model.memory.rank_memory import MemoryBreakdown
from kvtop.model.snapshot import GpuView
from kvtop.sglang.start_state import READY, STARTING, Startup

# Without the log's weights for a rank: memory under this share of the card is "released" (a
# CUDA context alone takes about 0.5 GiB of 141).
RELEASED_SHARE = 0.05


def _released(gpu: GpuView, breakdown: MemoryBreakdown | None) -> bool:
    """NVML sees less in use than the rank's weights alone would take."""
    sample = gpu.sample
    weights = breakdown.weights_gib if breakdown is not None else None
    if weights:
        return sample.used_gib < weights
    return sample.used_gib < RELEASED_SHARE * sample.total_gib


def gpus_text(indexes: Sequence[int]) -> str:
    """`GPUs 0–7`, `GPU 3`, `GPUs 1, 5`: sorted indexes as a sentence names them."""
    if len(indexes) > 2 and list(indexes) == list(range(indexes[0], indexes[-1] + 1)):
        return f"GPUs {indexes[0]}–{indexes[-1]}"
    return ("GPU " if len(indexes) == 1 else "GPUs ") + ", ".join(map(str, indexes))


def server_gone(
    startup: Startup, gpus: Sequence[GpuView], breakdowns: Mapping[str, MemoryBreakdown]
) -> str | None:
    """The sentence saying the server is gone, when the log says it is ready (or starting with
    memory already taken) yet every GPU with one of its ranks is read, runs none of its
    processes and has released its memory; else None (nothing known against the log)."""
    loaded = any(b.weights_gib for b in breakdowns.values())
    if not (startup.state == READY or (startup.state == STARTING and loaded)):
        return None
    mine = [g for g in gpus if g.ranks]
    if not mine:
        return None  # no GPU of the server's is read here: nothing to judge by
    for gpu in mine:
        if gpu.sample.status != GpuStatus.OK:
            return None
        if any(name == "processes" for name, _ in gpu.sample.field_errors):
            return None  # the process list could not be read
        if any(not p.other for p in gpu.processes):
            return None
        log = breakdowns.get(gpu.ranks[0]) if len(gpu.ranks) == 1 else None
        if not _released(gpu, log):
            return None
    where = gpus_text(sorted(g.sample.index for g in mine))
    return (
        f"its processes are gone from {where} and their memory is released (NVML); the log "
        "does not say how it ended: check journalctl -u UNIT and dmesg"
    )
