"""Which options go together, in one place: for every command (kvtop, its --check, --export and
--prometheus forms, kvtop plan, kvtop diff) a table of the options one needs, the ones it
excludes and the ranges of numbers, each with its sentence; `first_problem` reads parsed options
against a table in order, so the first broken rule is the one the operator is told about.

Options are read by attribute (a parsed argparse namespace or a dataclass of option values); an
option is given when it is neither None, False, "" nor an empty list (a number 0 is given).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kvtop.model.sizing.formula import SAFE_MARGIN_MAX_GIB, parse_version
from kvtop.options import EXIT_USAGE
from kvtop.report.width import MAX_WIDTH, MIN_WIDTH
from kvtop.server_url import (
    CREDENTIALS,
    INVALID,
    NO_HOST,
    PORT,
    PORT_ZERO,
    SCHEME,
    SPACES,
    url_fault,
    url_problem,
)

MIN_INTERVAL_S, MAX_INTERVAL_S = 0.1, 3600
MAX_REQUEST_LEN = 100_000_000  # far beyond any model's context; keeps the arithmetic finite
MAX_DEMO_SPEED = 10_000
MAX_SELECTOR_CHARS = 2000
# kvtop plan: one GPU's memory. SGLang needs room beyond the CUDA context and NCCL (1.2 GiB, 2.4
# GiB with TP: build.CONTEXT_OVERHEAD_GIB) for weights and a KV pool, so a card under 4 GiB plans nothing; 4096 GiB is far
# beyond any accelerator and keeps the arithmetic in range.
MIN_GPU_GIB = 4
MAX_GPU_GIB = 4096
FREE_NOW = "free"  # --gpu-memory free: NVML's free memory now
MAX_WEIGHTS_GIB = 100 * 1024  # 100 TiB: past any checkpoint, keeps the arithmetic exact

JSON_WITHOUT_ONCE = "--json goes with --once"
CHECK_OWN_LINE = "--check prints its own status line: leave out --once and --json"


def given(value: object) -> bool:
    """An option the command line (or the config file) gave."""
    return value is not None and value is not False and value != "" and value != []


@dataclass(frozen=True)
class Requires:
    """`option` goes with at least one of `needs`."""

    option: str
    needs: tuple[str, ...]
    sentence: str

    def problem(self, values: Any) -> str | None:
        if given(getattr(values, self.option)) and not any(
            given(getattr(values, name)) for name in self.needs
        ):
            return self.sentence
        return None


@dataclass(frozen=True)
class Conflicts:
    """`option` leaves out every one of `others`."""

    option: str
    others: tuple[str, ...]
    sentence: str

    def problem(self, values: Any) -> str | None:
        if given(getattr(values, self.option)) and any(
            given(getattr(values, name)) for name in self.others
        ):
            return self.sentence
        return None


@dataclass(frozen=True)
class AtMostOne:
    """No more than one of `options`."""

    options: tuple[str, ...]
    sentence: str

    def problem(self, values: Any) -> str | None:
        if sum(given(getattr(values, name)) for name in self.options) > 1:
            return self.sentence
        return None


@dataclass(frozen=True)
class Needs:
    """At least one of `options` (the sources a command reads)."""

    options: tuple[str, ...]
    sentence: str

    def problem(self, values: Any) -> str | None:
        if not any(given(getattr(values, name)) for name in self.options):
            return self.sentence
        return None


@dataclass(frozen=True)
class Bounds:
    """A number from `low` to `high` (NaN never is); `sentence` may name the {value}. `each`:
    a repeatable option, every value in range."""

    option: str
    low: float
    high: float
    sentence: str
    above_low: bool = False  # `low` itself is out of range
    below_high: bool = False  # `high` itself is out of range
    each: bool = False

    def _within(self, value: float) -> bool:
        low_ok = self.low < value if self.above_low else self.low <= value
        high_ok = value < self.high if self.below_high else value <= self.high
        return low_ok and high_ok

    def problem(self, values: Any) -> str | None:
        value = getattr(values, self.option)
        if value is None:
            return None
        for one in value if self.each else (value,):
            if not self._within(one):
                return self.sentence.format(value=one)
        return None


@dataclass(frozen=True)
class Valid:
    """One option's value that a parser judges (a URL, an address): its sentence, or None."""

    option: str
    judge: Callable[[Any], str | None]

    def problem(self, values: Any) -> str | None:
        value = getattr(values, self.option)
        return None if value is None else self.judge(value)


