"""The pure parts behind the live view's input: what-if values and counts, the GPU order, the theme
written into the config file (real files in a temporary directory)."""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from kvtop.config import ConfigError, parse_config, save_theme, with_theme
from kvtop.live.view_state import ViewState, step_selection
from kvtop.model.memory.gpu_order import ORDER_KEYS, next_order, sorted_gpus
from kvtop.model.sizing import tuning
from kvtop.model.sizing.replay import SizingInputs
from tests.support.tui_support import demo_snapshot

# pre-load free 100 GiB, post-load free 22.97 GiB: SGLang's minimum viable value is 0.7703.
INPUTS = SizingInputs(0.88, 100.0, 22.97, 70_272.0, 159_277, 1, None, 6.0, 262_144)


def test_the_minimum_viable_value_is_sglangs() -> None:
    assert f"{tuning.minimum_viable_mfs(INPUTS):.4f}" == "0.7703"


@pytest.mark.parametrize(
    ("typed", "words"),
    [
        (
            "0.77",
            "at 0.77 SGLang fails at startup: the KV cache would be empty (the weights "
            "leave it no memory); the minimum is 0.7703, use a value above it",
        ),
        ("0.7", "the minimum is 0.7703"),
        ("0", "at 0.00 SGLang fails at startup: the KV cache would be empty"),
        ("-1", "at -1.00 SGLang fails at startup: the KV cache would be empty"),
        (
            "1",
            "at 1.00 SGLang fails at startup: its reserve pre-load free × (1 − "
            "mem_fraction_static) would be 0.00 GiB",
        ),
        ("1.2", "values from 0.7703 to under 1 can start"),
        ("90", "(did you mean 0.90?)"),
    ],
)
def test_every_value_sglang_cannot_start_with_is_a_startup_failure(typed: str, words: str) -> None:
    view = tuning.what_if_at(INPUTS, tuning.parse_mfs(typed))
    assert not view.starts
    assert view.warning is not None and words in view.warning
    assert view.warning.startswith(f"at {tuning.mfs_text(tuning.parse_mfs(typed))} SGLang fails")


def test_just_over_the_minimum_starts() -> None:
    view = tuning.what_if_at(INPUTS, 0.78)
    assert view.starts and view.result.would_start and view.result.tokens > 0


def test_under_the_minimum_the_what_if_has_no_kv_cache_whatever_the_anchor() -> None:
    # The anchor (the logged token count) alone would give 0.77 a few thousand tokens.
    result = INPUTS.what_if(0.77)
    assert not result.would_start and result.kv_pool_gib == 0.0


@pytest.mark.parametrize(
    ("typed", "value"),
    [("0.9", 0.9), (".92", 0.92), ("90%", 0.9), (" 0.7705 ", 0.7705), ("1", 1.0), ("88", 88.0)],
)
def test_parse_mfs_takes_the_number_as_sglang_would(typed: str, value: float) -> None:
    assert tuning.parse_mfs(typed) == value


@pytest.mark.parametrize("typed", ["abc", "0.930.95", "", "nan", "inf"])
def test_parse_mfs_rejects_what_is_not_a_number(typed: str) -> None:
    with pytest.raises(ValueError, match=r"is not a number: type a fraction such as 0\.90"):
        tuning.parse_mfs(typed)


@pytest.mark.parametrize(
    ("typed", "count"),
    [
        ("300k", 300_000),
        ("32k", 32_000),
        ("1.5M", 1_500_000),
        ("262144", 262_144),
        ("1,000", 1000),
        ("2m", 2_000_000),
    ],
)
def test_counts_are_decimal(typed: str, count: int) -> None:
    assert tuning.parse_count(typed) == count


def test_mfs_text_keeps_what_was_typed() -> None:
    assert [tuning.mfs_text(v) for v in (0.9, 0.77, 0.7703, 0.768, 1.2)] == [
        "0.90",
        "0.77",
        "0.7703",
        "0.768",
        "1.20",
    ]


# -- the GPU order -----------------------------------------------------------------------------
def _gpus():  # type: ignore[no-untyped-def]
    return demo_snapshot().gpus


