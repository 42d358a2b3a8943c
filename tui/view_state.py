"""What the screens show: the app's one view state, the status line's facts, the selected GPU.

No Textual here: the app owns one ViewState, changes it, and hands it to the visible screens
through `show_state` (tui/screens/base.py). Screens read it and never write it; they ask the
app for a change with a message (tui/screens/base.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

from tui.model.alerts import (
    DEFAULT_THRESHOLDS,
    OK,
    Thresholds,
    kv_usage_level,
    queue_level,
)
from tui.model.deployment import DEGRADED, GpuView, Snapshot, SourceHealth
from tui.model.deployment import OK as SOURCE_OK
from tui.model.formula import format_version
from tui.model.freshness import is_fresh, stale_after_s, stale_age_s
from tui.model.gpu_order import sorted_gpus
from tui.model.history import History, Series
from tui.model.kv_usage import KvUsage, kv_usage, source_text
from tui.model.server_status import (
    deployment_facts,
    duration_text,
    header_state,
    server_status,
)

INTERVALS_S = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
AUTO_COMPACT_BELOW_ROWS = 34


@dataclass(frozen=True, slots=True)
class StatusFacts:
    """What the status line shows, formatted from the model."""

    left: tuple[str, ...]  # host and log source, before the state
    state: str
    state_kind: str  # "ready", "starting", "failed", "waiting"
    sources: tuple[SourceHealth, ...]
    paused: bool
    interval_s: float
    demo: bool
    facts: tuple[str, ...] = ()  # SGLang version, model, parallelism, after the state
    # The state's alert level (tui/model/alerts.py): not ok when the server has stopped
    # answering, its sources disagree or a GPU is lost (tui/model/server_status.header_state).
    level: str = OK
    # Beside each source's marker: its age once older than three refresh intervals ("3m05s").
    source_ages: tuple[str | None, ...] = ()


@dataclass(frozen=True, slots=True)
class KvFacts:
    """What the KV panel shows: the usage, where it comes from and how old, alert levels."""

    usage: KvUsage
    series: Series
    source: str | None  # "log decode batch line 09:03:07, 4m05s old"; None: fresh metrics
    usage_level: str = OK  # KV usage against the thresholds (ok unless the usage is current)
    queue_level: str = OK  # requests queued without a break, against the thresholds
    queued_for_s: float | None = None


@dataclass
class ViewState:
    """What the screens show; the app owns it and is the only one to change it."""

    source_label: str
    demo: bool = False
    snapshot: Snapshot | None = None  # what is on screen (frozen while paused)
    latest: Snapshot | None = None  # what the sources delivered last
    history: History = field(default_factory=History)
    paused: bool = False
    interval_s: float = 1.0
    compact: bool | None = None  # None: decided by the terminal height
    rows: int = 0  # the terminal's height, for the automatic compact mode
    request_len: int | None = None
    host_name: str = ""
    problem: str | None = None
    # The selected GPU, by NVML index: the overview's highlighted row, the GPU in GPU detail,
    # the rank the formula opens on. None: the first GPU.
    selected_gpu: int | None = None
    status: StatusFacts | None = None  # kept current by the app at every change
    kv: KvFacts | None = None  # likewise
    # Where values turn warning / critical (tui/model/alerts.py; the config file sets them).
    thresholds: Thresholds = DEFAULT_THRESHOLDS
    # Kinds of advisory notes the operator dismissed (d): shown in the help view only.
    dismissed_notes: frozenset[str] = frozenset()
    # The overview's GPU order (o cycles it; tui/model/gpu_order.py): "index", "free", ...
    gpu_order: str = "index"

    @property
    def compact_now(self) -> bool:
        if self.compact is not None:
            return self.compact
        return self.rows < AUTO_COMPACT_BELOW_ROWS

    def selected_position(self) -> int:
        """Where the selected GPU is in the snapshot's list; a GPU that left the list leaves the
        selection on the nearest one before it (0 without GPUs)."""
        return position_of(self.shown_gpus(), self.selected_gpu)

    def shown_gpus(self) -> tuple[GpuView, ...]:
        """The snapshot's GPUs in the overview's order (the selection stays on its GPU)."""
        gpus = self.snapshot.gpus if self.snapshot is not None else ()
        return gpus if self.gpu_order == "index" else sorted_gpus(gpus, self.gpu_order)

    def selected_view(self) -> GpuView | None:
        """The selected GPU in the snapshot on screen, if it is there."""
        gpus = self.snapshot.gpus if self.snapshot is not None else ()
        if self.selected_gpu is None:
            return gpus[0] if gpus else None
        return next((g for g in gpus if g.sample.index == self.selected_gpu), None)

    def selected_rank(self) -> str | None:
        view = self.selected_view()
        return view.ranks[0] if view is not None and view.ranks else None


def position_of(gpus: tuple[GpuView, ...], index: int | None) -> int:
    if not gpus or index is None:
        return 0
    before = 0
    for position, gpu in enumerate(gpus):
        if gpu.sample.index == index:
            return position
        if gpu.sample.index < index:
            before = position
    return before


def step_selection(state: ViewState, step: int) -> int | None:
    """The NVML index `step` GPUs away from the selected one, clamped to the list."""
    gpus = state.shown_gpus()
    if not gpus:
        return None
    position = max(0, min(len(gpus) - 1, state.selected_position() + step))
    return gpus[position].sample.index


def next_interval(current_s: float, step: int) -> float:
    """The refresh interval `step` places away on the ladder, clamped at its ends."""
    nearest = min(range(len(INTERVALS_S)), key=lambda i: abs(INTERVALS_S[i] - current_s))
    return INTERVALS_S[max(0, min(len(INTERVALS_S) - 1, nearest + step))]


def kv_facts(state: ViewState, clock: Callable[[], float]) -> KvFacts | None:
    """The KV panel's facts from the snapshot on screen; `clock` dates a batch line (the
    log's clock is local time, as for the uptime)."""
    snapshot = state.snapshot
    if snapshot is None:
        return None
    usage = kv_usage(snapshot, state.request_len, now=datetime.fromtimestamp(clock()))
    queued_for = state.history.queued_for_s() if usage.current else None
    return KvFacts(
        usage=usage,
        series=state.history.token_usage_pct(),
        source=source_text(usage, stale_after_s(state.interval_s)),
        usage_level=kv_usage_level(usage.usage_pct, state.thresholds) if usage.current else OK,
        queue_level=queue_level(queued_for, state.thresholds),
        queued_for_s=queued_for,
    )


