"""Which options go together: the tables of tui/kvtop/option_rules.py read against options as
each command's own parser gives them (the sentences the operator sees are tests/process/'s)."""

from __future__ import annotations

import argparse

import pytest

from kvtop.cli import build_parser
from kvtop.option_rules import (
    CHECK,
    DIFF,
    EXPORT,
    FLEET,
    ONE_HOST,
    PLAN,
    Bounds,
    Problem,
    first_problem,
    given,
)
from kvtop.options import EXIT_USAGE


def _kvtop(*words: str) -> argparse.Namespace:
    return build_parser().parse_args(list(words))


def _sentence(values: object, *tables: tuple[object, ...]) -> str | None:
    problem = first_problem(values, *tables)  # type: ignore[arg-type]
    return None if problem is None else problem.sentence


def test_a_zero_is_given_an_empty_text_is_not() -> None:
    assert given(0) and given(0.0) and given("x") and given(True)
    assert not any(given(v) for v in (None, False, "", []))


def test_the_first_broken_rule_is_the_one_told_with_exit_2() -> None:
    # --width 0 without --once: that it goes with --once comes before its range.
    assert first_problem(_kvtop("--width", "0"), ONE_HOST) == Problem(
        "--width goes with --once (the text report)", EXIT_USAGE
    )
    assert _sentence(_kvtop("--width", "0", "--once"), ONE_HOST) == (
        "--width takes columns from 40 to 1000"
    )
    assert _sentence(_kvtop("--once", "--demo"), ONE_HOST) is None


def test_a_bound_refuses_nan_and_checks_every_repeated_value() -> None:
    rule = Bounds("x", 0, 1, "x {value}", above_low=True, below_high=True, each=True)
    assert rule.problem(argparse.Namespace(x=[0.5, 0.9])) is None
    assert rule.problem(argparse.Namespace(x=[0.5, 1.0])) == "x 1.0"
    assert rule.problem(argparse.Namespace(x=[float("nan")])) == "x nan"
    assert rule.problem(argparse.Namespace(x=None)) is None


def test_an_empty_log_file_is_no_source_as_before() -> None:
    # `--log-file ""` never counted as a second source: only --unit is given.
    assert _sentence(_kvtop("--log-file", "", "--unit", "u", "--once"), ONE_HOST) is None
    assert _sentence(_kvtop("--log-file", "a", "--unit", "u", "--once"), ONE_HOST) == (
        "give one of --log-file, --unit or --demo"
    )


def test_export_without_addr_may_print_once() -> None:
    assert _sentence(_kvtop("--export", "--once", "--demo"), EXPORT) is None
    assert _sentence(_kvtop("--export", "9877", "--once", "--demo"), EXPORT) == (
        "--once --export prints one body on stdout: leave out ADDR (it is where the server listens)"
    )
    assert _sentence(_kvtop("--export", "--demo"), EXPORT) is None  # 127.0.0.1:9877


def test_check_and_the_fleet_tell_their_own_rule_first() -> None:
    assert _sentence(_kvtop("--check", "--json"), CHECK) == (
        "--check prints its own status line: leave out --once and --json"
    )
    fleet = _kvtop("--prometheus", "http://p:9090", "--check", "--json")
    assert _sentence(fleet, FLEET) == "--json goes with --once"
    assert _sentence(_kvtop("--selector", "a"), FLEET) == "--selector goes with --prometheus URL"


@pytest.mark.parametrize(
    ("words", "sentence"),
    [
        (
            ["--weights-gib", "10"],
            "--weights-gib goes with --model (the config.json whose weights they are)",
        ),
        (
            ["--model", "m", "--weights-gib", "0"],
            "--weights-gib 0: give the checkpoint's size "
            "in GiB, above 0 and at most 102,400 (e.g. 15 for an 8B model in bf16)",
        ),
        (["--model", "m", "--width", "5"], "--width 5: give a width from 40 to 1000 columns"),
        ([], "give --model DIR (the model's config.json) and/or --from-log LOG / --unit UNIT"),
    ],
)
def test_plan_rules(words: list[str], sentence: str) -> None:
    from kvtop.plan.cli import build_parser as plan_parser

    assert _sentence(plan_parser().parse_args(words), PLAN) == sentence


def test_diff_rules() -> None:
    from kvtop.diff.cli import build_parser as diff_parser

    assert _sentence(diff_parser().parse_args(["-", "-"]), DIFF) == (
        "stdin (-) can be read only once: give at most one -"
    )
    assert _sentence(diff_parser().parse_args(["a", "b"]), DIFF) is None