def test_orders_cycle() -> None:
    assert ORDER_KEYS == ("index", "free", "used", "temperature")
    assert [next_order(k) for k in ORDER_KEYS] == ["free", "used", "temperature", "index"]


def test_sorted_gpus_ties_by_index_and_lost_gpus_last() -> None:
    gpus = _gpus()
    lost = replace(gpus[0], sample=replace(gpus[0].sample, status="lost"))
    hot = (lost, *gpus[1:])
    assert [g.sample.index for g in sorted_gpus(hot, "free")] == [2, 6, 1, 4, 3, 7, 5, 0]
    assert [g.sample.index for g in sorted_gpus(hot, "temperature")] == [1, 3, 4, 6, 2, 5, 7, 0]
    assert [g.sample.index for g in sorted_gpus(gpus[::-1], "index")] == list(range(8))


def test_selection_moves_in_the_shown_order() -> None:
    state = ViewState(source_label="demo", snapshot=demo_snapshot(), gpu_order="temperature")
    state.selected_gpu = 6  # order 1 3 4 6 2 5 0 7
    assert state.selected_position() == 3
    assert step_selection(state, 1) == 2 and step_selection(state, -1) == 4


# -- the theme in the config file --------------------------------------------------------------
def test_with_theme_adds_the_key_before_the_first_table() -> None:
    text = '# mine\nurl = "http://127.0.0.1:30000"  # server\n\n[thresholds]\nqueue_warning_s = 5\n'
    assert with_theme(text, "nord") == (
        '# mine\nurl = "http://127.0.0.1:30000"  # server\ntheme = "nord"\n\n'
        "[thresholds]\nqueue_warning_s = 5\n"
    )
    assert with_theme("", "nord") == 'theme = "nord"\n'
    assert with_theme("interval = 2", "nord") == 'interval = 2\ntheme = "nord"\n'


def test_with_theme_replaces_the_value_and_keeps_its_comment() -> None:
    assert with_theme("theme = 'gruvbox'   # dark\r\ninterval = 2\r\n", "nord") == (
        'theme = "nord"   # dark\r\ninterval = 2\r\n'
    )


def test_save_theme_creates_the_default_file(tmp_path: Path) -> None:
    path = save_theme("nord", environ={"XDG_CONFIG_HOME": str(tmp_path)})
    assert path == tmp_path / "kvtop" / "config.toml"
    assert path.read_text(encoding="utf-8") == 'theme = "nord"\n'
    assert parse_config(path.read_text(encoding="utf-8")).theme == "nord"


def test_save_theme_keeps_mode_and_writes_through_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "kvtop.toml"
    real.parent.mkdir()
    real.write_text("interval = 2\n", encoding="utf-8")
    real.chmod(0o600)
    link = tmp_path / "config.toml"
    link.symlink_to(real)
    assert save_theme("dracula", str(link)) == link
    assert link.is_symlink()
    assert real.read_text(encoding="utf-8") == 'interval = 2\ntheme = "dracula"\n'
    assert stat.S_IMODE(os.stat(real).st_mode) == 0o600
    assert [p.name for p in real.parent.iterdir()] == ["kvtop.toml"]  # no temporary left


@pytest.mark.parametrize(
    ("content", "words"),
    [("url = \n", "line 1"), ("colour = 'x'\n", "colour is not a kvtop setting")],
)
def test_save_theme_never_rewrites_a_wrong_file(tmp_path: Path, content: str, words: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        save_theme("nord", str(path))
    assert words in str(caught.value) and "theme not saved" in str(caught.value)
    assert path.read_text(encoding="utf-8") == content


def test_save_theme_refuses_a_theme_kvtop_cannot_read_back(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    with pytest.raises(ConfigError, match="not one of Textual's themes"):
        save_theme("my-own", str(path))
    assert not path.exists()


def test_save_theme_in_an_unwritable_directory_is_a_sentence(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):  # root: permissions do not stop it; a file in the way does
            target = tmp_path / "file"
            target.write_text("", encoding="utf-8")
            path = str(target / "config.toml")
        else:
            path = str(locked / "config.toml")
        with pytest.raises(ConfigError, match=r"cannot write .*config\.toml: .*--config PATH"):
            save_theme("nord", path)
    finally:
        locked.chmod(0o700)
