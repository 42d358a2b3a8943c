"""kvtop plan's arithmetic against real boots: every fixture log with a known model reproduces
its cell size exactly and its max_total_num_tokens within one page; SGLang's default
mem_fraction_static; the launch arguments; the what-if and the plan share their code."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtop.model.analysis import analyse
from kvtop.model.sizing import formula, tuning
from kvtop.model.sizing.calibration import CalibrationError, calibrate
from kvtop.model.sizing.default_mfs import LaunchShape, default_mem_fraction_static
from kvtop.model.sizing.engine import Built, build
from kvtop.model.sizing.launch_args import (
    LaunchArgsError,
    merge_launch_args,
    parse_launch_args,
)
from kvtop.model.sizing.plan import NOT_ENOUGH_MEMORY, OOM_RISK, POOL_UNDER_CONTEXT
from kvtop.plan.gather import read_boot, read_model
from kvtop.sglang.story import fold_lines
from tests.support.paths import FIXTURES, REAL_LOGS, STORY_LOG

MODELS = FIXTURES / "models"
# (model directory, log, launch arguments the log does not say: 02 runs DP attention)
KNOWN = {
    "kimi-story": ("kimi-k2.5", STORY_LOG, []),
    "20-qwen3-8b": ("qwen3-8b", REAL_LOGS / "20-issue6291-v046-single-gpu-qwen3-full.log", []),
    "02-qwen3-30b": (
        "qwen3-30b-a3b",
        REAL_LOGS / "02-pr17392-dp4-tp4-ep4-qwen3moe-a.log",
        ["--dp-size", "4", "--enable-dp-attention"],
    ),
    "50-granite": (
        "granite-4.0-h-micro",
        REAL_LOGS / "50-pr18040-granite-4h-micro-mamba-single-gpu.log",
        [],
    ),
}


def _plan(model: str | None, log: Path, words: list[str]) -> Built:
    startup = read_boot(str(log), None)
    calib = calibrate(startup)
    info = read_model(str(MODELS / model)) if model else None
    seen = {"tp_size": calib.tp_size}
    args = merge_launch_args(parse_launch_args(words), calib.server_args, seen)
    return build(info, calib, args, None, calib.version, "log")


@pytest.mark.parametrize("case", list(KNOWN))
def test_the_config_gives_the_logged_cell_size_exactly(case: str) -> None:
    model, log, words = KNOWN[case]
    built = _plan(model, log, words)
    calib = calibrate(read_boot(str(log), None))
    assert calib.tokens and calib.kv_pool_gib
    cell = built.planner.cells.full_bytes
    # SGLang logs the pool as (tokens + page) × cell / 2^30 with two decimals: the config's cell
    # must give exactly the logged figure (K + V for MHA, the latent for MLA).
    pool = (calib.tokens + calib.page_size) * cell / formula.GIB
    assert round(pool, 2) == pytest.approx(calib.kv_pool_gib, abs=0.011)
    assert cell == int(cell)  # a whole number of bytes, as SGLang's int cell size


@pytest.mark.parametrize("case", list(KNOWN))
def test_the_plan_calibrated_by_its_log_reproduces_the_logged_tokens(case: str) -> None:
    model, log, words = KNOWN[case]
    built = _plan(model, log, words)
    result = built.planner.at(built.mem_fraction_static)
    calib = calibrate(read_boot(str(log), None))
    assert calib.tokens is not None
    assert abs(result.pools.tokens - calib.tokens) <= calib.page_size


def _calibratable() -> list[Path]:
    logs = []
    for log in [*sorted(REAL_LOGS.glob("*.log")), STORY_LOG]:
        with log.open(encoding="utf-8", errors="replace") as handle:
            startup = fold_lines(handle).current
        try:
            calib = calibrate(startup)
        except CalibrationError:
            continue
        if calib.tokens:
            logs.append(log)
    return logs


@pytest.mark.parametrize("log", _calibratable(), ids=lambda p: p.stem[:2])
def test_every_calibratable_fixture_log_reproduces_itself_without_a_config(log: Path) -> None:
    built = _plan(None, log, [])
    result = built.planner.at(built.mem_fraction_static)
    calib = calibrate(read_boot(str(log), None))
    assert calib.tokens is not None
    assert abs(result.pools.tokens - calib.tokens) <= calib.page_size
    if calib.free_after_startup_gib is not None:
        assert result.free_after_startup_gib == pytest.approx(
            calib.free_after_startup_gib, abs=0.011
        )


def test_the_logs_that_calibrate_are_the_ones_with_free_memory_lines() -> None:
    names = {p.name[:2] for p in _calibratable()}
    assert {"02", "11", "20", "36", "50", "ki"} <= names


def test_granite_mamba_slots_follow_sglang_ratio_split() -> None:
    built = _plan("granite-4.0-h-micro", KNOWN["50-granite"][1], [])
    result = built.planner.at(built.mem_fraction_static)
    assert result.pools.mamba_slots == 38  # the log's max_mamba_cache_size
    state = 39 * built.planner.cells.mamba_state_bytes / formula.GIB  # type: ignore[operator]
    assert round(state, 2) == pytest.approx(2.77, abs=0.011)  # conv + ssm as logged


def test_kimi_at_090_agrees_with_the_formula_screen_what_if() -> None:
    """The plan from the log at another fraction is the formula screen's what-if, token for token."""
    built = _plan("kimi-k2.5", STORY_LOG, ["--mem-fraction-static", "0.9"])
    result = built.planner.at(0.9)
    calib = calibrate(read_boot(str(STORY_LOG), None))
    what_if = formula.what_if(
        0.9,
        pre_load_free_gib=min(r.pre_load_free_gib for r in calib.ranks),
        post_load_free_gib=min(r.post_load_free_gib for r in calib.ranks),
        cell_size_bytes=70272,
        current_tokens=159277,
        mem_fraction_static_current=0.88,
    )
    assert result.pools.tokens == what_if.tokens
    assert built.mfs_source == "given"
    # It starts with the margin kept, but 187,761 tokens hold 0.72 of one request of Kimi's
    # 262,144-token context: the verdict says so, with the shorter context that fits.
    assert result.verdict.kind == POOL_UNDER_CONTEXT
    assert "0.72 of one request of the context length (262,144 tokens)" in " ".join(
        result.verdict.reasons
    )
    assert result.verdict.fixes[0] == "--context-length 187392"  # 187,749 tokens, whole KiB
    assert result.verdict.fixes[1].startswith("--tp-size 16 (no fraction holds one")
    # Free after startup falls by exactly the extra pools: the target's and the EAGLE draft's,
    # which holds as many tokens (0.30 + 0.30 GB K + V for 159,278 rows in the log).
    draft_bytes = built.planner.cells.draft_bytes
    assert draft_bytes == pytest.approx(0.60 * formula.GIB / 159278, rel=0.01)
    extra = what_if.delta_tokens * (70272 + draft_bytes) / formula.GIB
    assert result.free_after_startup_gib == pytest.approx(7.40 - extra, abs=0.01)


