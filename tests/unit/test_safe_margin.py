"""One safe margin: the configured value judges the headroom alert, the what-if, the insight
and the plan's verdict alike, on the story's log (7.40 GiB free after startup at 0.88; the
what-if at 0.90 leaves 5.43 GiB)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvtop.model.analysis import Analysis, analyse
from kvtop.model.sizing import tuning
from kvtop.model.sizing.formula import SAFE_HEADROOM_GIB
from kvtop.model.sizing.plan import OOM_RISK, POOL_UNDER_CONTEXT
from kvtop.model.status.alert_rule import evaluate
from kvtop.model.status.levels import DEFAULT_THRESHOLDS, Thresholds
from kvtop.sglang.story import fold_lines
from tests.support.paths import STORY_LOG
from tests.support.tui_support import analysis_snapshot


def _story(margin: float) -> Analysis:
    with STORY_LOG.open(encoding="utf-8") as handle:
        return analyse(fold_lines(handle), "story", safe_margin_gib=margin)


def _judged(margin: float) -> dict[str, object]:
    """Each view's word on the story at MARGIN."""
    analysis = _story(margin)
    explanation = analysis.explanation
    assert explanation is not None and explanation.inputs is not None
    planner = explanation.inputs.planner
    assert planner is not None
    alerts = evaluate(analysis_snapshot(analysis), Thresholds(safe_margin_gib=margin))
    return {
        "alert": [a.kind for a in alerts if a.kind == "headroom"],
        "what_if": tuning.what_if_at(explanation.inputs, 0.90).warning,
        "insight": [i for i in analysis.insights if "safe margin" in i],
        "plan": planner.at(0.90).verdict.kind,
        "plan_logged": planner.at(explanation.inputs.mem_fraction_static).verdict.kind,
        "note": [n for n in explanation.notes if "safe margin" in n],
    }


def test_the_default_is_sglangs_low_end_and_the_thresholds_default() -> None:
    assert SAFE_HEADROOM_GIB == 5.0
    assert DEFAULT_THRESHOLDS.safe_margin_gib == SAFE_HEADROOM_GIB


def test_every_view_keeps_quiet_at_the_default() -> None:
    said = _judged(SAFE_HEADROOM_GIB)
    assert said == {
        "alert": [],
        "what_if": None,
        "insight": [],
        "plan": POOL_UNDER_CONTEXT,  # fits memory; the story's context is longer than its pool
        "plan_logged": POOL_UNDER_CONTEXT,
        "note": [],
    }


@pytest.mark.parametrize("margin", [6.0, 8.0])
def test_a_larger_margin_changes_every_view_alike(margin: float) -> None:
    said = _judged(margin)
    words = f"under the {margin:g} GiB safe margin"
    assert words in str(said["what_if"])  # 5.43 GiB at 0.90
    assert said["plan"] == OOM_RISK
    assert any(words in i for i in said["insight"])  # type: ignore[attr-defined]
    if margin > 7.40:  # the story's own free after startup is under it too
        assert said["alert"] == ["headroom"]
        assert said["plan_logged"] == OOM_RISK
        assert any(words in n for n in said["note"])  # type: ignore[attr-defined]
    else:
        assert said["alert"] == []
        assert said["plan_logged"] == POOL_UNDER_CONTEXT


def test_the_plan_keeps_its_margin_in_its_result() -> None:
    analysis = _story(SAFE_HEADROOM_GIB)
    assert analysis.explanation is not None and analysis.explanation.inputs is not None
    planner = analysis.explanation.inputs.planner
    assert planner is not None
    assert replace(planner, safe_margin_gib=7.5).at(0.88).safe_margin_gib == 7.5
