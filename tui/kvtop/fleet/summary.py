"""The fleet's numbers per host and per deployment, as every fleet view shows them (pure).

One place for the arithmetic of the fleet table, the `--once` text, the JSON and `--check`:
bytes to GiB, the KV usage in percent, the worst headroom (the least kvtop_kv_headroom_bytes
of a host's GPUs, what `--check` calls headroom), a deployment's state from its hosts' states.
Unknown stays None, never 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kvtop.export.families import STATES
from kvtop.fleet.model import AMD, DCGM, Deployment, FleetGpu, FleetHost

GIB = float(1 << 30)
GB = 1e9  # host RAM in decimal GB, the unit of SGLang's hierarchical-cache lines (kvtop/1 too)
# A deployment's state from its hosts': the first of these that any host is in.
_STATE_ORDER = ("failed", "stopped", "starting", "waiting", "ready")
assert set(_STATE_ORDER) == set(STATES)


def gib(value_bytes: float | None) -> float | None:
    return None if value_bytes is None else value_bytes / GIB


def gb(value_bytes: float | None) -> float | None:
    return None if value_bytes is None else value_bytes / GB


@dataclass(frozen=True, slots=True)
class Headroom:
    gib: float
    gpu: int | None  # the GPU with the least headroom (None: from the log, no GPU read)
    rank: str | None = None  # with gpu None: the log's reference rank

    @property
    def where(self) -> str:
        """ "GPU 5", or "TP0 (the log's reference rank)" when kvtop there reads no GPU."""
        if self.gpu is not None:
            return f"GPU {self.gpu}"
        return f"{self.rank or 'the log'} (the log's reference rank)"


# The GPU exporters as a sentence names the source of a GPU's figures.
GPU_EXPORTER_NAMES = {DCGM: "DCGM", AMD: "AMD device metrics exporter"}


def gpu_exporters_text(host: FleetHost) -> str | None:
    """ "DCGM", "AMD device metrics exporter" (both, joined, on a mixed host): the GPU
    exporters the host's GPU figures came from; None when none did."""
    names = [
        GPU_EXPORTER_NAMES[e]
        for e in GPU_EXPORTER_NAMES
        if any(g.readings_from == e for g in host.gpus)
    ]
    return " and ".join(names) or None


def gpu_used_bytes(gpu: FleetGpu) -> float | None:
    """In use: DCGM's used (with reserved) or AMD's exporter's used, else total − free."""
    if gpu.used_bytes is not None:
        return gpu.used_bytes
    free = gpu_free_bytes(gpu)
    if gpu.total_bytes is not None and free is not None:
        return max(0.0, gpu.total_bytes - free)
    return None


def gpu_free_bytes(gpu: FleetGpu) -> float | None:
    if gpu.free_bytes is not None:
        return gpu.free_bytes
    return gpu.segments_bytes.get("free")


def worst_headroom(host: FleetHost) -> Headroom | None:
    """The least headroom of the host's GPUs (kvtop_kv_headroom_bytes: free after a ready
    startup); None without a kvtop exporter or before ready."""
    known = [(g.headroom_bytes, g.index) for g in host.gpus if g.headroom_bytes is not None]
    if not known:
        if host.log_headroom_bytes is None:
            return None
        return Headroom(host.log_headroom_bytes / GIB, None, host.log_headroom_rank)
    least, index = min(known)
    return Headroom(least / GIB, index)


def kv_usage_pct(host: FleetHost) -> float | None:
    """SGLang's token_usage (0..1) as a percentage."""
    usage = host.kv.token_usage
    return None if usage is None or usage != usage else 100 * usage


def memory_gib(host: FleetHost) -> tuple[float | None, float | None]:
    """(used, total) GiB over the host's GPUs; None when a GPU's number is missing."""
    used = [gpu_used_bytes(g) for g in host.gpus]
    total = [g.total_bytes for g in host.gpus]
    return _sum_gib(used), _sum_gib(total)


def _sum_gib(values: list[float | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None) / GIB


def deployment_state(deployment: Deployment) -> str | None:
    """The worst state of its hosts (failed, stopped, starting, waiting, ready); None when no
    host has a kvtop exporter to say."""
    states = {h.state for h in deployment.hosts if h.state is not None}
    return next((s for s in _STATE_ORDER if s in states), None)


def deployment_kv_usage_pct(deployment: Deployment) -> float | None:
    """The fullest KV pool of its hosts (in a multi-node deployment only node 0 has SGLang's
    metrics)."""
    return _max(kv_usage_pct(h) for h in deployment.hosts)


def deployment_headroom(deployment: Deployment) -> tuple[str, Headroom] | None:
    """(host, headroom) of the host with the least headroom."""
    found = [(h.host, room) for h in deployment.hosts if (room := worst_headroom(h)) is not None]
    return min(found, key=lambda pair: pair[1].gib) if found else None


def deployment_restarts(deployment: Deployment) -> int | None:
    """The most restarts any of its hosts' kvtop counted (the nodes restart together)."""
    counts = [h.restarts for h in deployment.hosts if h.restarts is not None]
    return max(counts) if counts else None


def missing_node_ranks(deployment: Deployment) -> tuple[int, ...]:
    """Node ranks 0..nnodes−1 no host of this deployment reports (nnodes known)."""
    if not deployment.nnodes or deployment.nnodes <= 1:
        return ()
    seen = {h.node_rank for h in deployment.hosts}
    return tuple(r for r in range(deployment.nnodes) if r not in seen)


def shape_text(tp: int | None, dp: int | None, pp: int | None) -> str:
    """`TP16` / `TP8 DP2` / `TP4 PP2`: the parts that are known and not 1 (TP always)."""
    parts = [f"TP{tp}" if tp is not None else "TP?"]
    parts += [f"{name}{n}" for name, n in (("DP", dp), ("PP", pp)) if n is not None and n != 1]
    return " ".join(parts) if tp is not None or len(parts) > 1 else "—"


def _max(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None
