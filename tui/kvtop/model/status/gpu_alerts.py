"""One GPU row's alert: its level, the level of each value that set it, and why.

The judgement is the alert rule's (tui/kvtop/model/status/alert_rule.py, docs/alerts.md), the same as the
report's and `kvtop --check`'s: critical for a lost GPU (or unreadable memory), temperature or
power at the critical threshold; warning at the warning thresholds, or free memory under the
safe margin once the server is ready. This module only sorts the rule's alerts by GPU and by
the cell they colour; the row styles them and adds the glyph.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtop.model.status.levels import DEFAULT_THRESHOLDS, Alert, Level, Thresholds, worst

if TYPE_CHECKING:  # the GPU rows draw the live view's first frame before the model is imported
    from kvtop.model.snapshot import Snapshot

# The rule's alert kinds, by the cell of a GPU row they colour.
_CELLS = {"temperature": "temperature", "power": "power", "headroom": "free"}


@dataclass(frozen=True, slots=True)
class GpuAlert:
    level: Level  # ok, warning, critical: the row's glyph
    temperature: Level = Level.OK
    power: Level = Level.OK
    free: Level = Level.OK
    reasons: tuple[str, ...] = ()


def gpu_alert(index: int, found: Iterable[Alert]) -> GpuAlert:
    """The alert of GPU `index` among the rule's alerts (subject "GPU 3")."""
    mine = [a for a in found if a.subject == f"GPU {index}"]
    cells = {
        cell: worst(a.level for a in mine if _CELLS.get(a.kind) == cell) for cell in _CELLS.values()
    }
    return GpuAlert(
        level=worst(a.level for a in mine),
        temperature=cells["temperature"],
        power=cells["power"],
        free=cells["free"],
        reasons=tuple(a.text for a in mine),
    )


def gpu_alerts(snapshot: Snapshot, t: Thresholds = DEFAULT_THRESHOLDS) -> dict[int, GpuAlert]:
    """Every GPU's alert in this snapshot's verdict, by NVML index (judged here, with `t`,
    only for a Snapshot made by hand)."""
    from kvtop.model.status.judge import verdict_of  # the model: imported after the first frame

    found = verdict_of(snapshot, t).alerts
    return {g.sample.index: gpu_alert(g.sample.index, found) for g in snapshot.gpus}
