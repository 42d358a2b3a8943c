"""Headroom: the memory that stays free after a ready startup, per GPU of the server's.

One selection for every place that reports it (`kvtop --check`'s headroom, the exporter's
kvtop_kv_headroom_bytes): each GPU that runs a rank of the server and that NVML reads now; when
no such GPU is read, what the log says stayed free on its reference rank. Nothing before the
startup is ready.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtop.model.memory.gpu_reading import GpuStatus
from kvtop.model.snapshot import GpuView, Snapshot
from kvtop.sglang.start_state import READY


@dataclass(frozen=True, slots=True)
class Headroom:
    free_gib: float
    gpu: GpuView | None  # None: from the log (no GPU of the server's read now)
    rank: str  # the GPU's ranks ("TP0,TP1" when shared), or the log's reference rank


def headrooms(snapshot: Snapshot) -> list[Headroom]:
    """Every GPU's headroom (see the module's docstring); empty before ready or unknown."""
    if snapshot.analysis.startup.state != READY:
        return []
    found = [
        Headroom(g.sample.free_gib, g, ",".join(g.ranks))
        for g in snapshot.gpus
        if g.ranks and g.sample.status == GpuStatus.OK
    ]
    explanation = snapshot.analysis.explanation
    if not found and explanation is not None and explanation.free_after_startup_gib is not None:
        found.append(Headroom(explanation.free_after_startup_gib, None, explanation.rank))
    return found


def least_headroom_gib(snapshot: Snapshot) -> float | None:
    """The least headroom (the worst GPU), None before ready or when nothing tells."""
    return min((h.free_gib for h in headrooms(snapshot)), default=None)
