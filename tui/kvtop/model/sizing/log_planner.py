"""The sizing engine set up from a logged boot alone: what the formula screen's what-if and the
one-shot report replay at other mem_fraction_static values. The same Planner `kvtop plan
--from-log LOG` builds with no launch arguments given, so both give one answer (the draft's
growing pool and the tightest rank included)."""

from __future__ import annotations

from kvtop.model.sizing.calibration import CalibrationError, calibrate
from kvtop.model.sizing.engine import PlanInputError, build
from kvtop.model.sizing.launch_args import GivenArgs, merge_launch_args
from kvtop.model.sizing.plan import Planner
from kvtop.sglang.start_state import Startup

_NOTHING_GIVEN = GivenArgs({}, ())


def planner_from_boot(startup: Startup, version_override: str | None = None) -> Planner | None:
    """The engine calibrated by `startup`'s own lines; None when the boot logged too little
    (no pool, no free-memory readings) to replay its sizing."""
    try:
        calib = calibrate(startup, version_override)
    except CalibrationError:
        return None
    if not calib.tokens:
        return None
    args = merge_launch_args(_NOTHING_GIVEN, calib.server_args, {"tp_size": calib.tp_size})
    try:
        built = build(None, calib, args, None, calib.version, "log")
        replayed = built.planner.pools_at(built.mem_fraction_static).tokens
    except (PlanInputError, ArithmeticError, ValueError):
        return None
    # A pool SGLang's rule cannot give from these figures (sized by another rule, or an input
    # guessed wrong): the engine cannot stand for this boot, the report says why instead.
    return built.planner if replayed > 0 else None
