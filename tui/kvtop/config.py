"""The config file: `$XDG_CONFIG_HOME/kvtop/config.toml` or `--config PATH`, read and checked.

Keys: url, unit, interval, deadline, theme and a [thresholds] table (docs/alerts.md; docs/usage.md, "Config
file"). A bad file is one sentence naming the key and its line (ConfigError), never a
traceback; a missing default file is no file at all.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path

from kvtop.model.sizing.formula import SAFE_MARGIN_MAX_GIB
from kvtop.model.status.levels import DEFAULT_THRESHOLDS, Thresholds

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

CONFIG_RELATIVE = Path("kvtop") / "config.toml"
MAX_CONFIG_BYTES = 1 << 20  # a config file is a few lines; a huge one is not ours
INTERVAL_RANGE_S = (0.1, 3600.0)  # the same bounds as --interval
TOP_KEYS = ("url", "unit", "interval", "deadline", "theme", "thresholds")
DEADLINE_RANGE_S = (1.0, 3600.0)  # the same bounds as --deadline

# Each threshold: (lowest, highest, what it is in words).
THRESHOLD_RANGES: dict[str, tuple[float, float, str]] = {
    "kv_usage_warning_pct": (1, 100, "a percentage of the KV pool"),
    "kv_usage_critical_pct": (1, 100, "a percentage of the KV pool"),
    "queue_warning_s": (0, 86_400, "seconds"),
    "queue_critical_s": (0, 86_400, "seconds"),
    "safe_margin_gib": (0, SAFE_MARGIN_MAX_GIB, "GiB"),
    "temperature_warning_c": (1, 150, "degrees Celsius"),
    "temperature_critical_c": (1, 150, "degrees Celsius"),
    "startup_warning_s": (1, 7 * 86_400, "seconds"),
    "state_pool_climb_pct": (1, 100, "points of the state pool's slots"),
    "state_pool_window_s": (60, 86_400, "seconds"),
    "retractions_per_min_warning": (0.1, 10_000, "retracted requests per minute"),
    "retractions_window_s": (60, 86_400, "seconds"),
    "kv_idle_grace_s": (30, 86_400, "seconds"),
    "gpu_growth_warning_gib_per_day": (0.01, 1024, "GiB per day"),
    "host_growth_warning_gib_per_day": (0.01, 1024, "GiB per day"),
    "growth_min_span_s": (600, 7 * 86_400, "seconds"),
}
# (warning, critical): the warning must not start above critical.
THRESHOLD_PAIRS = (
    ("kv_usage_warning_pct", "kv_usage_critical_pct"),
    ("queue_warning_s", "queue_critical_s"),
    ("temperature_warning_c", "temperature_critical_c"),
)
assert set(THRESHOLD_RANGES) == {f.name for f in fields(Thresholds)}
# Thresholds of files written before that kvtop no longer uses: still checked, never stored; the
# file's reader is told they are ignored (a GPU at its power limit is normal under load; clocks
# lowered for heat or a hardware slowdown are the "throttle" alert).
IGNORED_THRESHOLDS: dict[str, tuple[float, float, str]] = {
    "power_warning_pct": (1, 200, "a percentage of the power limit"),
    "power_critical_pct": (1, 200, "a percentage of the power limit"),
}


class ConfigError(Exception):
    """One sentence: the file, the line, the key and what is wrong. `unreadable`: the file
    could not be read at all (kvtop exits 1), else its content is wrong (kvtop exits 2)."""

    def __init__(self, sentence: str, *, unreadable: bool = False) -> None:
        super().__init__(sentence)
        self.unreadable = unreadable


@dataclass(frozen=True, slots=True)
class Config:
    path: str | None = None  # the file read; None when there was none
    url: str | None = None
    unit: str | None = None
    interval_s: float | None = None
    deadline_s: float | None = None  # --check's and --once's total deadline
    theme: str | None = None
    thresholds: Thresholds = DEFAULT_THRESHOLDS
    # Sentences about settings read but not used (load_config prints them on stderr).
    warnings: tuple[str, ...] = ()


def default_path(environ: Mapping[str, str] = os.environ) -> Path:
    """$XDG_CONFIG_HOME/kvtop/config.toml; ~/.config when it is unset, empty or relative
    (the XDG base directory rule)."""
    base = environ.get("XDG_CONFIG_HOME", "")
    if not base or not os.path.isabs(base):
        home = environ.get("HOME") or os.path.expanduser("~")
        base = os.path.join(home, ".config")
    return Path(base) / CONFIG_RELATIVE


def load_config(path: str | None = None, environ: Mapping[str, str] = os.environ) -> Config:
    """`--config PATH` (it must exist), else the default file (none is fine)."""
    file = Path(path) if path is not None else default_path(environ)
    if path is None:
        try:
            if not file.is_file():
                return Config()
        except OSError:  # a home this user may not enter (`sudo -u nobody` keeps HOME): none
            return Config()
    try:
        with open(file, "rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        why = (exc.strerror or str(exc)).lower()
        raise ConfigError(
            f"cannot read the config file {file}: {why}; give a readable file with "
            "--config PATH (or leave --config out)",
            unreadable=True,
        ) from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{file} is over 1 MiB: that is not a kvtop config file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{file}, line {line}: not UTF-8 text; save it as UTF-8") from None
    config = parse_config(text, str(file))
    for sentence in config.warnings:
        print(f"kvtop: {sentence}", file=sys.stderr)
    return config


# -- where a key is --------------------------------------------------------------------------
_HEADER = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$")
_ASSIGN = re.compile(r"^\s*([A-Za-z0-9_\-.\"' ]+?)\s*=")
_TOML_AT = re.compile(r"\s*\(at line (\d+), column \d+\)")


def _dotted(key: str) -> str:
    return ".".join(part.strip().strip("\"'") for part in key.split("."))


def line_of(text: str, dotted_key: str) -> int | None:
    """The line that sets `dotted_key` ("thresholds.queue_warning_s"), or opens that table."""
    table = ""
    for number, line in enumerate(text.splitlines(), 1):
        header = _HEADER.match(line)
        if header:
            table = _dotted(header.group(1))
            if table == dotted_key:
                return number
            continue
        assign = _ASSIGN.match(line)
        if assign:
            key = _dotted(assign.group(1))
            if (f"{table}.{key}" if table else key) == dotted_key:
                return number
    return None


class _Where:
    """Sentences about one file's keys: `PATH, line N: KEY ...`."""

    def __init__(self, text: str, name: str) -> None:
        self.text, self.name = text, name

    def error(self, key: str, problem: str) -> ConfigError:
        return ConfigError(self.sentence(key, problem))

    def sentence(self, key: str, problem: str) -> str:
        line = line_of(self.text, key)
        where = f"{self.name}, line {line}" if line is not None else self.name
        return f"{where}: {key} {problem}"


