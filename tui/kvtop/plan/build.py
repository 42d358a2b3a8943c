"""`kvtop plan`'s names for the sizing engine's inputs (tui/kvtop/model/sizing/engine.py)."""

from kvtop.model.sizing.engine import (
    Built,
    Gpus,
    ModelInfo,
    PlanInputError,
    build,
)

__all__ = ["Built", "Gpus", "ModelInfo", "PlanInputError", "build"]
