"""`kvtop --prometheus URL`: the fleet live, or once as text / JSON, or `--check` over it.

Called by tui/kvtop/cli.py when --prometheus, --selector or --prometheus-bearer-file is given. Exit
statuses as for one host: 2 a usage error (with argparse's usage line), 1 input that cannot be
read (the bearer file, a bad config file's read, Prometheus giving nothing to `--once`), 0
otherwise; `--check` answers 0/1/2/3 and says UNKNOWN (3) for every failure of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from typing import TYPE_CHECKING

from kvtop.fleet.model import Fleet
from kvtop.options import (
    DUMB_TERMINAL,
    EXIT_OK,
    EXIT_UNREADABLE,
    EXIT_USAGE,
    JSON_WITHOUT_ONCE,
    NO_TERMINAL,
    dumb_terminal,
    first_broken,
    has_terminal,
    interval_problem,
    one_report,
    output_problem,
    print_check,
    usage_error,
)
from kvtop.report.unexpected import debugging, unexpected_error
from kvtop.server_url import (
    CREDENTIALS,
    INVALID,
    NO_HOST,
    PORT,
    PORT_ZERO,
    SCHEME,
    SPACES,
    url_fault,
)

if TYPE_CHECKING:  # imported where used, so that the single-host commands start fast
    from kvtop.config import Config
    from kvtop.fleet.feed import FleetFeed
    from kvtop.model.status.levels import Thresholds

MAX_SELECTOR_CHARS = 2000
_EXAMPLE = "e.g. --prometheus http://prometheus:9090"
# One host's source flags: --prometheus reads the fleet instead (attribute, flag).
_SINGLE_HOST = (
    ("log_file", "--log-file"),
    ("unit", "--unit"),
    ("demo", "--demo"),
    ("url", "--url"),
    ("journal_dir", "--journal-dir"),
    ("api_key_file", "--api-key-file"),
)


def prometheus_url_problem(url: str) -> str | None:
    """None when `url` can be Prometheus' base URL (a path prefix is fine), else a sentence that
    never quotes the URL (it could hold a password). The rule is --url's (tui/kvtop/server_url.py)."""
    fault = url_fault(url)
    if fault is None:
        return None
    if fault == SPACES:
        return f"--prometheus takes Prometheus' address without spaces ({_EXAMPLE})."
    if fault in (INVALID, PORT):
        return f"--prometheus is not a valid URL with a port from 1 to 65535 ({_EXAMPLE})."
    if fault == CREDENTIALS:
        return (
            "--prometheus must not contain a user name or password: put a bearer token in a "
            "file for --prometheus-bearer-file."
        )
    if fault == SCHEME:
        return f"--prometheus takes an http:// or https:// address ({_EXAMPLE})."
    if fault in (NO_HOST, PORT_ZERO):
        return f"--prometheus needs a host (and a port from 1 to 65535) ({_EXAMPLE})."
    return f"--prometheus takes the base address without ?query or #fragment ({_EXAMPLE})."


def _selector_problem(selector: str | None) -> str | None:
    if selector is None:
        return None
    text = selector.strip()
    if not text or text in ("{}",) or len(text) > MAX_SELECTOR_CHARS:
        return "give --selector PromQL label matchers, e.g. --selector 'job=\"gpu-prod\"'"
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text):
        return "--selector takes label matchers without control characters"
    return None


def option_problem(args: argparse.Namespace) -> str | None:
    """The first option (or combination) the fleet cannot run with; None when all can."""
    if args.prometheus is None:
        flag = "--selector" if args.selector is not None else "--prometheus-bearer-file"
        return f"{flag} goes with --prometheus URL"
    single = [flag for name, flag in _SINGLE_HOST if getattr(args, name, None)]
    rules = (
        (
            bool(single),
            f"--prometheus shows the fleet from Prometheus; {', '.join(single)} read one host: "
            "give one or the other",
        ),
        (
            getattr(args, "export", None) is not None,
            "--export serves this host's numbers and --prometheus reads the fleet's: give one "
            "or the other",
        ),
        # Before --check's own rule, as for one host: `--check --json` is told about --json.
        (args.json and not args.once, JSON_WITHOUT_ONCE),
        (
            args.check and (args.once or args.json),
            "--check prints its own status line: leave out --once and --json",
        ),
    )
    problem = first_broken(rules) or output_problem(args) or interval_problem(args.interval)
    return problem or prometheus_url_problem(args.prometheus) or _selector_problem(args.selector)


def _config(args: argparse.Namespace) -> Config:
    """The config file (thresholds, theme, interval); raises kvtop.config.ConfigError."""
    from kvtop.config import load_config

    _waiting(args, "the config file" + (f" {args.config}" if args.config else ""))
    config = load_config(args.config)
    watchdog = getattr(args, "watchdog", None)
    if watchdog is not None and getattr(args, "deadline", None) is None and config.deadline_s:
        watchdog.seconds = config.deadline_s
    return config


