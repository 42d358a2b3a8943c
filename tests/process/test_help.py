"""`kvtop --help` and `kvtop plan --help` as an operator reads them, from the real command:
the examples an operator types most, `plan` in the usage, every line within the terminal."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def help_text(*args: str, columns: int) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "kvtop", *args, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": str(columns)},
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("columns", [50, 80, 120])
@pytest.mark.parametrize("command", [(), ("plan",)], ids=["kvtop", "kvtop plan"])
def test_every_line_fits_the_terminal(command: tuple[str, ...], columns: int) -> None:
    text = help_text(*command, columns=columns)
    too_long = [line for line in text.splitlines() if len(line) > columns]
    assert too_long == []


def test_the_examples_and_the_plan_usage() -> None:
    text = help_text(columns=80)
    usage = text.split("\n\n", 1)[0]
    assert "       kvtop plan [--model DIR] [--from-log LOG | --unit UNIT]" in usage
    assert "       kvtop diff [--json] (OLD.log NEW.log | LOG | --unit UNIT)" in usage
    examples = text.split("examples:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    commands = [line.split("  ")[1] for line in examples if line.startswith("  kvtop")]
    assert commands == [
        "kvtop --unit sglang-kimi",
        "kvtop --once --unit sglang-kimi",
        "kvtop --check --unit sglang-kimi",
        "kvtop --export --unit sglang-kimi",
        "kvtop plan --unit sglang-kimi",
        "kvtop diff --unit sglang-kimi",
    ]


def test_diff_help_names_its_forms_and_exit_statuses() -> None:
    text = help_text("diff", columns=80)
    assert text.startswith(
        "usage: kvtop diff [--json] [--width N] (OLD.log NEW.log | LOG | --unit UNIT)"
    )
    assert "  kvtop diff before.log after.log" in text
    assert "exit status: 0 compared, 1 a boot could not be read, 2 bad usage" in " ".join(
        text.split()
    )


def test_plan_help_keeps_its_paragraphs_and_examples() -> None:
    text = help_text("plan", columns=80)
    assert text.startswith("usage: kvtop plan [options] -- [SGLang arguments]\n")
    description = text.split("\n\n")[1]
    assert description.startswith("SGLang's KV pool before launch")
    assert max(len(line) for line in description.splitlines()) <= 80
    assert "  kvtop plan --from-log sglang.log -- --mem-fraction-static 0.90\n" in text
    assert "exit status: 0 fits, 3 pool_under_context, 4 oom_risk, 5 not_enough_memory" in " ".join(
        text.split()
    )