@dataclass(frozen=True)
class When:
    """Any other combination: broken when `broken(values)`."""

    broken: Callable[[Any], bool]
    sentence: str | Callable[[Any], str]

    def problem(self, values: Any) -> str | None:
        if not self.broken(values):
            return None
        return self.sentence if isinstance(self.sentence, str) else self.sentence(values)


Rule = Requires | Conflicts | AtMostOne | Needs | Bounds | Valid | When


@dataclass(frozen=True)
class Problem:
    """Why a command cannot run with its options: the sentence and the exit status."""

    sentence: str
    exit_code: int = EXIT_USAGE


def first_problem(values: Any, *tables: Sequence[Rule]) -> Problem | None:
    """The first broken rule of `tables`, in order; None when every rule holds."""
    for table in tables:
        for rule in table:
            sentence = rule.problem(values)
            if sentence is not None:
                return Problem(sentence)
    return None


def refuse(parser: argparse.ArgumentParser, problem: Problem, prog: str = "kvtop") -> int:
    """argparse's usage line and the sentence on stderr; the problem's exit status."""
    parser.print_usage(sys.stderr)
    print(f"{prog}: {problem.sentence}", file=sys.stderr)
    return problem.exit_code


# -- the sentences of values a parser judges ------------------------------------------------------
_PROMETHEUS_EXAMPLE = "e.g. --prometheus http://prometheus:9090"


def prometheus_url_problem(url: str) -> str | None:
    """None when `url` can be Prometheus' base URL (a path prefix is fine), else a sentence that
    never quotes the URL (it could hold a password). The rule is --url's (tui/kvtop/server_url.py)."""
    fault = url_fault(url)
    if fault is None:
        return None
    example = _PROMETHEUS_EXAMPLE
    if fault == SPACES:
        return f"--prometheus takes Prometheus' address without spaces ({example})."
    if fault in (INVALID, PORT):
        return f"--prometheus is not a valid URL with a port from 1 to 65535 ({example})."
    if fault == CREDENTIALS:
        return (
            "--prometheus must not contain a user name or password: put a bearer token in a "
            "file for --prometheus-bearer-file."
        )
    if fault == SCHEME:
        return f"--prometheus takes an http:// or https:// address ({example})."
    if fault in (NO_HOST, PORT_ZERO):
        return f"--prometheus needs a host (and a port from 1 to 65535) ({example})."
    return f"--prometheus takes the base address without ?query or #fragment ({example})."


def selector_problem(selector: str) -> str | None:
    text = selector.strip()
    if not text or text in ("{}",) or len(text) > MAX_SELECTOR_CHARS:
        return "give --selector PromQL label matchers, e.g. --selector 'job=\"gpu-prod\"'"
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in text):
        return "--selector takes label matchers without control characters"
    return None


def export_address_problem(addr: str) -> str | None:
    from kvtop.export.address import AddressError, parse_address

    try:
        parse_address(addr)
    except AddressError as exc:
        return str(exc)
    return None


def gpu_memory_gib(value: str | None) -> tuple[float | None, str | None]:
    """kvtop plan's --gpu-memory in GiB (None: NVML's, or "free"), or the sentence saying what
    is wrong."""
    if value is None or value == FREE_NOW:
        return None, None
    try:
        gib = float(value)
    except ValueError:
        return None, (
            f"--gpu-memory {value!r} is neither a number nor 'free': give one GPU's memory in "
            f"GiB (e.g. 80), or free for the free memory NVML measures now"
        )
    if not MIN_GPU_GIB <= gib <= MAX_GPU_GIB:  # NaN and infinities too
        return None, (
            f"--gpu-memory {gib:g}: give one GPU's memory in GiB, from {MIN_GPU_GIB} to "
            f"{MAX_GPU_GIB} (e.g. 80); SGLang needs more than the CUDA context's 1.2–2.4 GiB"
        )
    return gib, None