def test_the_what_if_verdict_is_the_plans() -> None:
    inputs = tuning.SizingInputs(0.88, 93.17, 21.6, 70272, 159277, 1, None, 7.4, 262144)
    assert not tuning.what_if_at(inputs, 0.70).starts
    assert "safe margin" in (tuning.what_if_at(inputs, 0.92).warning or "")
    built = _plan("kimi-k2.5", STORY_LOG, [])
    assert built.planner.at(0.70).verdict.kind == NOT_ENOUGH_MEMORY
    assert built.planner.at(0.92).verdict.kind == OOM_RISK


def test_not_enough_memory_names_the_least_fraction_that_starts() -> None:
    built = _plan("kimi-k2.5", STORY_LOG, [])
    result = built.planner.at(0.7)
    least = result.verdict.minimum_mem_fraction_static
    assert least == pytest.approx(formula.min_viable_mfs(93.17, 21.6), abs=0.001)
    assert built.planner.pools_at(least).tokens > 0  # type: ignore[arg-type]
    assert built.planner.pools_at(least - 0.001).tokens <= 0  # type: ignore[operator]
    assert any(fix.startswith("--mem-fraction-static 0.9") for fix in result.verdict.fixes)


def test_oom_risk_fix_leaves_the_safe_margin() -> None:
    built = _plan("kimi-k2.5", STORY_LOG, [])
    result = built.planner.at(0.93)
    assert result.verdict.kind == OOM_RISK
    fix = next(f for f in result.verdict.fixes if f.startswith("--mem-fraction-static"))
    safe = float(fix.split()[1])
    assert built.planner.at(safe).verdict.kind == POOL_UNDER_CONTEXT  # not OOM_RISK
    assert built.planner.at(safe + 0.001).verdict.kind == OOM_RISK


def test_fp8_kv_doubles_the_tokens_of_a_bf16_pool() -> None:
    bf16 = _plan(None, STORY_LOG, [])
    fp8 = _plan(None, STORY_LOG, ["--kv-cache-dtype", "fp8_e4m3"])
    tokens = bf16.planner.at(0.88).pools.tokens
    assert fp8.planner.at(0.88).pools.tokens == pytest.approx(2 * tokens, abs=2)


