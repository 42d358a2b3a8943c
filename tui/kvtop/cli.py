"""Command line: parse options, then run the live TUI or the one-shot report (`--once`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from kvtop import __version__, help_format
from kvtop.model.safe_margin import SAFE_HEADROOM_GIB
from kvtop.option_rules import (
    CHECK,
    CHECK_SOURCES,
    EXPORT,
    LIVE,
    ONCE,
    ONE_HOST,
    Problem,
    first_problem,
    refuse,
)
from kvtop.options import (
    DEFAULT_CHECK_DEADLINE_S,
    DEFAULT_DEADLINE_S,
    DUMB_TERMINAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_UNREADABLE,
    EXIT_USAGE,
    NO_TERMINAL,
    Deadline,
    deadline_seconds,
    dumb_terminal,
    has_terminal,
    one_report,
    print_check,
    usage_error,
)
from kvtop.report.unexpected import debugging, unexpected_error
from kvtop.report.width import MAX_WIDTH, MIN_WIDTH, PIPE_WIDTH

if TYPE_CHECKING:  # imported where used, so that `kvtop --help` starts fast
    from kvtop.model.memory.gpu_view import GpuView
    from kvtop.model.snapshot import Snapshot
    from kvtop.session import Session
    from kvtop.session_options import Options
    from kvtop.sources.gpu_sources import HostGpus

# The live view sets start-up's objects aside from the garbage collector once this many
# snapshots are drawn (tui/kvtop/live/app.settle_startup_memory): the first draws the GPUs as
# soon as they answer, the second the log read whole and the first scrape; start-up is done.
SETTLE_MEMORY_AFTER_SNAPSHOTS = 2

# The second form of the command, shown under argparse's usage line for the first.
PLAN_USAGE = (
    "kvtop plan [--model DIR] [--from-log LOG | --unit UNIT] [--json] -- [SGLang arguments]",
    "kvtop diff [--json] (OLD.log NEW.log | LOG | --unit UNIT)",
)
# What an operator types most, first in the order they are met on a host.
EXAMPLES = (
    ("kvtop --unit sglang-kimi", "live: the unit's journal, GPUs, /metrics"),
    ("kvtop --once --unit sglang-kimi", "one report (--json for scripts)"),
    ("kvtop --check --unit sglang-kimi", "one monitoring line, exit 0 1 2 3"),
    ("kvtop --export --unit sglang-kimi", "Prometheus metrics on 127.0.0.1:9877"),
    ("kvtop plan --unit sglang-kimi", "the KV pool before a relaunch"),
    ("kvtop diff --unit sglang-kimi", "what the last restart changed"),
)
EPILOG = f"""examples:
{help_format.examples(EXAMPLES)}