def _sglang_version_problem(version: str) -> str | None:
    if parse_version(version) is None:
        return f"--sglang-version {version!r} is not a version: give e.g. 0.5.23"
    return None


# -- kvtop: the output flags, shared by one host and the fleet ------------------------------------
OUTPUT: tuple[Rule, ...] = (
    Requires("json", ("once",), JSON_WITHOUT_ONCE),
    Requires("width", ("once",), "--width goes with --once (the text report)"),
    Conflicts("width", ("json",), "--width goes with --once (the text report)"),
    Bounds("width", MIN_WIDTH, MAX_WIDTH, f"--width takes columns from {MIN_WIDTH} to {MAX_WIDTH}"),
)
INTERVAL: tuple[Rule, ...] = (
    Bounds(
        "interval",
        MIN_INTERVAL_S,
        MAX_INTERVAL_S,
        f"--interval takes seconds from {MIN_INTERVAL_S:g} to {MAX_INTERVAL_S:g}",
    ),
)

# -- kvtop: one host (live, --once, --check, --export), after OUTPUT -------------------------------
NUMBERS: tuple[Rule, ...] = (
    Bounds(
        "what_if",
        0,
        1,
        "--what-if takes a mem_fraction_static between 0 and 1, e.g. 0.9",
        above_low=True,
        below_high=True,
        each=True,
    ),
    Bounds(
        "request_len",
        1,
        MAX_REQUEST_LEN,
        f"--request-len takes a number of tokens from 1 to {MAX_REQUEST_LEN:,}",
    ),
    Bounds(
        "safe_margin",
        0,
        SAFE_MARGIN_MAX_GIB,
        f"--safe-margin takes free GiB per GPU from 0 to {SAFE_MARGIN_MAX_GIB:g}, e.g. 5",
    ),
    Bounds(
        "demo_speed",
        0,
        MAX_DEMO_SPEED,
        "--demo-speed takes a factor above 0, up to 10000",
        above_low=True,
    ),
)
SOURCES: tuple[Rule, ...] = (
    Requires("journal_dir", ("unit",), "--journal-dir goes with --unit NAME"),
    AtMostOne(("log_file", "unit", "demo"), "give one of --log-file, --unit or --demo"),
    Valid("url", url_problem),
)
ONE_HOST: tuple[Rule, ...] = (*OUTPUT, *NUMBERS, *INTERVAL, *SOURCES)
ONCE: tuple[Rule, ...] = (
    Needs(
        ("log_file", "demo", "unit", "url"),
        "--once needs --log-file PATH ('-' for stdin), --unit NAME, --url URL or --demo",
    ),
)
LIVE: tuple[Rule, ...] = (
    When(
        lambda o: o.log_file == "-",
        "the live view reads keys from the terminal, so it cannot read the log from "
        "stdin: give --log-file PATH or --unit NAME (stdin works with --once)",
    ),
)
# --check, before the config file is read (then ONE_HOST, then CHECK_SOURCES).
CHECK: tuple[Rule, ...] = (
    Conflicts("check", ("once", "json"), CHECK_OWN_LINE),
    When(
        lambda o: o.export is not None,
        "--check prints its own status line: leave out --export",
    ),
)
CHECK_SOURCES: tuple[Rule, ...] = (
    Needs(
        ("log_file", "demo", "unit", "url"),
        "--check needs --log-file PATH, --unit NAME, --url URL or --demo "
        "(or url / unit in the config file)",
    ),
)
# --export [ADDR], after ONE_HOST (`export` is "" without ADDR).
EXPORT: tuple[Rule, ...] = (
    When(lambda o: o.json, "--export writes Prometheus' text format: leave out --json"),
    When(
        lambda o: o.width is not None,
        "--width is for the text report: leave it out with --export",
    ),
    Conflicts(
        "once",
        ("export",),
        "--once --export prints one body on stdout: leave out ADDR (it is where the server "
        "listens)",
    ),
    When(
        lambda o: o.once and not any((o.log_file, o.unit, o.url, o.demo)),
        "--once --export needs --log-file PATH ('-' for stdin), --unit NAME, --url URL or --demo",
    ),
    When(
        lambda o: not o.once and export_address_problem(o.export) is not None,
        lambda o: str(export_address_problem(o.export)),
    ),
)

