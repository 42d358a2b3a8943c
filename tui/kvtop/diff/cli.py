"""`kvtop diff`: what changed between two boots of a server, and what explains the change in
its KV tokens (after an upgrade, a new flag, a new driver)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence

from kvtop import help_format
from kvtop.option_rules import DIFF, first_problem, refuse
from kvtop.options import EXIT_INTERRUPTED, EXIT_OK, EXIT_UNREADABLE, EXIT_USAGE
from kvtop.report.plain_output import takes_unicode, write_json

_EXAMPLES = (
    ("kvtop diff before.log after.log", "the latest boot of each log"),
    ("kvtop diff sglang.log", "the log's latest boot against the one before it"),
    ("kvtop diff --unit sglang-kimi", "the unit's latest run against the run before it"),
    ("kvtop diff --json a.log b.log", "schema kvtop-diff/1"),
)
_EPILOG = f"""\
examples:
{help_format.examples(_EXAMPLES)}

exit status: {EXIT_OK} compared, {EXIT_UNREADABLE} a boot could not be read, {EXIT_USAGE} bad usage
(docs/usage.md#kvtop-diff)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvtop diff",
        usage="%(prog)s [--json] [--width N] (OLD.log NEW.log | LOG | --unit UNIT)",
        description=(
            "Two boots of a server side by side: per rank the free memory at start, the "
            "weights, the KV pool, its bytes per token, the tokens, the CUDA graphs and the "
            "free memory after startup; max_running_requests, the SGLang version and the "
            "launch arguments; and which change explains the change in KV tokens."
        ),
        epilog=_EPILOG,
        formatter_class=help_format.formatter(),
    )
    parser.add_argument(
        "logs",
        nargs="*",
        metavar="LOG",
        help="two logs (A then B: the latest boot of each), or one log (its latest two boots); "
        "- for stdin",
    )
    parser.add_argument("--unit", metavar="UNIT", help="the systemd unit's latest two runs")
    parser.add_argument(
        "--journal-dir", metavar="DIR", help="read journal files from DIR (with --unit)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON (schema kvtop-diff/1)")
    parser.add_argument(
        "--width",
        metavar="N",
        type=int,
        help="the text's width in columns (default: the terminal's, $COLUMNS, 80 on a pipe)",
    )
    return parser


def _say(text: str) -> None:
    print(f"kvtop diff: {text}", file=sys.stderr)


def main_diff(argv: Sequence[str]) -> int:
    """`kvtop diff`; Ctrl-C ends it with one line and 130, as kvtop's other one-shot commands."""
    try:
        return _main_diff(argv)
    except KeyboardInterrupt:
        with contextlib.suppress(OSError, ValueError):
            _say("interrupted before the comparison was ready; nothing was printed.")
        return EXIT_INTERRUPTED


def _main_diff(argv: Sequence[str]) -> int:
    parser = build_parser()
    try:
        opts = parser.parse_args(list(argv))
    except SystemExit as exc:
        return int(exc.code or 0)
    problem = first_problem(opts, DIFF)
    if problem is not None:
        return refuse(parser, problem, prog="kvtop diff")
    from kvtop.diff.boots import DiffInputError, latest_two, two_logs
    from kvtop.diff.report import diff_json, diff_text
    from kvtop.model.boot_diff import boot_facts, compare

    try:
        if len(opts.logs) == 2:
            a, b = two_logs(opts.logs[0], opts.logs[1])
        else:
            a, b = latest_two(opts.logs[0] if opts.logs else None, opts.unit, opts.journal_dir)
    except DiffInputError as exc:
        _say(str(exc))
        return EXIT_UNREADABLE
    diff = compare(boot_facts(a.analysis, a.where), boot_facts(b.analysis, b.where))
    if opts.json:
        write_json(diff_json(diff))
    else:
        sys.stdout.write(diff_text(diff, opts.width, ascii_only=not takes_unicode(sys.stdout)))
    return EXIT_OK