def test_max_running_requests_is_sglangs_rule() -> None:
    built = _plan("qwen3-8b", KNOWN["20-qwen3-8b"][1], [])
    result = built.planner.at(built.mem_fraction_static)
    # 404,890 / 8,096 × 512 is over 4096: the clamp's top, + 0.4.6's extra request-pool row
    # (ReqToTokenPool(size=max_num_reqs + 1)): 4097, as the log says.
    assert result.max_running_requests == 4097
    kimi = _plan("kimi-k2.5", STORY_LOG, []).planner.at(0.88)
    assert kimi.max_running_requests == 48  # EAGLE's reset, as the log's summary says


# --------------------------------------------------------------------------- default mfs


def test_default_fraction_h20_tp8_eagle3_by_version() -> None:
    shape = LaunchShape(tp_size=8, speculative_algorithm="EAGLE3", cuda_graph_max_bs=512)
    assert default_mem_fraction_static(97871, shape, (0, 5, 8)).mem_fraction_static == 0.827
    newer = default_mem_fraction_static(97871, shape, (0, 5, 23))
    assert newer.mem_fraction_static > 0.827  # no draft term from 0.5.14


def test_default_fraction_h100_tp1_0523() -> None:
    # 512 + 8192 × 1.5 + 1/8 GiB, + decode graphs 256 × 2 + 58 prefill graph sizes × 8.
    result = default_mem_fraction_static(81559, LaunchShape(), (0, 5, 23))
    assert result.reserved_mb == 12928 + 512 + 58 * 8
    assert result.mem_fraction_static == round((81559 - 13904) / 81559, 3) == 0.830


def test_default_fraction_old_rule() -> None:
    result = default_mem_fraction_static(81920, LaunchShape(tp_size=8), (0, 4, 6))
    assert result.mem_fraction_static == 0.81


# --------------------------------------------------------------------------- launch args


def test_launch_args_read_both_spellings_and_skip_unknown_flags() -> None:
    given = parse_launch_args(
        [
            "--tp",
            "8",
            "--mem-fraction-static=0.9",
            "--enable-dp-attention",
            "--log-level",
            "info",
            "--trust-remote-code",
            "--kv-cache-dtype",
            "fp8_e4m3",
        ]
    )
    assert given.values == {
        "tp_size": 8,
        "mem_fraction_static": 0.9,
        "enable_dp_attention": True,
        "kv_cache_dtype": "fp8_e4m3",
    }
    assert given.ignored == ("--log-level", "--trust-remote-code")


@pytest.mark.parametrize(
    ("words", "said"),
    [
        (["--mem-fraction-static", "abc"], "is not a number"),
        (["--mem-fraction-static", "1.5"], "between 0 and 1"),
        (["--tp-size", "0"], "≥ 1"),
        (["--kv-cache-dtype", "fp9"], "must be one of"),
        (["--page-size"], "needs a value"),
        (["0.9"], "is not a --flag"),
    ],
)
def test_bad_launch_args_are_a_sentence(words: list[str], said: str) -> None:
    with pytest.raises(LaunchArgsError, match=said):
        parse_launch_args(words)


def test_given_arguments_win_over_the_logged_ones() -> None:
    args = merge_launch_args(
        parse_launch_args(["--mem-fraction-static", "0.9"]),
        {"mem_fraction_static": 0.88, "tp_size": 8, "page_size": "x"},
    )
    assert args.float_of("mem_fraction_static") == 0.9
    assert args.source_of("mem_fraction_static") == "given"
    assert args.source_of("tp_size") == "log"
    assert args.get("page_size") is None  # a logged value that does not read is left out


@pytest.mark.parametrize("milli", range(860, 921, 5))
def test_the_what_if_is_the_plan_on_the_story_log(milli: int) -> None:
    """The formula screen's and --once's what-if and `kvtop plan --from-log` are one engine:
    the same tokens, the same free memory after startup (tightest rank, the draft's pool
    growing with the target's) and the same verdict at every fraction."""
    mfs = milli / 1000
    with STORY_LOG.open(encoding="utf-8") as handle:
        report = analyse(fold_lines(handle), str(STORY_LOG), what_if_mfs=[mfs])
    assert report.explanation is not None and report.explanation.inputs is not None
    what_if = next(w for w in report.explanation.what_ifs if w.mem_fraction_static == mfs)
    view = tuning.what_if_at(report.explanation.inputs, mfs)
    words = ["--mem-fraction-static", str(mfs)]
    planned = _plan(None, STORY_LOG, words).planner.at(mfs)
    assert what_if.tokens == planned.pools.tokens
    assert what_if.headroom_after_graphs_gib == pytest.approx(
        planned.free_after_startup_gib, abs=1e-9
    )
    said_oom = view.warning is not None and "safe margin" in view.warning
    assert said_oom == (planned.verdict.kind == OOM_RISK)
