"""`kvtop plan` on real boots from public logs (tests/fixtures/real-boots): each planned before
launch (the model's config, the published checkpoint's size, the GPU's total and name, the
version, the launch arguments) and calibrated by its own log, against the max_total_num_tokens
it printed. docs/plan.md keeps the table (`bench/plan_real_boots.py` prints it).

Each boot's bound is its measured error rounded up: a change that makes a plan worse fails here,
one that makes it better is free to tighten the bound.
"""

from __future__ import annotations

import re

import pytest

from kvtop.model.sizing.formula import SAFE_HEADROOM_GIB
from tests.support.real_boots import RealBoot, all_boots, error_pct, plan

BOOTS = all_boots()

# |error| in % before launch, as measured (docs/plan.md), rounded up. Over 2 %: inputs the
# plan cannot know before launch (the reasons are in docs/plan.md's table).
BEFORE_LAUNCH_BOUND_PCT = {
    "qwen3-8b-v046-one-gpu": 0.5,
    "qwen3-30b-a3b-dp4-tp4-ep4": 1.5,
    "qwen3-8b-b200-v0510-piecewise": 0.5,
    "qwq-32b-4xl4-tp4-v043": 0.5,
    "llama-3.1-8b-docs-v041-80gb": 0.5,
    "llama-3.1-8b-fa3-pr4760-v044": 0.5,
    "llama-3-8b-mi300x-bench-latency-v03": 0.5,
    # The checkpoint's size is a model of the same shapes' (its own is not published), and
    # the weights loaded 0.21 GiB over it on a 24 GB card.
    "deepseek-r1-distill-qwen-7b-rtx3090-wsl": 4.5,
    # The GPU is not named: a 24 GB card's total is assumed.
    "mistral-7b-instruct-v0.1-24gb-v040": 5.0,
    # No checkpoint size published: the weights are estimated from a config without the
    # vision tower, and the quantizer's unquantized layers are not known.
    "qwen3.5-27b-awq-r9700-tp2-fp8kv": 57.5,
    # The weights estimated (no public checkpoint size); 0.5.3's forced fraction.
    "deepseek-v3.2-exp-8xb200-dp8-v053": 7.0,
    # A development branch whose fraction is not 0.5.3's forced 0.8 nor known.
    "deepseek-v3.2-exp-8xb200-dp8": 30.5,
}
# Calibrated by the boot's own log.
CALIBRATED_BOUND_PCT = {slug: 1.0 for slug in BEFORE_LAUNCH_BOUND_PCT}

REQUIRED = (
    "source_url",
    "model",
    "gpu_total_gib",
    "gpu_total_basis",
    "gpu_count",
    "sglang_version",
    "sglang_version_basis",
    "checkpoint_gib",
    "checkpoint_basis",
    "launch_args",
    "logged",
)


def _id(boot: RealBoot) -> str:
    return boot.slug


def test_every_boot_has_a_bound() -> None:
    assert {b.slug for b in BOOTS} == set(BEFORE_LAUNCH_BOUND_PCT)


@pytest.mark.parametrize("boot", BOOTS, ids=_id)
def test_the_boot_is_what_its_log_printed(boot: RealBoot) -> None:
    """Nothing in boot.json is invented: its sources are named and the logged token count is
    the log's own."""
    missing = [
        key
        for key in REQUIRED
        if key not in boot.meta or (boot.meta[key] in (None, "") and key != "checkpoint_gib")
    ]
    assert not missing, f"{boot.slug}: boot.json lacks {missing}"
    assert (boot.model_dir / "config.json").is_file()
    text = boot.log.read_text(encoding="utf-8", errors="replace")
    tokens = boot.logged_tokens
    assert re.search(rf"(#tokens: |max_total_num_tokens=){tokens}\b", text), (
        f"{boot.slug}: {tokens} is not in {boot.log.name}"
    )


@pytest.mark.parametrize("boot", BOOTS, ids=_id)
def test_planned_before_launch(boot: RealBoot) -> None:
    planned = plan(boot, calibrated=False)
    assert planned.status in (0, 3, 4), planned.said
    error = error_pct(planned.tokens, boot.logged_tokens)
    assert error is not None
    assert abs(error) <= BEFORE_LAUNCH_BOUND_PCT[boot.slug], (
        f"{boot.slug}: planned {planned.tokens:,} against {boot.logged_tokens:,} logged "
        f"({error:+.2f} %)"
    )


@pytest.mark.parametrize("boot", BOOTS, ids=_id)
def test_planned_from_its_own_log(boot: RealBoot) -> None:
    planned = plan(boot, calibrated=True)
    assert planned.status in (0, 3, 4), planned.said
    assert planned.plan is not None and planned.plan["calibration"] is not None
    error = error_pct(planned.tokens, boot.logged_tokens)
    assert error is not None
    assert abs(error) <= CALIBRATED_BOUND_PCT[boot.slug], (
        f"{boot.slug}: planned {planned.tokens:,} against {boot.logged_tokens:,} logged "
        f"({error:+.2f} %)"
    )


def test_a_boot_that_kept_the_margin_is_not_called_oom_risk() -> None:
    """A boot whose log shows at least the safe margin free after startup is not a firm
    oom_risk before launch: the start-up estimate's spread makes such a verdict unsure, not
    wrong. (A boot that served with less than the margin may well be called oom_risk: the
    margin is for the requests to come.)"""
    checked, wrong = [], []
    for boot in BOOTS:
        free_after = boot.meta["logged"].get("free_after_startup_gib")
        if free_after is None or free_after < SAFE_HEADROOM_GIB:
            continue
        checked.append(boot.slug)
        verdict = (plan(boot, calibrated=False).plan or {}).get("verdict") or {}
        if verdict.get("kind") == "oom_risk" and verdict.get("firm", True):
            wrong.append(boot.slug)
    assert checked and not wrong


def test_seven_of_the_boots_within_two_percent_before_launch() -> None:
    """The boots whose inputs are all public (the checkpoint's own size, the GPU named): the
    plan before launch is within 2 % of what they printed."""
    within = [
        b.slug
        for b in BOOTS
        if abs(error_pct(plan(b, calibrated=False).tokens, b.logged_tokens) or 100) <= 2
    ]
    assert len(within) >= 7, within
