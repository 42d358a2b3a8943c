"""The watch: the verdict of each Snapshot in turn, and the timeline of what changed.

Pure and stateful (no I/O, no clock of its own: each Snapshot's `taken_at` is "now"). One watch
per session judges every Snapshot the session builds, so the live view, the exporter and a
one-shot report show the same judgement; watching over time adds what one look cannot know:
since when each alert is active, how long the queue has held requests, and the timeline
(each alert raised and cleared, each source down and back, each GPU lost and back, each
restart), bounded.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from kvtop.model.deployment_shape import rank_span
from kvtop.model.kv_usage import kv_now
from kvtop.model.retractions import RetractionReadings
from kvtop.model.snapshot import NOT_YET, Snapshot, SourceState
from kvtop.model.status.alert_rule import asked_off, queue_since
from kvtop.model.status.idle_tokens import IdleTokens
from kvtop.model.status.judge import judge, with_alerts
from kvtop.model.status.levels import DEFAULT_THRESHOLDS, Alert, Level, Thresholds
from kvtop.model.status.liveness import gpus_text
from kvtop.model.status.memory_growth import MemoryGrowthWatch
from kvtop.model.status.retraction_alert import retraction_alert
from kvtop.model.status.state_pool_climb import StatePoolClimb
from kvtop.model.verdict import (
    ALERT_CLEARED,
    ALERT_RAISED,
    GPU_BACK,
    GPU_LOST,
    RESTART,
    SOURCE_BACK,
    SOURCE_DOWN,
    Seen,
    SeenKind,
    Verdict,
)

# The timeline keeps the newest this many changes (a flapping source must not grow it).
TIMELINE_MAX = 200
# A GPU whose server processes left NVML's list but still holds this much is "still held": a
# CUDA context alone is about 0.5 GiB, a rank's weights many GiB.
HELD_GIB = 1.0
_SOURCE_WORDS = {"nvml": "GPU readings (NVML)", "metrics": "/metrics"}


def _key(alert: Alert) -> tuple[str, str]:
    return (alert.kind, alert.subject)


class Watch:
    """Judges each Snapshot of one session; `look()` returns its verdict and the timeline."""

    def __init__(self, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> None:
        self.thresholds = thresholds
        self._queued_since: float | None = None
        self._active: dict[tuple[str, str], Alert] = {}
        self._sources: dict[str, SourceState] = {}
        self._lost: set[int] = set()
        self._restarts: int | None = None
        # GPUs on which NVML listed one of the server's processes at some look, by index.
        self._had_server: set[int] = set()
        self._seen: deque[Seen] = deque(maxlen=TIMELINE_MAX)
        self._state_pool = StatePoolClimb()
        # The retraction counter's readings: build_snapshot sets each Snapshot's retractions
        # from them before the look.
        self.retraction_readings = RetractionReadings()
        self._idle_tokens = IdleTokens()
        self._growth = MemoryGrowthWatch()

    @property
    def timeline(self) -> tuple[Seen, ...]:
        return tuple(self._seen)

    def look(self, snapshot: Snapshot) -> tuple[Verdict, tuple[Seen, ...]]:
        """The verdict of SNAPSHOT (its alerts dated from when first seen) and the timeline up
        to it."""
        now = snapshot.taken_at
        kv = kv_now(snapshot)
        queued = kv.load.queued_requests if kv.current else None
        self._queued_since = queue_since(self._queued_since, queued, now)
        queued_for = None if self._queued_since is None else max(0.0, now - self._queued_since)
        verdict = judge(snapshot, self.thresholds, queued_for_s=queued_for)
        verdict = with_alerts(verdict, self._processes_gone(snapshot))
        climb = self._state_pool.look(kv, now, snapshot.analysis.startup.restarts, self.thresholds)
        if climb is not None:
            verdict = with_alerts(verdict, (climb,))
        retracting = retraction_alert(snapshot, self.thresholds)
        if retracting is not None:
            verdict = with_alerts(verdict, (retracting,))
        restarts = snapshot.analysis.startup.restarts
        idle = self._idle_tokens.look(kv, snapshot.trusted_metrics, now, restarts, self.thresholds)
        growth, growing = self._growth.look(snapshot, self.thresholds)
        extra = ((idle,) if idle is not None else ()) + growing
        verdict = replace(with_alerts(verdict, extra), growth=growth)
        self._note_restarts(snapshot, now)
        self._note_sources(snapshot, now)
        self._note_gpus(snapshot, now)
        alerts = self._note_alerts(verdict.alerts, now)
        return replace(verdict, alerts=alerts), self.timeline

    # -- what changed ---------------------------------------------------------------------------
    def _add(self, at: float, kind: SeenKind, subject: str, text: str, level: Level) -> None:
        self._seen.append(Seen(at, kind, subject, text, level))

    def _note_alerts(self, found: tuple[Alert, ...], now: float) -> tuple[Alert, ...]:
        active: dict[tuple[str, str], Alert] = {}
        for alert in found:
            before = self._active.get(_key(alert))
            since = before.since if before is not None and before.since is not None else now
            if before is None or before.level != alert.level:
                self._add(now, ALERT_RAISED, alert.subject, alert.text, alert.level)
            active[_key(alert)] = replace(alert, since=since)
        for key, alert in self._active.items():
            if key not in active:
                self._add(now, ALERT_CLEARED, alert.subject, f"cleared: {alert.text}", Level.OK)
        self._active = active
        return tuple(active[_key(a)] for a in found)

    def _note_sources(self, snapshot: Snapshot, now: float) -> None:
        for source in snapshot.sources:
            if asked_off(source) or source.cause == NOT_YET:
                continue  # off on purpose, or the first reading still on its way
            before = self._sources.get(source.name)
            self._sources[source.name] = source.state
            what = _SOURCE_WORDS.get(source.name, source.name)
            if source.state != SourceState.OK and before in (None, SourceState.OK):
                words = f"{what} {source.state}" + (f": {source.detail}" if source.detail else "")
                self._add(now, SOURCE_DOWN, source.name, words, Level.WARNING)
            elif source.state == SourceState.OK and before not in (None, SourceState.OK):
                self._add(now, SOURCE_BACK, source.name, f"{what} back", Level.OK)

    def _note_gpus(self, snapshot: Snapshot, now: float) -> None:
        lost = {g.sample.index for g in snapshot.gpus if g.lost}
        seen = {g.sample.index for g in snapshot.gpus}
        for index in sorted(lost - self._lost):
            self._add(now, GPU_LOST, f"GPU {index}", f"GPU {index} lost", Level.CRITICAL)
        for index in sorted((self._lost - lost) & seen):
            self._add(now, GPU_BACK, f"GPU {index}", f"GPU {index} back", Level.OK)
        self._lost = lost

    def _processes_gone(self, snapshot: Snapshot) -> tuple[Alert, ...]:
        """The server's processes left NVML's list while their GPUs still hold the memory (the
        server killed or hung with its memory held). One look cannot tell it from a host whose
        NVML lists no process at all (a container without the host's PID namespace): a list
        that held the server's processes and is now without them is the change judged."""
        with_server = {
            g.sample.index
            for g in snapshot.gpus
            if not g.lost and any(not p.other for p in g.processes)
        }
        gone = [
            g
            for g in snapshot.gpus
            if g.sample.index in self._had_server - with_server
            and not g.lost
            and not any(name == "processes" for name, _ in g.sample.field_errors)
            and g.sample.used_gib >= HELD_GIB
        ]
        released = {
            g.sample.index for g in snapshot.gpus if not g.lost and g.sample.used_gib < HELD_GIB
        }
        self._had_server = (self._had_server | with_server) - released
        if not gone:
            return ()
        indexes = sorted(g.sample.index for g in gone)
        ranks = [rank for g in gone for rank in g.ranks]
        held = sum(g.sample.used_gib for g in gone)
        where = rank_span(ranks) + " on " if ranks else ""
        gpus = gpus_text(indexes)
        text = (
            f"the server's processes left NVML's list ({where}{gpus}) while those GPUs still "
            f"hold {held:,.1f} GiB: the server was killed or hangs with its memory held; check "
            "nvidia-smi and ps for its processes (leftover schedulers keep GPU memory until "
            "killed)"
        )
        level = Level.CRITICAL if not with_server else Level.WARNING
        return (Alert(level, "processes_gone", text, "server"),)

    def _note_restarts(self, snapshot: Snapshot, now: float) -> None:
        restarts = snapshot.analysis.startup.restarts
        if self._restarts is not None and restarts > self._restarts:
            text = f"the server started again (restart {restarts} in this log)"
            self._add(now, RESTART, "server", text, Level.OK)
        self._restarts = restarts


def judged(snapshot: Snapshot, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> Snapshot:
    """SNAPSHOT with the verdict of one look (no timeline): for a Snapshot not built by
    build_snapshot, as the fleet's view of one host."""
    verdict, _ = Watch(thresholds).look(snapshot)
    return replace(snapshot, verdict=verdict, timeline=())