No GPU or server at hand: `kvtop --demo` replays a Kimi-K2.5 TP8 startup on 8 simulated GPUs.
Before a launch: `kvtop plan --help` (docs/plan.md). The fleet: `kvtop --prometheus URL`
(docs/fleet.md)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvtop",
        description=(
            "Per-GPU memory and KV-cache diagnostics for SGLang servers: what each GiB on each "
            "GPU is doing, and SGLang's KV sizing arithmetic with your numbers."
        ),
        epilog=EPILOG,
        formatter_class=help_format.formatter(PLAN_USAGE),
    )
    parser.add_argument("--version", action="version", version=f"kvtop {__version__}")
    parser.add_argument(
        "--once", action="store_true", help="print one report and exit (default: the live view)"
    )
    parser.add_argument(
        "--json", action="store_true", help="with --once: print JSON (schema kvtop/1)"
    )
    parser.add_argument(
        "--width",
        metavar="COLUMNS",
        type=int,
        help=f"with --once (text): lay the report out for COLUMNS columns ({MIN_WIDTH}-{MAX_WIDTH}; "
        f"default: the terminal's width, or $COLUMNS, or {PIPE_WIDTH} in a pipe)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="print one monitoring-plugin status line (KVTOP OK|WARNING|CRITICAL|UNKNOWN) and "
        "exit 0, 1, 2 or 3 (Nagios, Icinga, cron; see docs/alerts.md)",
    )
    parser.add_argument(
        "--export",
        metavar="ADDR",
        nargs="?",
        const="",
        help="serve Prometheus metrics on ADDR (HOST:PORT, [IPV6]:PORT or PORT; default "
        "127.0.0.1:9877) until SIGTERM; with --once print one exposition body (docs/exporter.md)",
    )
    parser.add_argument(
        "--config",
        metavar="PATH",
        help="config file (default: $XDG_CONFIG_HOME/kvtop/config.toml, if there is one); "
        "flags override it",
    )
    parser.add_argument(
        "--deadline",
        metavar="SECONDS",
        type=deadline_seconds,
        help="with --check or --once: answer within this many seconds, whatever is slow "
        f"(default {DEFAULT_CHECK_DEADLINE_S:g} s for --check, inside monitoring systems' "
        f"plugin timeouts, {DEFAULT_DEADLINE_S:g} s for --once; or the config file's "
        "deadline); past it --check says UNKNOWN with what it was waiting for",
    )
    parser.add_argument("--log-file", metavar="PATH", help="SGLang log to read ('-' for stdin)")
    parser.add_argument(
        "--demo",
        action="store_true",
        help="the embedded scenario: a Kimi-K2.5 TP8 EAGLE-3 startup (SGLang 0.5.8) replayed on "
        "8 simulated GPUs, then a changing load; no GPU, server or root needed",
    )
    parser.add_argument(
        "--demo-speed",
        metavar="FACTOR",
        type=float,
        default=1.0,
        help="with --demo: replay the startup FACTOR times faster (1: about 20 s)",
    )
    parser.add_argument(
        "--compact",
        action="store_true",
        help="start the live view in compact mode (one line per GPU); `c` toggles",
    )
    parser.add_argument(
        "--unit", metavar="NAME", help="read the systemd unit's latest start from the journal"
    )
    parser.add_argument(
        "--journal-dir", metavar="DIR", help="with --unit: journal files in DIR, not the system's"
    )
    parser.add_argument(
        "--url",
        metavar="URL",
        help="SGLang server for /metrics and /server_info (default: from the log, else "
        "http://127.0.0.1:30000)",
    )
    parser.add_argument(
        "--api-key-file",
        metavar="PATH",
        help="file holding the server's --api-key (default: $SGLANG_API_KEY); sent only to "
        "--url or a loopback address, never to a non-loopback host taken from the log",
    )
    parser.add_argument(
        "--interval",
        metavar="SECONDS",
        type=float,
        help="refresh period of the live view (default 1 s, or the config file's interval)",
    )
    parser.add_argument("--no-gpus", action="store_true", help="do not read GPUs through NVML")
    parser.add_argument(
        "--no-metrics", action="store_true", help="do not contact the SGLang server over HTTP"
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
        help="also show the KV cache at this mem_fraction_static (repeatable)",
    )
    parser.add_argument(
        "--request-len",
        metavar="TOKENS",
        type=int,
        help="also answer how much mem_fraction_static N requests of this length need",
    )
    parser.add_argument(
        "--safe-margin",
        metavar="GIB",
        type=float,
        help="free GiB per GPU after startup under which large prefills risk running out of "
        f"memory (default: the config file's safe_margin_gib, else {SAFE_HEADROOM_GIB:g})",
    )
    # The fleet over Prometheus (docs/fleet.md): run by tui/kvtop/fleet/cli.py.
    parser.add_argument(
        "--prometheus",
        metavar="URL",
        help="show the fleet from this Prometheus server (kvtop exporters, DCGM, SGLang, node "
        "exporter): live, or with --once / --once --json (schema kvtop-fleet/1) / --check",
    )
    parser.add_argument(
        "--selector",
        metavar="MATCHERS",
        help="with --prometheus: only the hosts whose targets match these PromQL label matchers, "
        'e.g. \'job="gpu-prod",cluster="eu"\'',
    )
    parser.add_argument(
        "--prometheus-bearer-file",
        metavar="PATH",
        help="with --prometheus: file holding the bearer token sent to Prometheus (the only way "
        "to give one)",
    )
    parser.set_defaults(url_from_config=False)  # set by _apply_config
    return parser


def _options(args: argparse.Namespace, api_key: str | None) -> Options:
    from kvtop.session_options import Options

    return Options(
        log_file=args.log_file,
        unit=args.unit,
        journal_dir=args.journal_dir,
        url=args.url,
        url_from_config=args.url_from_config,
        api_key=api_key,
        demo=args.demo,
        # The demo is self-contained: this machine's GPUs and servers are not part of it.
        nvml=not (args.no_gpus or args.demo),
        metrics=not (args.no_metrics or args.demo),
        model_config=args.model_config,
        sglang_version=args.sglang_version,
        what_if=tuple(args.what_if),
        request_len=args.request_len,
        interval_s=args.interval,
        demo_speed=args.demo_speed,
        thresholds=args.thresholds,
    )