# -- checking values -------------------------------------------------------------------------
def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


def _number(where: _Where, key: str, value: object, low: float, high: float, unit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise where.error(key, f"must be a number ({unit}), not {_shown(value)}")
    number = float(value)
    if not math.isfinite(number) or not low <= number <= high:
        raise where.error(key, f"must be from {low:g} to {high:g} ({unit}), not {_shown(value)}")
    return number


def _text(where: _Where, key: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise where.error(key, f"must be a non-empty string in quotes, not {_shown(value)}")
    return value.strip()


def _theme(where: _Where, value: object) -> str:
    name = _text(where, "theme", value)
    from textual.theme import BUILTIN_THEMES  # only when a theme is given (the report stays light)

    if name not in BUILTIN_THEMES:
        known = ", ".join(sorted(BUILTIN_THEMES))
        raise where.error("theme", f"is {name!r}, not one of Textual's themes ({known})")
    return name


def _url(where: _Where, value: object) -> str:
    from kvtop.server_url import url_problem

    url = _text(where, "url", value)
    problem = url_problem(url)
    if problem is not None:
        raise where.error("url", f"is not usable: {problem}")
    return url


def _thresholds(where: _Where, table: object, warnings: list[str]) -> Thresholds:
    if not isinstance(table, dict):
        raise where.error("thresholds", "must be a table ([thresholds] with one key per line)")
    values: dict[str, float] = {}
    for key, value in table.items():
        if key in IGNORED_THRESHOLDS:
            _number(where, f"thresholds.{key}", value, *IGNORED_THRESHOLDS[key])
            warnings.append(
                where.sentence(
                    f"thresholds.{key}",
                    "is ignored: kvtop raises no alert on power draw (a GPU at its power limit "
                    "is normal under load); remove it",
                )
            )
            continue
        if key not in THRESHOLD_RANGES:
            known = ", ".join(THRESHOLD_RANGES)
            raise where.error(f"thresholds.{key}", f"is not a kvtop threshold (known: {known})")
        low, high, unit = THRESHOLD_RANGES[key]
        values[key] = _number(where, f"thresholds.{key}", value, low, high, unit)
    thresholds = replace(DEFAULT_THRESHOLDS, **values)
    for warning, critical in THRESHOLD_PAIRS:
        low, high = getattr(thresholds, warning), getattr(thresholds, critical)
        if low > high:
            key = warning if warning in values else critical
            raise where.error(
                f"thresholds.{key}",
                f"makes the warning ({warning} = {low:g}) start above critical "
                f"({critical} = {high:g}); the warning must be at most the critical value",
            )
    return thresholds


def parse_config(text: str, name: str = "config.toml") -> Config:
    """The config in `text` (from the file `name`), checked; ConfigError when it is not right."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        at = _TOML_AT.search(message)
        line = f", line {at.group(1)}" if at else ""
        why = _TOML_AT.sub("", message).rstrip(".")
        raise ConfigError(
            f"{name}{line}: not valid TOML ({why}); see the example in kvtop's docs/usage.md"
        ) from None
    except (RecursionError, MemoryError):  # arrays or tables nested thousands deep
        raise ConfigError(
            f"{name}: nested too deep to be kvtop's settings; see the example in kvtop's docs/usage.md"
        ) from None
    where = _Where(text, name)
    for key in data:
        if key not in TOP_KEYS:
            raise where.error(key, f"is not a kvtop setting (known: {', '.join(TOP_KEYS)})")
    interval = data.get("interval")
    warnings: list[str] = []
    thresholds = _thresholds(where, data.get("thresholds", {}), warnings)
    return Config(
        path=name,
        url=_url(where, data["url"]) if "url" in data else None,
        unit=_text(where, "unit", data["unit"]) if "unit" in data else None,
        interval_s=None
        if interval is None
        else _number(where, "interval", interval, *INTERVAL_RANGE_S, "seconds"),
        deadline_s=None
        if data.get("deadline") is None
        else _number(where, "deadline", data["deadline"], *DEADLINE_RANGE_S, "seconds"),
        theme=_theme(where, data["theme"]) if "theme" in data else None,
        thresholds=thresholds,
        warnings=tuple(warnings),
    )


# -- saving the theme (the palette's "Save theme to config") ---------------------------------
_STRING_VALUE = re.compile(
    r"""^(?P<head>[^=]*=\s*)(?P<value>"(?:[^"\\\n]|\\.)*"|'[^'\n]*')(?P<tail>.*)$"""
)