# -- kvtop --prometheus URL: the fleet --------------------------------------------------------------
_SINGLE_HOST = (
    ("log_file", "--log-file"),
    ("unit", "--unit"),
    ("demo", "--demo"),
    ("url", "--url"),
    ("journal_dir", "--journal-dir"),
    ("api_key_file", "--api-key-file"),
)


def _single_host(values: Any) -> list[str]:
    return [flag for name, flag in _SINGLE_HOST if getattr(values, name, None)]


FLEET: tuple[Rule, ...] = (
    When(
        lambda o: o.prometheus is None,
        lambda o: (
            f"{'--selector' if o.selector is not None else '--prometheus-bearer-file'} goes "
            "with --prometheus URL"
        ),
    ),
    When(
        lambda o: bool(_single_host(o)),
        lambda o: (
            f"--prometheus shows the fleet from Prometheus; {', '.join(_single_host(o))} read "
            "one host: give one or the other"
        ),
    ),
    When(
        lambda o: getattr(o, "export", None) is not None,
        "--export serves this host's numbers and --prometheus reads the fleet's: give one "
        "or the other",
    ),
    # Before --check's own rule, as for one host: `--check --json` is told about --json.
    Requires("json", ("once",), JSON_WITHOUT_ONCE),
    Conflicts("check", ("once", "json"), CHECK_OWN_LINE),
    *OUTPUT,
    *INTERVAL,
    Valid("prometheus", prometheus_url_problem),
    Valid("selector", selector_problem),
)

# -- kvtop plan ------------------------------------------------------------------------------------
PLAN: tuple[Rule, ...] = (
    Valid("sglang_version", _sglang_version_problem),
    Valid("gpu_memory", lambda value: gpu_memory_gib(value)[1]),
    Bounds(
        "weights_gib",
        0,
        MAX_WEIGHTS_GIB,
        "--weights-gib {value:g}: give the checkpoint's size in GiB, above 0 and at most "
        f"{MAX_WEIGHTS_GIB:,} (e.g. 15 for an 8B model in bf16)",
        above_low=True,
    ),
    Requires(
        "weights_gib",
        ("model",),
        "--weights-gib goes with --model (the config.json whose weights they are)",
    ),
    Bounds(
        "safe_margin",
        0,
        SAFE_MARGIN_MAX_GIB,
        f"--safe-margin takes free GiB per GPU from 0 to {SAFE_MARGIN_MAX_GIB:g}, e.g. 5",
    ),
    Bounds(
        "width",
        MIN_WIDTH,
        MAX_WIDTH,
        "--width {value}: give a width from " + f"{MIN_WIDTH} to {MAX_WIDTH} columns",
    ),
    Needs(
        ("model", "from_log", "unit"),
        "give --model DIR (the model's config.json) and/or --from-log LOG / --unit UNIT",
    ),
)

# -- kvtop diff ------------------------------------------------------------------------------------
DIFF: tuple[Rule, ...] = (
    Conflicts("unit", ("logs",), "give logs or --unit, not both"),
    When(
        lambda o: not o.unit and len(o.logs) not in (1, 2),
        "give two logs (A then B), one log with a restart in it, or --unit UNIT",
    ),
    Requires("journal_dir", ("unit",), "--journal-dir goes with --unit"),
    When(lambda o: o.logs.count("-") > 1, "stdin (-) can be read only once: give at most one -"),
    Bounds(
        "width",
        MIN_WIDTH,
        MAX_WIDTH,
        "--width {value}: give a width from " + f"{MIN_WIDTH} to {MAX_WIDTH} columns",
    ),
)