def _interval_s(args: argparse.Namespace, config: Config) -> float:
    from kvtop.fleet.feed import DEFAULT_INTERVAL_S

    if args.interval is not None:
        return float(args.interval)
    return config.interval_s if config.interval_s is not None else DEFAULT_INTERVAL_S


def _feed(args: argparse.Namespace, token: str | None, interval_s: float) -> FleetFeed:
    from kvtop.fleet.feed import FleetFeed, open_reader

    reader = open_reader(args.prometheus, selector=args.selector, bearer_token=token)
    return FleetFeed(reader, interval_s)


def _token(args: argparse.Namespace) -> str | None:
    """The bearer token, or None without --prometheus-bearer-file; raises BearerFileError."""
    if args.prometheus_bearer_file is None:
        return None
    from kvtop.fleet.reader import bearer_file_warning, read_bearer_token

    _waiting(args, f"the bearer token file {args.prometheus_bearer_file}")
    token = read_bearer_token(args.prometheus_bearer_file)
    warning = bearer_file_warning(args.prometheus_bearer_file)
    if warning:
        print(f"kvtop: warning: {warning}", file=sys.stderr)
    return token


def _waiting(args: argparse.Namespace, what: str) -> None:
    watchdog = getattr(args, "watchdog", None)
    if watchdog is not None:
        watchdog.waiting_for = what


def read_fleet(args: argparse.Namespace, token: str | None) -> Fleet:
    """One fleet from Prometheus (the reader closed after it)."""
    _waiting(args, f"Prometheus at {args.prometheus}")
    feed = _feed(args, token, 0.0)
    return asyncio.run(feed.read_once())


# -- the three ways to show it --------------------------------------------------------------------
def write_once(fleet: Fleet, args: argparse.Namespace, thresholds: Thresholds) -> int:
    """`--once` (text) or `--once --json`; 1 when Prometheus gave nothing (the sentence is in
    the report), else 0."""
    from kvtop.report.plain_output import stdout_console, write_json

    if args.json:
        from kvtop.fleet.json_report import fleet_json

        write_json(fleet_json(fleet, thresholds))
    else:
        from kvtop.fleet.text_report import print_fleet

        with contextlib.suppress(SystemExit):  # Rich's answer to a closed pipe
            print_fleet(fleet, stdout_console(args.width), thresholds)
    sys.stdout.flush()
    return EXIT_UNREADABLE if fleet.problem and not fleet.deployments else EXIT_OK


def run_check(args: argparse.Namespace) -> int:
    """`--check` over the fleet: UNKNOWN (3) for anything that keeps it from judging."""
    from kvtop.config import ConfigError
    from kvtop.fleet.check import fleet_check
    from kvtop.fleet.reader import BearerFileError
    from kvtop.report.check import unknown

    try:
        problem = option_problem(args)
        if problem is not None:
            return print_check(unknown(problem))
        config = _config(args)
        fleet = read_fleet(args, _token(args))
        result = fleet_check(fleet, config.thresholds)
    except ConfigError as exc:
        result = unknown(f"config file: {exc}")
    except BearerFileError as exc:
        result = unknown(str(exc))
    except KeyboardInterrupt:
        result = unknown("interrupted before the check was done")
    except Exception as exc:
        if debugging():
            raise
        result = unknown(unexpected_error(exc))
    return print_check(result)


def _terminal_problem() -> str | None:
    if dumb_terminal():
        return DUMB_TERMINAL
    if not has_terminal():
        return NO_TERMINAL
    return None


def run_live(args: argparse.Namespace, token: str | None, config: Config) -> int:
    from kvtop.fleet.app import FleetApp

    app = FleetApp(
        _feed(args, token, _interval_s(args, config)),
        prometheus_url=args.prometheus,
        thresholds=config.thresholds,
        theme=config.theme,
    )
    try:
        result = app.run()
    except KeyboardInterrupt:
        return EXIT_OK
    return result if isinstance(result, int) else EXIT_OK


def main_fleet(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """The fleet's command line, from parsed arguments."""
    if args.check:
        return run_check(args)
    from kvtop.config import ConfigError
    from kvtop.fleet.reader import BearerFileError

    problem = option_problem(args)
    if problem is None and not args.once:
        problem = _terminal_problem()
    if problem is not None:
        return usage_error(parser, problem)
    try:
        config = _config(args)
    except ConfigError as exc:
        print(f"kvtop: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE if exc.unreadable else EXIT_USAGE
    try:
        token = _token(args)
    except BearerFileError as exc:
        print(f"kvtop: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    if not args.once:
        return run_live(args, token, config)
    return one_report(lambda: write_once(read_fleet(args, token), args, config.thresholds))