def with_theme(text: str, theme: str) -> str:
    """`text` (a config file) with `theme = "…"` set: the existing line's value replaced (its
    comment kept), else a new line before the first table (top-level keys must come first)."""
    line = f"theme = {json.dumps(theme)}"
    lines = text.splitlines(keepends=True)
    number = line_of(text, "theme")
    if number is not None:
        old = lines[number - 1]
        match = _STRING_VALUE.match(old.rstrip("\r\n"))
        if match is None:
            raise ConfigError(
                f"line {number} sets theme in a way kvtop cannot rewrite; write "
                f"{line} there yourself"
            )
        ending = old[len(old.rstrip("\r\n")) :]
        lines[number - 1] = match["head"] + json.dumps(theme) + match["tail"] + ending
        return "".join(lines)
    first_table = next((i for i, raw in enumerate(lines) if _HEADER.match(raw)), None)
    if first_table is None:
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        return "".join([*lines, line + "\n"])
    at = first_table
    while at > 0 and not lines[at - 1].strip():
        at -= 1  # after the last top-level line, before the blank lines that set the table off
    return "".join([*lines[:at], line + "\n", *lines[at:]])


def save_theme(
    theme: str, path: str | None = None, environ: Mapping[str, str] = os.environ
) -> Path:
    """Set `theme` in the config file (`--config PATH`, else the default one, created with its
    directory when missing); every other key and comment stays. Written whole or not at all
    (a temporary file renamed over it); a symlinked file is written where the link points.
    ConfigError: a sentence with what to do."""
    file = Path(path) if path is not None else default_path(environ)
    target = Path(os.path.realpath(file))
    try:
        text = target.read_text(encoding="utf-8") if target.exists() else ""
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"cannot read {file} to save the theme: {why.lower()}") from None
    try:
        parse_config(text, str(file))  # never rewrite a file that is already wrong
        new = with_theme(text, theme)
        if parse_config(new, str(file)).theme != theme:
            raise ConfigError(f"{file}: theme {theme!r} could not be saved")
    except ConfigError as exc:
        raise ConfigError(f"theme not saved: {exc} (fix the file, then save again)") from None
    _write_whole(target, new)
    return file


def _write_whole(target: Path, text: str) -> None:
    from kvtop.saved_files import replace_whole

    try:
        replace_whole(target, text)
    except OSError as exc:
        why = (exc.strerror or str(exc)).lower()
        raise ConfigError(
            f"cannot write {target}: {why}; check that directory's permissions, or give a "
            "writable file with --config PATH"
        ) from None
