"""One immutable Snapshot per refresh: GPUs, ranks, startup analysis, metrics and source health.

Every view draws from a Snapshot and nothing else; it is built once per beat
(tui/kvtop/model/build_snapshot.py) and never changed after.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtop.model.memory.gpu_memory import RankMapping

# The GPU views live in a module of their own (the live view draws its first frame with them
# before the rest of the model is imported); named here too, where every view looks for them.
from kvtop.model.memory.gpu_view import GpuProcessView as GpuProcessView
from kvtop.model.memory.gpu_view import GpuView as GpuView
from kvtop.model.memory.gpu_view import ProcessUsage as ProcessUsage
from kvtop.model.mismatch import Mismatch
from kvtop.model.notes import OTHER, Note
from kvtop.model.retractions import Retractions
from kvtop.model.server_target import ServerTarget
from kvtop.model.startup_analysis import Analysis
from kvtop.model.str_enum import StrEnum
from kvtop.model.verdict import UNJUDGED, Seen, Verdict
from kvtop.sglang.metrics import MetricsSample, ServerInfo


class SourceState(StrEnum):
    """A source's state: reading, reading with a fault (degraded) or not reading (off)."""

    OK = "ok"
    DEGRADED = "degraded"
    OFF = "off"

    @property
    def mark(self) -> str:
        return MARKS[self]


# Each source's marker in the status line, the help and the report (readable without colour).
# The colours are the stylesheet's: styles/kvtop.tcss names each state's once ($source-ok, ...).
MARKS = {SourceState.OK: "●", SourceState.DEGRADED: "◐", SourceState.OFF: "○"}


UNREACHABLE = "unreachable"
# Connected, but no answer within the fetch limit: overloaded or hung, not gone.
SLOW = "slow"
METRICS_DISABLED = "metrics_disabled"
# /metrics 404 while the log says the server runs with --enable-metrics: another service's port.
METRICS_AGAINST_LOG = "metrics_against_log"
ANSWERED = "answered"
NOT_YET = "not_yet"  # no reading asked for yet (the first scrape is on its way)


@dataclass(frozen=True, slots=True)
class SourceHealth:
    """One input's state: ok, degraded (with the reason) or off (with the reason)."""

    name: str
    state: SourceState
    detail: str | None = None
    # Seconds since this source's last good reading (None: none yet, or not tracked).
    age_s: float | None = None
    # Off because the user asked for it (--no-gpus, no log given): not a fault.
    asked_off: bool = False
    # Why a server source gives no numbers, when it matters to the verdict: UNREACHABLE (no
    # answer at all), METRICS_DISABLED (/metrics 404: no --enable-metrics), ANSWERED (the
    # server answered, but not with numbers: a refused key, a 5xx, another service), NOT_YET
    # (nothing asked yet).
    cause: str | None = None

    def __post_init__(self) -> None:
        # A state given as its word ("ok") becomes the SourceState, so `state.mark` holds.
        object.__setattr__(self, "state", SourceState(self.state))


@dataclass(frozen=True, slots=True)
class HostMemory:
    """Host RAM in decimal GB, the unit of SGLang's hierarchical-cache lines."""

    total_gb: float
    used_gb: float
    available_gb: float
    # The host line of the processes view, as nvitop's: CPU busy since the previous reading
    # (% of all cores; None before a second reading) and swap (None: not read).
    cpu_percent: float | None = None
    swap_total_gb: float | None = None
    swap_used_gb: float | None = None

    @property
    def memory_pct(self) -> float | None:
        """RAM in use (total − available), % of total: `free`'s and nvitop's MEM."""
        return 100.0 * self.used_gb / self.total_gb if self.total_gb > 0 else None

    @property
    def swap_pct(self) -> float | None:
        """Swap in use, % of swap; None when not read, 0 when the host has no swap."""
        if self.swap_total_gb is None or self.swap_used_gb is None:
            return None
        return 100.0 * self.swap_used_gb / self.swap_total_gb if self.swap_total_gb > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Snapshot:
    taken_at: float
    analysis: Analysis
    gpus: tuple[GpuView, ...]
    rank_mapping: RankMapping
    metrics: MetricsSample | None
    server_info: ServerInfo | None
    host: HostMemory | None
    sources: tuple[SourceHealth, ...]
    notes: tuple[str, ...] = ()
    driver_version: str | None = None
    server: ServerTarget | None = None  # the server scraped (None in the demo)
    # Facts on which the log and /server_info or /metrics disagree (tui/kvtop/model/status/identity.py).
    mismatches: tuple[Mismatch, ...] = ()
    # The model's notes with their kinds (collapsed); `notes` holds their sentences (JSON).
    note_items: tuple[Note, ...] = ()
    # The one judgement every view shows, and what kvtop saw change before it
    # (tui/kvtop/model/status/watch.py; set by build_snapshot).
    verdict: Verdict = UNJUDGED
    timeline: tuple[Seen, ...] = ()
    # The log is this host's own (its journal read here, or the demo); see `log_here`.
    log_from_this_host: bool = False
    # Ranks the log placed on this host that have no GPU here (NVML sees fewer GPUs).
    missing_ranks: tuple[str, ...] = ()
    # Requests retracted while serving, counted and rated as of this snapshot
    # (tui/kvtop/model/retractions.py; set by build_snapshot). None: no source knows of them.
    retractions: Retractions | None = None

    @property
    def log_here(self) -> bool:
        """The log comes from this host: its journal is read here, or the server's processes
        run on this host's GPUs. Only then is it compared with this host's RAM."""
        return self.log_from_this_host or self.rank_mapping == RankMapping.PROCESS

    @property
    def kinded_notes(self) -> tuple[Note, ...]:
        """Every note with a kind: the model's, then sentences added without one (kind other)."""
        known = {n.text for n in self.note_items}
        return self.note_items + tuple(Note(OTHER, t) for t in self.notes if t not in known)

    @property
    def trusted_metrics(self) -> MetricsSample | None:
        """The scrape, unless it is about another server than the log (then the log's own
        numbers stand in, labelled: tui/kvtop/model/kv_usage.py)."""
        if any(m.source == "metrics" for m in self.mismatches):
            return None
        return self.metrics

    @property
    def host_kv_total_gb(self) -> float | None:
        sizes = [r.host_kv_gb for r in self.analysis.ranks if r.host_kv_gb is not None]
        return round(sum(sizes), 2) if sizes else None
