"""Command line: parse options and run the one-shot report (the live TUI comes later)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from importlib import resources

from tui import __version__

EXIT_OK, EXIT_UNREADABLE, EXIT_USAGE = 0, 1, 2
DEMO_LOG = "kimi-k25-tp8-eagle3-hicache-0.5.8.log"
MAX_REQUEST_LEN = 100_000_000  # far beyond any model's context; keeps the arithmetic finite


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvtop",
        description=(
            "Per-GPU memory and KV-cache diagnostics for SGLang servers: what each GiB on each "
            "GPU is doing, and SGLang's KV sizing arithmetic with your numbers."
        ),
    )
    parser.add_argument("--version", action="version", version=f"kvtop {__version__}")
    parser.add_argument("--once", action="store_true", help="print one report and exit")
    parser.add_argument(
        "--json", action="store_true", help="with --once: print JSON (schema kvtop/1)"
    )
    parser.add_argument("--log-file", metavar="PATH", help="SGLang log to read ('-' for stdin)")
    parser.add_argument(
        "--demo",
        action="store_true",
        help="use the embedded sample: an 8-GPU Kimi-K2.5 TP8 EAGLE-3 startup (SGLang 0.5.8)",
    )
    parser.add_argument(
        "--model-config",
        metavar="PATH",
        help="the model's config.json (default: from model_path or the Hugging Face cache)",
    )
    parser.add_argument(
        "--sglang-version",
        metavar="X.Y.Z",
        help="SGLang version, when the log's formats are ambiguous",
    )
    parser.add_argument(
        "--what-if",
        metavar="MFS",
        type=float,
        action="append",
        default=[],
        help="also show the KV pool at this mem_fraction_static (repeatable)",
    )
    parser.add_argument(
        "--request-len",
        metavar="TOKENS",
        type=int,
        help="also answer how much mem_fraction_static N requests of this length need",
    )
    return parser


def _usage_error(parser: argparse.ArgumentParser, message: str) -> int:
    parser.print_usage(sys.stderr)
    print(f"kvtop: {message}", file=sys.stderr)
    return EXIT_USAGE


def run_once(args: argparse.Namespace) -> int:
    from rich.console import Console

    from tui.model.analysis import analyse
    from tui.report.json_report import to_json
    from tui.report.text import print_report
    from tui.sglang.story import fold_lines
    from tui.sources.log_text import LogUnreadable, log_lines

    with ExitStack() as stack:
        if args.demo:
            path = str(
                stack.enter_context(resources.as_file(resources.files("tui.data") / DEMO_LOG))
            )
            source = "demo: " + DEMO_LOG
        else:
            path = args.log_file
            source = "stdin" if path == "-" else path
        try:
            with log_lines(path) as lines:
                tracker = fold_lines(lines)
        except LogUnreadable as exc:
            print(f"kvtop: {exc}", file=sys.stderr)
            return EXIT_UNREADABLE
    report = analyse(
        tracker,
        source,
        config_path=args.model_config,
        version_override=args.sglang_version,
        what_if_mfs=args.what_if,
        request_len=args.request_len,
    )
    if args.json:
        json.dump(to_json(report), sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        console = Console(highlight=False, soft_wrap=False, width=max(100, Console().width))
        try:
            print_report(report, console)
        except SystemExit:  # Rich's answer to a closed pipe (`kvtop --once ... | head`)
            return EXIT_OK
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 on --help
        return int(exc.code or 0)
    if args.log_file and args.demo:
        return _usage_error(parser, "give either --log-file or --demo, not both")
    if args.json and not args.once:
        return _usage_error(parser, "--json goes with --once")
    if args.what_if and any(not 0 < v < 1 for v in args.what_if):
        return _usage_error(
            parser, "--what-if takes a mem_fraction_static between 0 and 1, e.g. 0.9"
        )
    if args.request_len is not None and not 1 <= args.request_len <= MAX_REQUEST_LEN:
        return _usage_error(
            parser, f"--request-len takes a number of tokens from 1 to {MAX_REQUEST_LEN:,}"
        )
    if not args.once:
        return _usage_error(
            parser,
            "the live view is not built yet; run `kvtop --once --log-file PATH` "
            "(or `kvtop --once --demo`) for the report",
        )
    if not args.log_file and not args.demo:
        return _usage_error(parser, "--once needs --log-file PATH ('-' for stdin) or --demo")
    try:
        return run_once(args)
    except BrokenPipeError:  # `kvtop --once ... | head`
        sys.stderr.close()
        return EXIT_OK
    except KeyboardInterrupt:
        return 130