def _api_key(args: argparse.Namespace) -> tuple[bool, str | None]:
    from kvtop.session_options import api_key_from
    from kvtop.sources.api_key import ApiKeyError

    try:
        return True, api_key_from(args.api_key_file)
    except ApiKeyError as exc:
        print(f"kvtop: {exc}", file=sys.stderr)
        return False, None


def _live_label(options: Options) -> str:
    if options.demo:
        return "demo"
    if options.log_file or options.unit:
        return options.unit or options.source_name
    return "no log (GPUs and metrics only)"


def run_live(args: argparse.Namespace) -> int:
    """The Textual app; Textual is imported only here (the report path stays light)."""
    gpus = _gpus_asked_early(args)
    ok, api_key = _api_key(args)
    if not ok:
        _close(gpus)
        return EXIT_UNREADABLE
    from kvtop.live.app import KvtopApp

    options = _options(args, api_key)
    if options.log_file and options.log_file != "-" and not os.path.exists(options.log_file):
        _close(gpus)
        print(
            f"kvtop: {options.log_file}: no such file. Give the SGLang log's path "
            "(kvtop waits for a file that is rotated away, not for one that never existed).",
            file=sys.stderr,
        )
        return EXIT_UNREADABLE

    def make_session() -> Session:
        """After the first frame (the GPUs as NVML alone shows them): the session, and with
        it the log's parsers and the model, imported only now."""
        from kvtop.session import Session

        session = Session(options, nvml=gpus)
        session.gpus_first = True  # the overview draws the GPUs before the log is read whole
        return session

    async def first_gpus() -> tuple[GpuView, ...]:
        from kvtop.early_gpus import early_gpu_views

        return await early_gpu_views(gpus) if gpus is not None else ()

    app = KvtopApp(
        make_feed=make_session,
        first_gpus=first_gpus,
        source_label=_live_label(options),
        demo=options.demo,
        request_len=args.request_len,
        compact=True if args.compact else None,
        theme=args.theme,
        config_path=args.config,
        thresholds=args.thresholds,
        settle_memory_after=SETTLE_MEMORY_AFTER_SNAPSHOTS,
    )
    result = app.run()
    if not app.began:
        _close(gpus)  # left on the first frame: no session took the GPUs to close them
    if app.start_error is not None:  # the session could not be made (a bug): one sentence
        if debugging():
            raise app.start_error
        print(f"kvtop: {unexpected_error(app.start_error)}", file=sys.stderr)
        return EXIT_UNREADABLE
    return result if isinstance(result, int) else EXIT_OK


def _gpus_asked_early(args: argparse.Namespace) -> HostGpus | None:
    """The host's GPUs, their first reading begun at once in their library's thread: the
    driver's first answer (nvmlInit loads it) comes while the screen's modules are imported,
    not after them. None where the GPUs are not read (--no-gpus, the demo)."""
    if args.no_gpus or args.demo:
        return None
    from kvtop.sources.gpu_sources import HostGpus

    gpus = HostGpus()  # the session's own options read the processes as often
    gpus.start_early()
    return gpus


def _close(gpus: HostGpus | None) -> None:
    if gpus is not None:
        gpus.close()


def waiting(watchdog: Deadline | None, what: str) -> None:
    """What a --check or --once run waits for now (its deadline's sentence names it)."""
    if watchdog is not None:
        watchdog.waiting_for = what


def _sources_words(args: argparse.Namespace) -> str:
    parts = []
    if args.log_file:
        parts.append("standard input" if args.log_file == "-" else f"the log {args.log_file}")
    if args.unit:
        parts.append(f"the journal of {args.unit}")
    if args.url and not args.no_metrics:
        parts.append(f"the server at {args.url}")
    if not args.no_gpus and not args.demo:
        parts.append("the GPUs (NVML)")
    return ", ".join(parts) or "the sources"


def _collect(args: argparse.Namespace, api_key: str | None, watchdog: Deadline | None) -> Snapshot:
    """One Snapshot from every source asked for (the log read whole, one poll, one scrape)."""
    from kvtop.session import Session

    waiting(watchdog, _sources_words(args))
    session = Session(_options(args, api_key))

    async def collect() -> Snapshot:
        try:
            return await session.collect_once()
        finally:
            await session.close()

    with _stop_on_signals():
        return asyncio.run(collect())


