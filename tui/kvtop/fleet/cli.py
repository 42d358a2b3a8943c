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
from kvtop.option_rules import FLEET, Problem, first_problem, refuse
from kvtop.options import (
    DUMB_TERMINAL,
    EXIT_OK,
    EXIT_UNREADABLE,
    EXIT_USAGE,
    NO_TERMINAL,
    dumb_terminal,
    has_terminal,
    one_report,
    print_check,
)
from kvtop.report.unexpected import debugging, unexpected_error

if TYPE_CHECKING:  # imported where used, so that the single-host commands start fast
    from kvtop.config import Config
    from kvtop.fleet.feed import FleetFeed
    from kvtop.model.status.levels import Thresholds


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
        problem = first_problem(args, FLEET)
        if problem is not None:
            return print_check(unknown(problem.sentence))
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


def _terminal_problem() -> Problem | None:
    if dumb_terminal():
        return Problem(DUMB_TERMINAL)
    if not has_terminal():
        return Problem(NO_TERMINAL)
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

    problem = first_problem(args, FLEET)
    if problem is None and not args.once:
        problem = _terminal_problem()
    if problem is not None:
        return refuse(parser, problem)
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
