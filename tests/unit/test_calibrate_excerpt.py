"""A calibration from a log that starts after the weights (no `Load weight begin/end ... avail
mem=` lines): what it still carries is calibrated, the rest estimated, and the plan says which.

tests/fixtures/sglang-logs/05-pr11830-single-gpu-b200.log starts at `Using KV cache dtype`:
the KV line (2,243,474 tokens, K and V 59.91 GB each), `Memory pool end. avail mem=40.03 GB`
and the graph capture (1.44 GB, 38.05 GB left).
"""

from __future__ import annotations

import pytest

from kvtop.model.sizing import formula
from kvtop.model.sizing.calibration import (
    CUDA_GRAPHS,
    FREE_AFTER_STARTUP,
    FREE_BEFORE_WEIGHTS,
    KV_CELL,
    WEIGHTS,
    calibrate,
)
from kvtop.model.sizing.engine import Gpus, build
from kvtop.model.sizing.launch_args import merge_launch_args, parse_launch_args
from kvtop.plan.gather import read_boot
from tests.support.paths import REAL_LOGS

EXCERPT = REAL_LOGS / "05-pr11830-single-gpu-b200.log"
TOKENS = 2_243_474


def test_an_excerpt_after_the_weights_calibrates_what_it_carries() -> None:
    calib = calibrate(read_boot(str(EXCERPT), None))
    assert calib.tokens == TOKENS
    assert calib.kv_pool_gib == pytest.approx(119.82)
    assert calib.full_bytes == pytest.approx(119.82 * formula.GIB / (TOKENS + 1))
    assert calib.cuda_graph_gib == pytest.approx(1.44)
    assert calib.free_after_startup_gib == pytest.approx(38.05)
    # The free memory SGLang sized the pool from: the pool plus what it left free.
    assert calib.ranks[0].post_load_free_gib == pytest.approx(119.82 + 40.03)
    assert {KV_CELL, CUDA_GRAPHS, FREE_AFTER_STARTUP} <= set(calib.calibrated)
    assert calib.estimated == (FREE_BEFORE_WEIGHTS, WEIGHTS)


@pytest.mark.parametrize("gpus", [None, Gpus(1, 179 * 1024, "NVIDIA B200", "--gpu-memory")])
def test_the_plan_from_an_excerpt_reproduces_its_boot(gpus: Gpus | None) -> None:
    calib = calibrate(read_boot(str(EXCERPT), None))
    args = merge_launch_args(parse_launch_args([]), calib.server_args, {"tp_size": 1})
    built = build(None, calib, args, gpus, calib.version, "log")
    result = built.planner.at(built.mem_fraction_static)
    assert result.pools.tokens == TOKENS
    assert result.free_after_startup_gib == pytest.approx(38.05, abs=0.011)
    assert built.estimated == (FREE_BEFORE_WEIGHTS, WEIGHTS)
    assert any("starts after the weights" in note for note in built.notes)


def test_the_gpu_total_estimates_the_free_memory_before_the_weights() -> None:
    calib = calibrate(read_boot(str(EXCERPT), None))
    args = merge_launch_args(parse_launch_args([]), calib.server_args, {"tp_size": 1})
    gpus = Gpus(1, 179 * 1024, "NVIDIA B200", "--gpu-memory")
    result = build(None, calib, args, gpus, calib.version, "log").planner.at(0.85)
    # Not the post-load figure: the weights sit between the two.
    assert result.pre_load_free_gib > result.post_load_free_gib + 10
