"""tui/kvtop/fmt: one rounding rule for every percentage and ratio on screen and in the report."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvtop import fmt


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (70.4, "70%"),
        (50, "50%"),
        (100, "100%"),
        (0, "0%"),
        (99.7, "99.7%"),  # never 100% below 100: a pool with room left never reads full
        (99.5, "99.5%"),
        (99.4, "99%"),
        (99.96, ">99.9%"),
        (99.9999, ">99.9%"),
        (0.2, "0.2%"),  # never 0% above 0
        (0.5, "0.5%"),
        (0.04, "<0.1%"),
        (100.3, "100.3%"),  # above 100 is real (a pool over its size): not hidden as 100%
        (None, "—"),
        (float("nan"), "—"),
    ],
)
def test_pct_never_shows_an_edge_it_is_not_on(value: float | None, shown: str) -> None:
    assert fmt.pct(value) == shown


def test_pct_with_decimals_keeps_the_rule() -> None:
    assert fmt.pct(99.97, 1) == "99.97%"
    assert fmt.pct(99.999, 1) == ">99.99%"
    assert fmt.pct(12.34, 1) == "12.3%"


def test_fraction_pct_is_pct_of_a_fraction() -> None:
    """/metrics and the batch line give usage as 0–1; shown exactly as pct shows 0–100."""
    assert fmt.fraction_pct(0.997) == "99.7%"
    assert fmt.fraction_pct(0.70) == "70%"
    assert fmt.fraction_pct(0.0001) == "<0.1%"
    assert fmt.fraction_pct(1.0) == "100%"
    assert fmt.fraction_pct(None) == "—"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (17.88, "+17.9%"),
        (-17.9, "−17.9%"),
        (0, "±0.0%"),
        (0.03, "+0.03%"),
        (-0.003, "−<0.01%"),
        (None, "—"),
    ],
)
def test_change_pct_never_shows_a_change_as_none(value: float | None, shown: str) -> None:
    assert fmt.change_pct(value) == shown


def test_change_pct_whole_percents() -> None:
    assert fmt.change_pct(17.88, 0) == "+18%"
    assert fmt.change_pct(0.3, 0) == "+0.3%"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0.61, "0.61"),
        (0.004, "0.004"),
        (0.0004, "<0.001"),
        (0, "0.00"),
        (12.4, "12"),
        (1234, "1,234"),
    ],
)
def test_ratio_above_zero_never_reads_zero(value: float, shown: str) -> None:
    assert fmt.ratio(value) == shown


# An f-string that formats a percentage itself ({x:.0f} %, {x:.0%}) bypasses the rule above.
_OWN_PERCENT = re.compile(r"\{[^{}]*:[^{}]*%\}|\{[^{}]*:[+]?[.0-9]*f\} ?%")


def test_no_percentage_is_formatted_outside_fmt() -> None:
    root = Path(__file__).resolve().parents[2] / "tui" / "kvtop"
    found = [
        f"{path.relative_to(root)}:{number}: {line.strip()}"
        for path in sorted(root.rglob("*.py"))
        if path.name != "fmt.py"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _OWN_PERCENT.search(line)
    ]
    assert found == [], "format percentages with kvtop.fmt.pct / fraction_pct / change_pct"


def test_pct_never_reads_as_a_threshold_it_is_under() -> None:
    """An alert's threshold is an edge too: 84.96 % under an 85 % warning is not "85.0%"."""
    assert fmt.pct(84.96, 1, edges=(85,)) == "84.96%"
    assert fmt.pct(84.999, 1, edges=(85,)) == ">84.99%"
    assert fmt.pct(85.0, 1, edges=(85,)) == "85.0%"
    assert fmt.pct(87.897, 1, edges=(85, 95)) == "87.9%"
    # Over the threshold it has crossed, the threshold's own value is right: no extra digits.
    assert fmt.pct(95.02, 1, edges=(95,)) == "95.0%"
    assert fmt.pct(70.0003, 1, edges=(70,)) == "70.0%"
