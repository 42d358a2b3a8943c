"""Alert levels: when a number is fine, a warning or critical, by thresholds the user may set.

One rule for every screen, the report and `kvtop --check`: a value at or above its warning
threshold is a warning, at or above its critical threshold critical (see docs/alerts.md).
Colour shows the level; a glyph shows it too, for NO_COLOR and for colour-blind readers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kvtop.model.safe_margin import SAFE_HEADROOM_GIB
from kvtop.model.str_enum import StrEnum


class Level(StrEnum):
    """An alert level; its value is the word the reports, the JSON and the exporter write."""

    OK = "ok"
    WARNING = "warning"
    CRITICAL = "critical"
    # Nothing could be judged: --check's UNKNOWN, the fleet JSON's level without a fleet.
    UNKNOWN = "unknown"

    @property
    def glyph(self) -> str:
        """▲ for a warning, ✖ for critical, nothing otherwise."""
        return GLYPHS.get(self, "")


# Shown beside a value whose level is not ok (readable without colour). The colours are the
# stylesheet's: styles/kvtop.tcss names each level's once ($level-warning, $level-critical).
GLYPHS = {Level.WARNING: "▲", Level.CRITICAL: "✖"}
_ORDER = {Level.OK: 0, Level.WARNING: 1, Level.CRITICAL: 2}


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Where warning and critical begin. Defaults: docs/alerts.md; the config file sets them."""

    kv_usage_warning_pct: float = 85.0
    kv_usage_critical_pct: float = 95.0
    # Requests waiting in the queue without a break for this long.
    queue_warning_s: float = 30.0
    queue_critical_s: float = 300.0
    # Free GiB on a GPU after startup under this: large prefills may run out of memory.
    safe_margin_gib: float = SAFE_HEADROOM_GIB
    temperature_warning_c: float = 83.0
    temperature_critical_c: float = 90.0
    # A startup still in progress after this long.
    startup_warning_s: float = 1800.0
    # A hybrid model's state pool climbing by this many points of its slots within the window
    # while the running requests do not grow: slots not freed (a leak fills the pool, and the
    # server then stops admitting requests).
    state_pool_climb_pct: float = 10.0
    state_pool_window_s: float = 600.0
    # Requests retracted per minute over the window (the KV pool full at a decode step): SGLang
    # calls about one a minute fine; this often means raising --schedule-conservativeness.
    retractions_per_min_warning: float = 2.0
    retractions_window_s: float = 300.0
    # KV tokens held while no request runs or waits, for longer than this: tokens not released.
    # SGLang refreshes its gauges every 30 s while idle and frees a request's tokens when it
    # ends; five minutes is ten of those refreshes, past any request's tail.
    kv_idle_grace_s: float = 300.0
    # Memory growing steadily (GiB/day over the session, both halves of it growing): on a GPU
    # the runtime segment (1 GiB/day takes the usual 4 GiB of headroom in four days), on the
    # host a rank's resident memory (which breathes more: Python's heap, pinned buffers).
    gpu_growth_warning_gib_per_day: float = 1.0
    host_growth_warning_gib_per_day: float = 2.0
    # No rate before the history spans this long: the allocator caches in steps as larger
    # batches come, and a rate from minutes extrapolates one step to a day.
    growth_min_span_s: float = 10_800.0


DEFAULT_THRESHOLDS = Thresholds()


def level_above(value: float | None, warning: float, critical: float) -> Level:
    """The level of a value that is bad when high (None: nothing known, ok)."""
    if value is None or value != value:  # NaN
        return Level.OK
    if value >= critical:
        return Level.CRITICAL
    if value >= warning:
        return Level.WARNING
    return Level.OK


def worst(levels: Iterable[Level]) -> Level:
    """The most severe level of several (ok when none)."""
    return max(levels, key=_ORDER.__getitem__, default=Level.OK)


def kv_usage_level(usage_pct: float | None, t: Thresholds = DEFAULT_THRESHOLDS) -> Level:
    return level_above(usage_pct, t.kv_usage_warning_pct, t.kv_usage_critical_pct)


def queue_level(queued_for_s: float | None, t: Thresholds = DEFAULT_THRESHOLDS) -> Level:
    """`queued_for_s`: how long requests have been waiting without the queue emptying."""
    return level_above(queued_for_s, t.queue_warning_s, t.queue_critical_s)


def temperature_level(celsius: float | None, t: Thresholds = DEFAULT_THRESHOLDS) -> Level:
    return level_above(celsius, t.temperature_warning_c, t.temperature_critical_c)


def free_after_startup_level(free_gib: float | None, t: Thresholds = DEFAULT_THRESHOLDS) -> Level:
    """Free GiB on a GPU once the server is ready: under the safe margin is a warning."""
    if free_gib is None or free_gib != free_gib:
        return Level.OK
    return Level.WARNING if free_gib < t.safe_margin_gib else Level.OK


@dataclass(frozen=True, slots=True)
class Alert:
    """One thing an operator should look at: its level, what kind of problem, one sentence, and
    what it is about ("GPU 3", "KV cache", "server"). Made by tui/kvtop/model/status/alert_rule.py."""

    level: Level  # warning or critical
    kind: str  # one of the KINDS below
    text: str
    subject: str
    # When kvtop first saw it active (epoch seconds; tui/kvtop/model/status/watch.py), None before.
    since: float | None = None

    def __post_init__(self) -> None:
        # A level given as its word ("warning") becomes the Level, so `alert.level.glyph` holds.
        object.__setattr__(self, "level", Level(self.level))


# Alert kinds, worst first within a level (the order --check names them in).
KINDS = (
    "startup_failed",
    "server_stopped",
    "server_down",
    "processes_gone",
    "gpu_lost",
    "gpu_missing",
    "orphans",
    "kv_usage",
    "mismatch",
    "source_down",
    "headroom",
    "host_ram",
    "startup_slow",
    "queue",
    "state_pool_climbing",
    "retractions_frequent",
    "kv_tokens_held_idle",
    "memory_growing",
    "temperature",
    "throttle",
)


def alert_order(alert: Alert) -> tuple[int, int]:
    """Sort key: critical before warning, then by kind as in KINDS."""
    kind = KINDS.index(alert.kind) if alert.kind in KINDS else len(KINDS)
    return (-_ORDER[alert.level], kind)


def glyph(level: Level) -> str:
    """▲ for a warning, ✖ for critical, nothing when ok: `level.glyph`."""
    return level.glyph