def run_once(args: argparse.Namespace, watchdog: Deadline | None) -> int:
    from kvtop.sources.log_text import LogUnreadable

    ok, api_key = _api_key(args)
    if not ok:
        return EXIT_UNREADABLE
    try:
        snapshot = _collect(args, api_key, watchdog)
    except LogUnreadable as exc:
        print(f"kvtop: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    try:
        _write_report(snapshot, as_json=args.json, width=args.width)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:  # a full disk, /dev/full, an I/O error on the output
        return _cannot_write(exc)
    # Nothing could be read (the verdict says UNKNOWN and why): the report is printed, and the
    # exit status says the input could not be read, as for a log that cannot be opened.
    from kvtop.model.status.levels import Level

    return EXIT_UNREADABLE if snapshot.verdict.level == Level.UNKNOWN else EXIT_OK


def _log_kind_problem(args: argparse.Namespace) -> str | None:
    """A --log-file that cannot be read to its end now (a device, a FIFO with no writer),
    said at once by --check rather than at its deadline (a monitoring system's timeout is
    short; --once waits for a writer still to come, until its deadline or a signal)."""
    from kvtop.sources.log_kind import log_path_problem

    return log_path_problem(args.log_file) if args.log_file else None


def _write_report(snapshot: Snapshot, as_json: bool, width: int | None = None) -> None:
    from kvtop.report.plain_output import stdout_console, write_json

    if as_json:
        from kvtop.report.json_report import snapshot_json

        write_json(snapshot_json(snapshot))
        return
    from kvtop.report.text import print_snapshot

    try:
        print_snapshot(snapshot, stdout_console(width))
    except SystemExit:  # Rich's answer to a closed pipe (`kvtop --once ... | head`)
        return


def _cannot_write(exc: OSError) -> int:
    why = (exc.strerror or str(exc)).lower()
    print(f"kvtop: cannot write the report to standard output: {why}.", file=sys.stderr)
    _drop_stdout()  # the interpreter's last flush must not fail (and print) again
    return EXIT_UNREADABLE


def _drop_stdout() -> None:
    """Closed, so the interpreter's last flush skips it (closing drops what could not be
    written, and raises the same error once more)."""
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.close()


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    """While the report is being gathered, SIGINT and SIGTERM end kvtop at once with a sentence,
    even when a read is blocked (a FIFO without a writer, a quiet pipe): nothing has been
    printed yet, and no thread may hold the exit up."""

    def stop(signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        what = "interrupted" if signum == signal.SIGINT else f"stopped by {name}"
        with contextlib.suppress(OSError, ValueError):
            print(
                f"kvtop: {what} before the report was ready; nothing was printed.", file=sys.stderr
            )
            sys.stderr.flush()
        os._exit(EXIT_INTERRUPTED if signum == signal.SIGINT else EXIT_TERMINATED)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _main_live(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """The live view, when this terminal can show it."""
    problem = first_problem(args, LIVE)
    if problem is not None:
        return refuse(parser, problem)
    if dumb_terminal():
        print(f"kvtop: {DUMB_TERMINAL}", file=sys.stderr)
        return EXIT_USAGE
    if not has_terminal():
        return usage_error(parser, NO_TERMINAL)
    try:
        return run_live(args)
    except KeyboardInterrupt:
        return EXIT_OK


def _main_once(
    parser: argparse.ArgumentParser, args: argparse.Namespace, watchdog: Deadline | None
) -> int:
    """One report; a bug becomes one sentence, not a traceback (which could quote input)."""
    problem = first_problem(args, ONCE)
    if problem is not None:
        return refuse(parser, problem)
    return one_report(lambda: run_once(args, watchdog))


def _apply_config(args: argparse.Namespace, watchdog: Deadline | None = None) -> None:
    """The config file's settings where no flag gave them (flags override the file). The log
    to read is one choice: --log-file, --unit or --demo on the command line replaces the
    file's unit. Raises ConfigError."""
    from kvtop.config import load_config

    waiting(watchdog, "the config file" + (f" {args.config}" if args.config else ""))
    config = load_config(args.config)
    if watchdog is not None and args.deadline is None and config.deadline_s:
        watchdog.seconds = config.deadline_s
    if not (args.log_file or args.unit or args.demo):
        args.unit = config.unit
    args.url_from_config = args.url is None and config.url is not None
    if args.url is None:
        args.url = config.url
    if args.interval is None:
        args.interval = config.interval_s if config.interval_s is not None else 1.0
    args.theme, args.thresholds = config.theme, config.thresholds
    if getattr(args, "safe_margin", None) is not None:  # the flag over the config file
        args.thresholds = replace(args.thresholds, safe_margin_gib=args.safe_margin)


def _config_problem(args: argparse.Namespace, watchdog: Deadline | None) -> tuple[int, str] | None:
    """The config file applied to `args`, or (exit status, sentence) when it is bad."""
    from kvtop.config import ConfigError

    try:
        _apply_config(args, watchdog)
    except ConfigError as exc:
        return (EXIT_UNREADABLE if exc.unreadable else EXIT_USAGE), str(exc)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["plan"]:  # `kvtop plan ...`: SGLang's KV pool before launch (tui/kvtop/plan)
        from kvtop.plan.cli import main_plan

        return main_plan(words[1:])
    if words[:1] == ["diff"]:  # `kvtop diff ...`: two boots side by side (tui/kvtop/diff)
        from kvtop.diff.cli import main_diff

        return main_diff(words[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(words)
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 on --help
        if exc.code and "--check" in words:  # a plugin says UNKNOWN, whatever went wrong
            from kvtop.report.check import unknown

            return print_check(unknown("the command line is not valid (see kvtop --help)"))
        return int(exc.code or 0)
    watchdog: Deadline | None = None  # --check's and --once's deadline, told what they wait for
    if args.check or args.once:
        seconds = args.deadline or (DEFAULT_CHECK_DEADLINE_S if args.check else DEFAULT_DEADLINE_S)
        watchdog = Deadline(seconds, check=args.check).start()
    if (args.prometheus, args.selector, args.prometheus_bearer_file) != (None, None, None):
        from kvtop.fleet.cli import main_fleet

        return main_fleet(parser, args, watchdog)
    if args.check:
        return _main_check(args, watchdog)
    bad_config = _config_problem(args, watchdog)
    if bad_config is not None:
        print(f"kvtop: {bad_config[1]}", file=sys.stderr)
        return bad_config[0]
    problem = first_problem(args, ONE_HOST)
    if problem is not None:
        return refuse(parser, problem)
    if args.export is not None:
        return _main_export(parser, args)
    return _main_once(parser, args, watchdog) if args.once else _main_live(parser, args)


def _main_export(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """`kvtop --export [ADDR]` (tui/kvtop/export): serve /metrics, or with --once print one body."""
    from kvtop.export.command import run_export

    problem = first_problem(args, EXPORT)
    if problem is not None:
        return refuse(parser, problem)
    ok, api_key = _api_key(args)
    if not ok:
        return EXIT_UNREADABLE
    return run_export(args.export, _options(args, api_key), once=args.once)


# -- kvtop --check --------------------------------------------------------------------------------
def _check_problem(args: argparse.Namespace, watchdog: Deadline | None) -> str | None:
    """Why --check cannot run with these options and config file (None: it can)."""
    problem: Problem | None = first_problem(args, CHECK)
    if problem is None:
        # The config file is read after --check's own rules.
        bad_config = _config_problem(args, watchdog)
        if bad_config is not None:
            return f"config file: {bad_config[1]}"
        problem = first_problem(args, ONE_HOST, CHECK_SOURCES)
    return None if problem is None else problem.sentence


def _main_check(args: argparse.Namespace, watchdog: Deadline | None) -> int:
    """`kvtop --check`: every way it can fail ends as UNKNOWN (3) with one line, as monitoring
    plugins must; otherwise OK (0), WARNING (1) or CRITICAL (2) by the alert rule."""
    from kvtop.report.check import check, unknown
    from kvtop.sources.api_key import ApiKeyError
    from kvtop.sources.log_text import LogUnreadable

    try:
        # The config file is read here: inside, as all else.
        problem = _check_problem(args, watchdog)
        if problem is None:
            problem = _log_kind_problem(args)
        if problem is not None:
            return print_check(unknown(problem))
        from kvtop.session_options import api_key_from

        snapshot = _collect(args, api_key_from(args.api_key_file), watchdog)
        result = check(snapshot, args.thresholds)
    except (LogUnreadable, ApiKeyError) as exc:
        result = unknown(str(exc))
    except KeyboardInterrupt:
        result = unknown("interrupted before the check was done")
    except Exception as exc:
        if debugging():
            raise
        result = unknown(unexpected_error(exc))
    return print_check(result)
