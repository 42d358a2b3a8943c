"""A version known as a range is stated as a range in every sentence that
depends on it, also when the range straddles a rule's boundary (0.5.13 / 0.5.14: the draft
model's budget), where no single version can be picked to apply the rule."""

from __future__ import annotations

from kvtop.model.analysis import analyse
from kvtop.model.sizing.formula import draft_budget_rule
from kvtop.sglang.story import fold_lines
from kvtop.sglang.version_hint import VersionRange


def test_straddling_range_is_named_with_both_rules() -> None:
    rule = draft_budget_rule(None, VersionRange((0, 5, 9), (0, 5, 19), ("`elapsed=`",)))
    assert rule.budgeted is None
    assert rule.text.startswith(
        "SGLang 0.5.9–0.5.19 (the log's formats do not say which). Up to 0.5.13 the draft "
        "model is not budgeted"
    )
    assert "unknown" not in rule.text and "From 0.5.14 the draft weights" in rule.text


def test_unknown_version_is_still_called_unknown() -> None:
    rule = draft_budget_rule(None, VersionRange((0, 3, 0), (0, 9, 999)))
    assert rule.text.startswith("SGLang version unknown. Up to 0.5.13")


def test_log_of_a_straddling_range_says_the_range_in_its_insight() -> None:
    """A speculative server whose lines (SGLang's 0.5.9–0.5.19 `Init torch distributed ends.
    elapsed=` and 0.5.13–0.5.16 `KV Cache is allocated. dtype:` formats) pin 0.5.13–0.5.16:
    the draft sentence names that range, not one version."""
    lines = [
        "[2026-03-01 10:00:00] server_args=ServerArgs(model_path='m', tp_size=1, "
        "mem_fraction_static=0.85, speculative_algorithm='EAGLE3', page_size=1)\n",
        "[2026-03-01 10:00:01] Init torch distributed ends. elapsed=1.20 s, mem usage=0.50 GB\n",
        "[2026-03-01 10:00:02] Load weight begin. avail mem=139.00 GB\n",
        "[2026-03-01 10:00:09] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 100000, "
        "K size: 5.00 GB, "
        "V size: 5.00 GB\n",
    ]
    report = analyse(fold_lines(lines), "x.log")
    assert report.startup.version.text() == "0.5.13–0.5.16"
    assert report.version is None  # no single version applies the 0.5.14 rule
    assert report.explanation is not None and report.explanation.draft_rule is not None
    draft = [i for i in report.insights if "draft model is not budgeted" in i]
    assert draft and draft[0].startswith(
        "SGLang 0.5.13–0.5.16 (the log's formats do not say which)."
    )
