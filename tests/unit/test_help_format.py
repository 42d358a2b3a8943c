"""kvtop/help_format.py: `--help` laid out for the terminal it is read in (paragraphs wrapped,
examples in two columns that fold when narrow, a long command broken with the shell's `\\`)."""

from __future__ import annotations

import argparse

import pytest

from kvtop import help_format

PAIRS = (
    ("kvtop --unit sglang-kimi", "live: the unit's journal, GPUs, /metrics"),
    ("kvtop --check --unit sglang-kimi", "one monitoring line, exit 0 1 2 3"),
)


def test_examples_side_by_side_when_there_is_room() -> None:
    text = help_format.fill(f"examples:\n{help_format.examples(PAIRS)}", 78)
    assert text.splitlines() == [
        "examples:",
        "  kvtop --unit sglang-kimi          live: the unit's journal, GPUs, /metrics",
        "  kvtop --check --unit sglang-kimi  one monitoring line, exit 0 1 2 3",
    ]


def test_examples_fold_under_their_command_when_narrow() -> None:
    lines = help_format.fill(help_format.examples(PAIRS), 40).splitlines()
    assert lines[0] == "  kvtop --unit sglang-kimi"
    assert lines[1].startswith("      live: the unit's journal")
    assert all(len(line) <= 40 for line in lines)


def test_a_command_longer_than_the_line_is_broken_as_the_shell_continues_it() -> None:
    pairs = (("kvtop plan --from-log sglang.log -- --mem-fraction-static 0.90", "at 0.90"),)
    lines = help_format.fill(help_format.examples(pairs), 40).splitlines()
    assert all(len(line) <= 40 for line in lines)
    commands = [line for line in lines if not line.strip().startswith("at ")]
    assert commands[0].endswith(" \\") and not commands[-1].endswith("\\")
    rejoined = " ".join(line.strip().removesuffix(" \\") for line in commands)
    assert rejoined == pairs[0][0]  # nothing lost or reordered: it still runs when pasted


@pytest.mark.parametrize("width", [40, 60, 100])
def test_prose_is_wrapped_without_splitting_an_option(width: int) -> None:
    prose = "Arguments after `--` are SGLang's (--tp-size, --mem-fraction-static, " * 4
    lines = help_format.fill(prose + "\n\nsecond paragraph", width).splitlines()
    assert all(len(line) <= width for line in lines)
    assert "--mem-fraction-static" in "\n".join(lines)  # never --mem- / fraction-static
    assert "" in lines  # the paragraphs stay apart


def test_the_other_usage_forms_follow_argparse_s_own() -> None:
    parser = argparse.ArgumentParser(
        prog="kvtop",
        formatter_class=help_format.formatter(("kvtop plan [--model DIR] -- [SGLang arguments]",)),
    )
    parser.add_argument("--once", action="store_true")
    usage = parser.format_usage().splitlines()
    assert usage[0] == "usage: kvtop [-h] [--once]"
    assert usage[1] == "       kvtop plan [--model DIR] -- [SGLang arguments]"
