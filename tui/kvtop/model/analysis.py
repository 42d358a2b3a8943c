"""The startup analysed: per-rank memory, sizing replayed, explanation and findings (pure).

The top of the model: it runs the sizing and the insights over a tracked startup; the
`Analysis` it returns is a plain record below it (tui/kvtop/model/startup_analysis.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from kvtop.model.memory.rank_memory import memory_breakdown
from kvtop.model.sizing.formula import SAFE_HEADROOM_GIB, version_text
from kvtop.model.sizing.log_planner import planner_from_boot
from kvtop.model.sizing.model_config import ConfigFile
from kvtop.model.sizing.replay import (
    choose_cell_size,
    explain,
    mem_fraction_static,
    rank_sizing,
    sglang_version,
)
from kvtop.model.sizing.tuning import with_caveats
from kvtop.model.startup_analysis import Analysis
from kvtop.model.status.insights import insights, minimum_viable_mfs, next_step
from kvtop.sglang.control_chars import make_visible
from kvtop.sglang.server_args import ServerArgs
from kvtop.sglang.start_state import Startup
from kvtop.sglang.startup import StartupTracker

__all__ = ["Analysis", "analyse"]


def analyse(
    tracker: StartupTracker,
    source: str,
    *,
    model_config: ConfigFile | None = None,
    version_override: str | None = None,
    what_if_mfs: Sequence[float] = (),
    request_len: int | None = None,
    server_args_fallback: ServerArgs | None = None,
    safe_margin_gib: float = SAFE_HEADROOM_GIB,
) -> Analysis:
    """Everything the report shows; `server_args_fallback` (from /server_info) fills a log
    that has no `server_args=` line; `model_config` is the model's config.json as read (None:
    the cell size comes from the log's KV line)."""
    startup = tracker.current
    if startup.server_args is None and server_args_fallback is not None:
        startup = replace(startup, server_args=server_args_fallback)
    ranks = tuple(startup.sorted_ranks())
    mfs = mem_fraction_static(startup)
    cell = choose_cell_size(startup, model_config)
    version = sglang_version(startup, version_override)
    problem = None
    try:
        sizings = tuple(
            s for s in (rank_sizing(r, startup, cell.cell) for r in ranks) if s is not None
        )
        planner = planner_from_boot(startup, version_override)
        explained = explain(
            startup, cell, version, what_if_mfs, request_len, planner, safe_margin_gib
        )
        explanation = with_caveats(explained, request_len)
    except (ArithmeticError, ValueError) as exc:
        # Numbers no real server logs (absurd sizes, overflowing products): say so, keep the rest.
        sizings, explanation = (), None
        problem = (
            f"the sizing formula could not be replayed with this log's numbers ({exc}); "
            "the memory table shows them as logged."
        )
    found = insights(startup, explanation)
    if problem:
        found.append(problem)
    return Analysis(
        source=source,
        lines_seen=tracker.lines_seen,
        dates_said=tracker.dates.said,
        undated_lines=tracker.dates.dated,
        not_understood=tracker.not_understood,
        first_not_understood=tracker.first_not_understood,
        startup=startup,
        ranks=ranks,
        breakdowns=tuple(memory_breakdown(r, mfs) for r in ranks),
        sizings=sizings,
        cell=cell,
        explanation=explanation,
        insights=tuple(found),
        next_step=next_step(startup.failure, startup) if startup.failure else None,
        version=version,
        version_shown=_shown_version(version_override, version, startup),
        minimum_viable_mfs=_minimum_viable(startup),
    )


def _minimum_viable(startup: Startup) -> float | None:
    failure = startup.failure
    if failure is None or failure.kind != "not_enough_memory":
        return None
    return minimum_viable_mfs(failure, startup)


def _shown_version(override: str | None, version: tuple[int, ...] | None, startup: Startup) -> str:
    """One version string for every view: what the server (or --sglang-version) says as it
    says it ("0.5.8.post1"), else the rule's version in the log's words."""
    if override and override.strip():
        return make_visible(override.strip())
    return version_text(version, startup.version)
