"""The config file (tui/kvtop/config.py): read, checked, one sentence with the key and the line when
it is bad; its settings under the command line's flags; the theme applied by the live app."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvtop.cli import _apply_config, build_parser
from kvtop.config import ConfigError, default_path, line_of, load_config, parse_config
from kvtop.live.app import KvtopApp
from kvtop.model.status.levels import DEFAULT_THRESHOLDS, Thresholds
from tests.support.paths import ROOT, STORY_LOG
from tests.support.sglang_http import FakeSGLang
from tests.support.still import StillFeed, still_snapshot
from tests.support.tui_support import fixed_clock, make_app, until

GOOD = """\
# kvtop's config
url = "http://127.0.0.1:30001"
unit = "sglang-kimi.service"
interval = 2.5
theme = "nord"

[thresholds]
kv_usage_warning_pct = 80
kv_usage_critical_pct = 92.5
safe_margin_gib = 6
temperature_warning_c = 80
"""


def test_a_good_file() -> None:
    config = parse_config(GOOD, "good.toml")
    assert (config.url, config.unit, config.interval_s, config.theme) == (
        "http://127.0.0.1:30001",
        "sglang-kimi.service",
        2.5,
        "nord",
    )
    assert config.thresholds == Thresholds(
        kv_usage_warning_pct=80,
        kv_usage_critical_pct=92.5,
        safe_margin_gib=6,
        temperature_warning_c=80,
    )


def test_an_empty_file_is_the_defaults() -> None:
    config = parse_config("", "empty.toml")
    assert config.thresholds == DEFAULT_THRESHOLDS
    assert (config.url, config.unit, config.interval_s, config.theme) == (None,) * 4


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # TOML syntax: the parser's line
        ('url = "http://x\n', "bad.toml, line 1: not valid TOML"),
        ("interval = 2\ninterval 3\n", "bad.toml, line 2: not valid TOML"),
        # unknown keys
        ("intervall = 2\n", "bad.toml, line 1: intervall is not a kvtop setting"),
        (
            "\n[thresholds]\nkv_warning = 80\n",
            "line 3: thresholds.kv_warning is not a kvtop threshold",
        ),
        # wrong types
        ('interval = "2"\n', "line 1: interval must be a number (seconds), not '2'"),
        ("interval = true\n", "line 1: interval must be a number (seconds), not True"),
        ("unit = 3\n", "line 1: unit must be a non-empty string in quotes, not 3"),
        ("thresholds = 5\n", "line 1: thresholds must be a table"),
        (
            '[thresholds]\nqueue_warning_s = "30 s"\n',
            "line 2: thresholds.queue_warning_s must be a number (seconds), not '30 s'",
        ),
        # out of range
        ("interval = 0\n", "line 1: interval must be from 0.1 to 3600 (seconds), not 0"),
        (
            "[thresholds]\n\nkv_usage_critical_pct = 120\n",
            "line 3: thresholds.kv_usage_critical_pct must be from 1 to 100",
        ),
        ("[thresholds]\nsafe_margin_gib = nan\n", "line 2: thresholds.safe_margin_gib must be"),
        # warning above critical
        (
            "[thresholds]\nkv_usage_critical_pct = 90\nkv_usage_warning_pct = 97\n",
            "line 3: thresholds.kv_usage_warning_pct makes the warning (kv_usage_warning_pct = 97)"
            " start above critical (kv_usage_critical_pct = 90)",
        ),
        (
            "[thresholds]\ntemperature_critical_c = 70\n",
            "line 2: thresholds.temperature_critical_c makes the warning",
        ),
        # values kvtop cannot use
        ('theme = "solarised"\n', "line 1: theme is 'solarised', not one of Textual's themes"),
        ('url = "ftp://example.com"\n', "line 1: url is not usable:"),
        # dotted keys are found too
        ("thresholds.power_warning_pct = 0\n", "line 1: thresholds.power_warning_pct must be"),
    ],
)
def test_each_bad_file_is_one_sentence_with_key_and_line(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "bad.toml")
    sentence = str(caught.value)
    assert expected in sentence
    assert sentence.startswith("bad.toml, line ")
    assert "\n" not in sentence and not caught.value.unreadable


def test_line_of_finds_keys_in_tables() -> None:
    text = '[a]\nx = 1\n[thresholds]\n"queue_warning_s" = 3\n'
    assert line_of(text, "thresholds.queue_warning_s") == 4
    assert line_of(text, "a.x") == 2
    assert line_of(text, "x") is None


def test_default_path_follows_xdg() -> None:
    assert default_path({"XDG_CONFIG_HOME": "/etc/xdg-me", "HOME": "/home/u"}) == Path(
        "/etc/xdg-me/kvtop/config.toml"
    )
    # Unset, empty or relative: ~/.config (the XDG base directory rule).
    for environ in ({"HOME": "/home/u"}, {"XDG_CONFIG_HOME": "", "HOME": "/home/u"}):
        assert default_path(environ) == Path("/home/u/.config/kvtop/config.toml")
    assert default_path({"XDG_CONFIG_HOME": "rel", "HOME": "/home/u"}) == Path(
        "/home/u/.config/kvtop/config.toml"
    )


def test_a_missing_default_file_is_fine_a_missing_given_one_is_not(tmp_path: Path) -> None:
    assert load_config(None, {"XDG_CONFIG_HOME": str(tmp_path)}).path is None
    with pytest.raises(ConfigError) as caught:
        load_config(str(tmp_path / "nope.toml"))
    assert caught.value.unreadable
    assert str(caught.value).startswith(f"cannot read the config file {tmp_path / 'nope.toml'}")


def test_the_default_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "kvtop").mkdir()
    (tmp_path / "kvtop" / "config.toml").write_text("interval = 5\n")
    config = load_config(None, {"XDG_CONFIG_HOME": str(tmp_path)})
    assert config.interval_s == 5 and config.path == str(tmp_path / "kvtop" / "config.toml")


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'interval = 2\nunit = "caf\xe9"\n')
    with pytest.raises(ConfigError, match=r"latin1.toml, line 2: not UTF-8"):
        load_config(str(path))


# -- under the flags ---------------------------------------------------------------------------
def _args(tmp_path: Path, *flags: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "kvtop.toml"
    path.write_text(GOOD)
    args = build_parser().parse_args(["--config", str(path), *flags])
    _apply_config(args)
    return args


def test_the_file_fills_what_no_flag_gives(tmp_path: Path) -> None:
    args = _args(tmp_path)
    assert (args.url, args.unit, args.interval, args.theme) == (
        "http://127.0.0.1:30001",
        "sglang-kimi.service",
        2.5,
        "nord",
    )
    assert args.thresholds.kv_usage_warning_pct == 80


def test_flags_override_the_file(tmp_path: Path) -> None:
    args = _args(tmp_path, "--url", "http://127.0.0.1:40000", "--interval", "0.5")
    assert (args.url, args.interval) == ("http://127.0.0.1:40000", 0.5)
    # The log to read is one choice: --log-file (or --demo) replaces the file's unit.
    assert _args(tmp_path, "--log-file", "x.log").unit is None
    assert _args(tmp_path, "--demo").unit is None
    assert _args(tmp_path, "--unit", "other.service").unit == "other.service"


def test_no_file_no_flag_is_the_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    args = build_parser().parse_args([])
    _apply_config(args)
    assert (args.url, args.unit, args.interval, args.theme) == (None, None, 1.0, None)
    assert args.thresholds == DEFAULT_THRESHOLDS


# -- the command, for real ---------------------------------------------------------------------
def kvtop(*args: str | os.PathLike[str], home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CONFIG_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "kvtop", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=ROOT,
    )


def test_a_bad_file_stops_kvtop_with_one_sentence(tmp_path: Path) -> None:
    (tmp_path / "kvtop").mkdir()
    path = tmp_path / "kvtop" / "config.toml"
    path.write_text("[thresholds]\nkv_usage_warning_pct = 99\n")
    result = kvtop("--once", "--log-file", STORY_LOG, "--no-gpus", home=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        f"kvtop: {path}, line 2: thresholds.kv_usage_warning_pct makes the warning "
        "(kv_usage_warning_pct = 99) start above critical (kv_usage_critical_pct = 95); the "
        "warning must be at most the critical value\n"
    )


def _ignored(where: object, line: int, key: str) -> str:
    return (
        f"{where}, line {line}: thresholds.{key} is ignored: kvtop raises no alert on power "
        "draw (a GPU at its power limit is normal under load); remove it"
    )


def test_power_thresholds_of_older_files_are_ignored_with_a_warning(tmp_path: Path) -> None:
    """Files written before may set power thresholds: checked, never stored, and said to be
    ignored in one sentence each on stderr; the report runs as without them."""
    text = "[thresholds]\npower_warning_pct = 90\npower_critical_pct = 98\n"
    config = parse_config(text, "old.toml")
    assert config.thresholds == DEFAULT_THRESHOLDS
    assert not hasattr(config.thresholds, "power_warning_pct")
    assert config.warnings == (
        _ignored("old.toml", 2, "power_warning_pct"),
        _ignored("old.toml", 3, "power_critical_pct"),
    )
    (tmp_path / "kvtop").mkdir()
    path = tmp_path / "kvtop" / "config.toml"
    path.write_text(text)
    result = kvtop("--once", "--log-file", STORY_LOG, "--no-gpus", home=tmp_path)
    plain = kvtop("--once", "--log-file", STORY_LOG, "--no-gpus", home=tmp_path / "none")
    assert result.returncode == plain.returncode and result.stdout.startswith("verdict:")
    assert result.stderr == (
        f"kvtop: {_ignored(path, 2, 'power_warning_pct')}\n"
        f"kvtop: {_ignored(path, 3, 'power_critical_pct')}\n"
    )


def test_a_missing_config_path_is_unreadable(tmp_path: Path) -> None:
    result = kvtop("--once", "--demo", "--config", tmp_path / "none.toml", home=tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert f"cannot read the config file {tmp_path / 'none.toml'}: no such file" in result.stderr


def test_the_files_url_is_scraped_unless_a_flag_says_otherwise(tmp_path: Path) -> None:
    (tmp_path / "kvtop").mkdir()
    with FakeSGLang() as server, FakeSGLang() as other:
        (tmp_path / "kvtop" / "config.toml").write_text(f'url = "{server.url}"\n')
        result = kvtop("--once", "--json", "--no-gpus", home=tmp_path)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["metrics"]["num_used_tokens"] == 48211
        assert [path for path, _ in server.requests if path == "/metrics"]
        result = kvtop("--once", "--json", "--no-gpus", "--url", other.url, home=tmp_path)
        assert result.returncode == 0, result.stderr
        assert [path for path, _ in other.requests if path == "/metrics"]
        assert len([p for p, _ in server.requests if p == "/metrics"]) == 1


async def test_the_live_app_takes_the_theme_and_thresholds() -> None:
    thresholds = Thresholds(kv_usage_warning_pct=50)
    app = KvtopApp(
        StillFeed(still_snapshot()),
        source_label="demo",
        demo=True,
        clock=fixed_clock,
        host_name="gpu-host",
        theme="nord",
        thresholds=thresholds,
    )
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, "the first snapshot on screen", lambda: app.state.snapshot is not None)
        assert app.theme == "nord" and app.current_theme.name == "nord"
        assert app.state.thresholds is thresholds
    assert make_app(still_snapshot()).theme == "textual-dark"  # no theme given: Textual's own