def _marked(health: SourceHealth, interval_s: float) -> SourceHealth:
    """The source as its marker shows it: an ok source whose last good reading is stale (a
    scrape hanging, a poll that does not return) is not drawn as ok."""
    if health.state == SOURCE_OK and health.age_s is not None and not is_fresh(health, interval_s):
        return replace(health, state=DEGRADED)
    return health


def _lost_gpus(snapshot: Snapshot) -> tuple[int, ...]:
    return tuple(g.sample.index for g in snapshot.gpus if g.sample.status == "lost")


def status_facts(state: ViewState, clock: Callable[[], float]) -> StatusFacts:
    """The status line from the snapshot on screen: host, source, version, server state."""
    snapshot = state.snapshot
    left = (state.host_name, state.source_label)
    after: list[str] = []
    kind, text, level = "waiting", "waiting for the first readings", OK
    sources: tuple[SourceHealth, ...] = ()
    if snapshot is not None:
        startup = snapshot.analysis.startup
        info = snapshot.server_info
        if info is not None and info.version:
            after.append(f"SGLang {info.version}")
        elif snapshot.analysis.version is not None:
            after.append(f"SGLang {format_version(snapshot.analysis.version, startup.version)}")
        elif startup.version.known:
            after.append(f"SGLang {startup.version.text()}")
        after.extend(deployment_facts(startup))
        status = server_status(startup, datetime.fromtimestamp(clock()))
        sources = tuple(snapshot.sources)
        header = header_state(
            status,
            sources,
            state.interval_s,
            mismatched=bool(snapshot.mismatches),
            lost_gpus=_lost_gpus(snapshot),
            gpu_count=len(snapshot.gpus),
        )
        kind, text, level = status.state, header.text, header.level
        sources = tuple(_marked(s, state.interval_s) for s in sources)
    if state.problem:
        kind, text, level = "failed", "sources stopped (see the message)", OK
    ages = (stale_age_s(s, state.interval_s) for s in sources)
    return StatusFacts(
        left=left,
        facts=tuple(after),
        state=text,
        state_kind=kind,
        sources=sources,
        paused=state.paused,
        interval_s=state.interval_s,
        demo=state.demo,
        level=level,
        source_ages=tuple(None if age is None else duration_text(age) for age in ages),
    )
