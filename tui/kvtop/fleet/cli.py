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
from dataclasses import dataclass
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
    from kvtop.options import Deadline


@dataclass(frozen=True)
class FleetOptions:
    """The fleet's options once FLEET's rules hold (tui/kvtop/option_rules.py)."""

    prometheus: str
    selector: str | None
    bearer_file: str | None  # --prometheus-bearer-file
    once: bool
    json: bool
    width: int | None
    interval_s: float | None  # --interval; None: the config file's, else the feed's default
    config: str | None
    deadline_given: bool  # --deadline: the config file's deadline does not replace it
    watchdog: Deadline | None  # --check's and --once's deadline, told what they wait for

    @classmethod
    def parsed(cls, args: argparse.Namespace, watchdog: Deadline | None) -> FleetOptions:
        return cls(
            prometheus=args.prometheus,
            selector=args.selector,
            bearer_file=args.prometheus_bearer_file,
            once=args.once,
            json=args.json,
            width=args.width,
            interval_s=args.interval,
            config=args.config,
            deadline_given=args.deadline is not None,
            watchdog=watchdog,
        )


def _config(opts: FleetOptions) -> Config:
    """The config file (thresholds, theme, interval); raises kvtop.config.ConfigError."""
    from kvtop.config import load_config

    _waiting(opts, "the config file" + (f" {opts.config}" if opts.config else ""))
    config = load_config(opts.config)
    if opts.watchdog is not None and not opts.deadline_given and config.deadline_s:
        opts.watchdog.seconds = config.deadline_s
    return config


def _interval_s(opts: FleetOptions, config: Config) -> float:
    from kvtop.fleet.feed import DEFAULT_INTERVAL_S

    if opts.interval_s is not None:
        return float(opts.interval_s)
    return config.interval_s if config.interval_s is not None else DEFAULT_INTERVAL_S


def _feed(opts: FleetOptions, token: str | None, interval_s: float) -> FleetFeed:
    from kvtop.fleet.feed import FleetFeed, open_reader

    reader = open_reader(opts.prometheus, selector=opts.selector, bearer_token=token)
    return FleetFeed(reader, interval_s)


def _token(opts: FleetOptions) -> str | None:
    """The bearer token, or None without --prometheus-bearer-file; raises BearerFileError."""
    if opts.bearer_file is None:
        return None
    from kvtop.fleet.reader import bearer_file_warning, read_bearer_token

    _waiting(opts, f"the bearer token file {opts.bearer_file}")
    token = read_bearer_token(opts.bearer_file)
    warning = bearer_file_warning(opts.bearer_file)
    if warning:
        print(f"kvtop: warning: {warning}", file=sys.stderr)
    return token


def _waiting(opts: FleetOptions, what: str) -> None:
    if opts.watchdog is not None:
        opts.watchdog.waiting_for = what


def read_fleet(opts: FleetOptions, token: str | None) -> Fleet:
    """One fleet from Prometheus (the reader closed after it)."""
    _waiting(opts, f"Prometheus at {opts.prometheus}")
    feed = _feed(opts, token, 0.0)
    return asyncio.run(feed.read_once())


# -- the three ways to show it --------------------------------------------------------------------
def write_once(fleet: Fleet, opts: FleetOptions, thresholds: Thresholds) -> int:
    """`--once` (text) or `--once --json`; 1 when Prometheus gave nothing (the sentence is in
    the report), else 0."""
    from kvtop.report.plain_output import stdout_console, write_json

    if opts.json:
        from kvtop.fleet.json_report import fleet_json

        write_json(fleet_json(fleet, thresholds))
    else:
        from kvtop.fleet.text_report import print_fleet

        with contextlib.suppress(SystemExit):  # Rich's answer to a closed pipe
            print_fleet(fleet, stdout_console(opts.width), thresholds)
    sys.stdout.flush()
    return EXIT_UNREADABLE if fleet.problem and not fleet.deployments else EXIT_OK


def run_check(args: argparse.Namespace, watchdog: Deadline | None) -> int:
    """`--check` over the fleet: UNKNOWN (3) for anything that keeps it from judging."""
    from kvtop.config import ConfigError
    from kvtop.fleet.check import fleet_check
    from kvtop.fleet.reader import BearerFileError
    from kvtop.report.check import unknown

    try:
        problem = first_problem(args, FLEET)
        if problem is not None:
            return print_check(unknown(problem.sentence))
        opts = FleetOptions.parsed(args, watchdog)
        config = _config(opts)
        fleet = read_fleet(opts, _token(opts))
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


def run_live(opts: FleetOptions, token: str | None, config: Config) -> int:
    from kvtop.fleet.app import FleetApp

    app = FleetApp(
        _feed(opts, token, _interval_s(opts, config)),
        prometheus_url=opts.prometheus,
        thresholds=config.thresholds,
        theme=config.theme,
    )
    try:
        result = app.run()
    except KeyboardInterrupt:
        return EXIT_OK
    return result if isinstance(result, int) else EXIT_OK


def main_fleet(
    parser: argparse.ArgumentParser, args: argparse.Namespace, watchdog: Deadline | None
) -> int:
    """The fleet's command line, from parsed arguments; `watchdog`: --check's or --once's
    deadline (None live)."""
    if args.check:
        return run_check(args, watchdog)
    from kvtop.config import ConfigError
    from kvtop.fleet.reader import BearerFileError

    problem = first_problem(args, FLEET)
    if problem is None and not args.once:
        problem = _terminal_problem()
    if problem is not None:
        return refuse(parser, problem)
    opts = FleetOptions.parsed(args, watchdog)
    try:
        config = _config(opts)
    except ConfigError as exc:
        print(f"kvtop: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE if exc.unreadable else EXIT_USAGE
    try:
        token = _token(opts)
    except BearerFileError as exc:
        print(f"kvtop: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    if not opts.once:
        return run_live(opts, token, config)
    return one_report(lambda: write_once(read_fleet(opts, token), opts, config.thresholds))
