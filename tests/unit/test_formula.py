"""SGLang sizing arithmetic, checked against worked examples and real log figures."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvtop.model.sizing.formula import (
    GIB,
    DraftBudgetRule,
    HostKvPool,
    WhatIf,
    concurrent_requests,
    draft_budget_rule,
    element_size_bytes,
    format_version,
    host_kv_pool,
    inferred_cell_size_bytes,
    kv_cache_dtype_name,
    kv_pool_gib,
    mfs_for_requests,
    mfs_for_tokens,
    mha_cell_size_bytes,
    min_viable_mfs,
    mla_cell_size_bytes,
    parse_version,
    profiled_tokens,
    reserve_gib,
    rest_gib,
    version_text,
    what_if,
)
from kvtop.model.sizing.replay import SizingExplanation
from kvtop.sglang.version_hint import VersionRange

# The Kimi-K2.5 story: TP8, MLA 512 + 64, 61 layers, bf16 KV, page 1, mfs 0.88.
KIMI_CELL = 70_272
KIMI_TOKENS = 159_277
KIMI_PRE = 93.17
KIMI_POST = 21.60
KIMI_HEADROOM = 7.40


def test_gib_is_binary() -> None:
    assert GIB == 1_073_741_824


# --------------------------------------------------------------------------- the Kimi story


def test_kimi_mla_cell_size() -> None:
    assert mla_cell_size_bytes(512, 64, 61, 2) == 576 * 61 * 2 == KIMI_CELL


def test_kimi_kv_pool_matches_logged_size() -> None:
    # "KV Cache is allocated. #tokens: 159277, KV size: 10.42 GB"
    assert f"{kv_pool_gib(KIMI_TOKENS, KIMI_CELL):.2f}" == "10.42"
    assert kv_pool_gib(KIMI_TOKENS, KIMI_CELL) == pytest.approx(10.424092, abs=1e-6)


def test_kimi_reserve() -> None:
    assert round(reserve_gib(KIMI_PRE, 0.88), 2) == 11.18


def test_kimi_rest_is_post_minus_reserve() -> None:
    assert rest_gib(KIMI_POST, KIMI_PRE, 0.88) == pytest.approx(21.60 - 11.1804)


def test_kimi_host_pool_ratio_4() -> None:
    pool = host_kv_pool(KIMI_TOKENS, KIMI_CELL, hicache_ratio=4)
    assert pool.tokens == 637_109
    assert pool.bytes == 637_109 * KIMI_CELL
    assert f"{pool.gb:.2f}" == "44.77"
    assert round(pool.gb * 8) == 358  # every TP rank allocates its own host pool


# --------------------------------------------------------------------------- cross-checks


def test_deepseek_v3_logged_kv_size() -> None:
    # DeepSeek-V3 log: "#tokens: 161488, KV size: 10.57 GB".
    assert f"{kv_pool_gib(161_488, mla_cell_size_bytes(512, 64, 61, 2)):.2f}" == "10.57"


def test_min_viable_mfs_matches_sglang_failure_line() -> None:
    # "minimum viable = 1 - available/pre = 0.9112"
    assert f"{min_viable_mfs(137.90, 12.25):.4f}" == "0.9112"


def test_too_small_mfs_fails_to_profile() -> None:
    rest = rest_gib(12.25, 137.90, 0.88)
    assert rest < 0
    assert rest == pytest.approx(-4.298)
    assert profiled_tokens(rest, KIMI_CELL) <= 0


def test_min_viable_mfs_needs_positive_pre() -> None:
    with pytest.raises(ValueError):
        min_viable_mfs(0, 12.25)


def test_qwen3_8b_mha_k_size() -> None:
    cell = mha_cell_size_bytes(8, 128, None, 36, 2)
    assert cell == 8 * 256 * 36 * 2 == 147_456
    # MHA logs K and V separately; each is half of the pool.
    assert f"{kv_pool_gib(404_890, cell) / 2:.2f}" == "27.80"


# --------------------------------------------------------------------------- profiled tokens


def test_profiled_tokens_exact_integer() -> None:
    # int(12.283 × 2^30) // 70272 with the float value SGLang itself would compute.
    rest = rest_gib(KIMI_POST, KIMI_PRE, 0.90)
    assert profiled_tokens(rest, KIMI_CELL) == 187_681
    assert profiled_tokens(10.0, KIMI_CELL) == 10 * GIB // KIMI_CELL == 152_797


def test_profiled_tokens_user_cap_then_page_align() -> None:
    assert profiled_tokens(10.0, KIMI_CELL, max_total_tokens=100_000) == 100_000
    assert profiled_tokens(10.0, KIMI_CELL, max_total_tokens=200_000) == 152_797
    # Cap first, alignment second: 100_001 → 100_000 with 16-token pages.
    assert profiled_tokens(10.0, KIMI_CELL, page_size=16, max_total_tokens=100_001) == 100_000
    assert profiled_tokens(10.0, KIMI_CELL, page_size=64) == 152_797 // 64 * 64 == 152_768


def test_profiled_tokens_float_cell_floors() -> None:
    assert profiled_tokens(1.0, 1000.5) == GIB // 1000.5 == 1_073_205
    assert isinstance(profiled_tokens(1.0, 1000.5), int)


def test_profiled_tokens_rejects_bad_inputs() -> None:
    with pytest.raises(ValueError):
        profiled_tokens(1.0, 0)
    with pytest.raises(ValueError):
        profiled_tokens(1.0, KIMI_CELL, page_size=0)


def test_kv_pool_padding_is_one_page() -> None:
    assert kv_pool_gib(0, GIB) == 1.0
    assert kv_pool_gib(0, GIB, page_size=64) == 64.0
    assert kv_pool_gib(100, 1024, page_size=16) == 116 * 1024 / GIB


def test_inferred_cell_size_round_trips() -> None:
    inferred = inferred_cell_size_bytes(10.42, KIMI_TOKENS)
    assert inferred == pytest.approx(10.42 * GIB / 159_278)
    # Two-decimal log rounding keeps the inference within ±0.005 GiB of the true cell.
    assert abs(inferred - KIMI_CELL) < 0.005 * GIB / 159_278
    with pytest.raises(ValueError):
        inferred_cell_size_bytes(1.0, -1)


# --------------------------------------------------------------------------- element sizes


@pytest.mark.parametrize(
    ("spelling", "expected"),
    [
        ("bf16", 2),
        ("bfloat16", 2),
        ("fp16", 2),
        ("float16", 2),
        ("fp8_e4m3", 1),
        ("fp8_e5m2", 1),
        ("fp4_e2m1", 0.5),
        ("torch.bfloat16", 2),
        ("torch.float16", 2),
        ("torch.float8_e4m3fn", 1),
        ("torch.float8_e5m2", 1),
        ("torch.uint8", 1),
        ("torch.float32", 4),
        (" BF16 ", 2),
    ],
)
def test_element_size_spellings(spelling: str, expected: float) -> None:
    assert element_size_bytes(spelling) == expected


def test_element_size_auto_follows_model_dtype() -> None:
    assert element_size_bytes("auto") == 2
    assert element_size_bytes(None) == 2
    assert element_size_bytes("auto", "torch.float32") == 4
    assert element_size_bytes("auto", "float16") == 2
    assert element_size_bytes("auto", "bfloat16", kv_cache_quant_fp8=True) == 1
    # An explicit choice beats the checkpoint's FP8 hint.
    assert element_size_bytes("bf16", "bfloat16", kv_cache_quant_fp8=True) == 2
    assert kv_cache_dtype_name("auto", "torch.bfloat16", True) == "float8_e4m3fn"
    assert kv_cache_dtype_name("fp8_e5m2") == "float8_e5m2"


def test_element_size_unknown_is_none() -> None:
    assert element_size_bytes("int3") is None
    assert element_size_bytes("torch.complex64") is None


# --------------------------------------------------------------------------- what-if


def _story_what_if(mfs: float, **extra: Any) -> WhatIf:
    return what_if(
        mfs,
        pre_load_free_gib=KIMI_PRE,
        post_load_free_gib=KIMI_POST,
        cell_size_bytes=KIMI_CELL,
        current_tokens=KIMI_TOKENS,
        headroom_after_graphs_gib=KIMI_HEADROOM,
        **extra,
    )


def test_what_if_090_adds_about_28k_tokens() -> None:
    result = what_if(
        0.90,
        pre_load_free_gib=KIMI_PRE,
        post_load_free_gib=KIMI_POST,
        cell_size_bytes=KIMI_CELL,
        current_tokens=KIMI_TOKENS,
        headroom_after_graphs_gib=KIMI_HEADROOM,
        context_len=262_144,
    )
    assert result.tokens == profiled_tokens(rest_gib(KIMI_POST, KIMI_PRE, 0.90), KIMI_CELL)
    assert result.tokens == 187_681
    # 0.02 × 93.17 GiB = 1.86 GiB more pool; ±0.005 GiB inputs move it by ~150 tokens.
    assert 28_000 <= result.delta_tokens <= 28_700
    assert result.delta_pct == pytest.approx(18, abs=0.5)
    assert result.reserve_gib == pytest.approx(9.317)
    assert result.rest_gib == pytest.approx(12.283)
    assert result.delta_kv_gib == pytest.approx(1.86, abs=0.01)
    assert result.headroom_after_graphs_gib == pytest.approx(5.54, abs=0.02)
    assert result.kv_pool_gib == pytest.approx(kv_pool_gib(187_681, KIMI_CELL))
    assert result.requests_at_context == pytest.approx(187_681 / 262_144)
    assert result.would_start


def test_what_if_092() -> None:
    result = _story_what_if(0.92)
    assert result.tokens == 216_154
    assert 56_500 <= result.delta_tokens <= 57_200
    assert result.delta_pct == pytest.approx(35.7, abs=0.5)
    assert result.headroom_after_graphs_gib == pytest.approx(3.68, abs=0.02)
    assert result.requests_at_context is None


def test_what_if_anchored_on_current_shows_no_delta() -> None:
    # Rounded log inputs replay 0.88 as 159,209 tokens; the anchor removes that artefact.
    unanchored = _story_what_if(0.88)
    assert unanchored.tokens == 159_209
    anchored = _story_what_if(0.88, mem_fraction_static_current=0.88)
    assert anchored.tokens == KIMI_TOKENS
    assert anchored.delta_tokens == 0
    assert anchored.headroom_after_graphs_gib == pytest.approx(KIMI_HEADROOM)
    raised = _story_what_if(0.90, mem_fraction_static_current=0.88)
    expected_gain = int(0.02 * KIMI_PRE * GIB / KIMI_CELL)
    assert abs(raised.delta_tokens - expected_gain) <= 1


def test_what_if_respects_user_cap_and_page() -> None:
    result = what_if(
        0.92,
        pre_load_free_gib=KIMI_PRE,
        post_load_free_gib=KIMI_POST,
        cell_size_bytes=KIMI_CELL,
        current_tokens=150_000,
        max_total_tokens=170_000,
        page_size=64,
        mem_fraction_static_current=0.88,
    )
    assert result.tokens == 170_000 // 64 * 64
    assert result.delta_tokens == result.tokens - 150_000


def test_what_if_too_low_would_not_start() -> None:
    result = _story_what_if(0.70)
    assert result.tokens <= 0
    assert not result.would_start
    assert result.kv_pool_gib == 0.0
    assert result.delta_tokens == -KIMI_TOKENS


def test_concurrent_requests() -> None:
    assert concurrent_requests(KIMI_TOKENS, 8192) == pytest.approx(19.44, abs=0.01)
    assert concurrent_requests(KIMI_TOKENS, 262_144) == pytest.approx(0.61, abs=0.01)
    with pytest.raises(ValueError):
        concurrent_requests(100, 0)


# --------------------------------------------------------------------------- solving for mfs


def _assert_smallest_mfs(
    mfs: float, tokens: int, pre: float, post: float, cell: float, page: int
) -> None:
    assert round(mfs, 3) == mfs
    at = profiled_tokens(rest_gib(post, pre, mfs), cell, page)
    below = profiled_tokens(rest_gib(post, pre, round(mfs - 0.001, 3)), cell, page)
    assert at >= tokens
    assert below < tokens


def test_mfs_for_tokens_story() -> None:
    mfs = mfs_for_tokens(187_681, KIMI_PRE, KIMI_POST, KIMI_CELL)
    assert mfs == 0.9
    _assert_smallest_mfs(mfs, 187_681, KIMI_PRE, KIMI_POST, KIMI_CELL, 1)
    # One token more than 0.900 gives needs the next step.
    assert mfs_for_tokens(187_682, KIMI_PRE, KIMI_POST, KIMI_CELL) == 0.901


def test_mfs_for_tokens_page_aligned() -> None:
    mfs = mfs_for_tokens(200_000, KIMI_PRE, KIMI_POST, KIMI_CELL, page_size=64)
    _assert_smallest_mfs(mfs, 200_000, KIMI_PRE, KIMI_POST, KIMI_CELL, 64)


def test_mfs_for_tokens_impossible_exceeds_one() -> None:
    assert mfs_for_tokens(10_000_000, KIMI_PRE, KIMI_POST, KIMI_CELL) > 1.0


def test_mfs_for_tokens_rejects_non_positive() -> None:
    with pytest.raises(ValueError):
        mfs_for_tokens(0, KIMI_PRE, KIMI_POST, KIMI_CELL)


def test_mfs_for_requests() -> None:
    mfs = mfs_for_requests(2, 131_072, KIMI_PRE, KIMI_POST, KIMI_CELL)
    assert mfs == mfs_for_tokens(262_144, KIMI_PRE, KIMI_POST, KIMI_CELL)
    _assert_smallest_mfs(mfs, 262_144, KIMI_PRE, KIMI_POST, KIMI_CELL, 1)
    assert 0.95 < mfs < 0.96


@given(
    tokens=st.integers(min_value=1, max_value=400_000),
    pre=st.floats(min_value=40.0, max_value=140.0),
    weights=st.floats(min_value=1.0, max_value=30.0),
    cell=st.one_of(
        st.integers(min_value=1_000, max_value=200_000),
        st.floats(min_value=1_000.0, max_value=200_000.0),
    ),
    page=st.sampled_from([1, 16, 64]),
)
def test_mfs_for_tokens_round_trips(
    tokens: int, pre: float, weights: float, cell: float, page: int
) -> None:
    post = pre - weights
    mfs = mfs_for_tokens(tokens, pre, post, cell, page)
    _assert_smallest_mfs(mfs, tokens, pre, post, cell, page)


# --------------------------------------------------------------------------- host pool


def test_host_pool_default_ratio_is_two() -> None:
    pool = host_kv_pool(1000, 100)
    assert pool == HostKvPool(tokens=2001, bytes=200_100, gb=200_100 / 1e9)


def test_host_pool_size_wins_over_ratio() -> None:
    pool = host_kv_pool(KIMI_TOKENS, KIMI_CELL, hicache_ratio=4, hicache_size_gb=100)
    expected_tokens = int(100e9 // KIMI_CELL) + 1
    assert pool.tokens == expected_tokens
    assert pool.gb == pytest.approx(100, abs=0.001)


def test_host_pool_zero_size_falls_back_to_ratio() -> None:
    assert host_kv_pool(1000, 100, hicache_size_gb=0).tokens == 2001


def test_host_pool_pages() -> None:
    # 1000 × 2 = 2000 tokens → 31 full 64-token pages + 1 = 32 pages.
    pool = host_kv_pool(1000, 100, page_size=64)
    assert pool.tokens == 32 * 64
    assert pool.bytes == 32 * 64 * 100


# --------------------------------------------------------------------------- versions


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.5.8.post1", (0, 5, 8)),
        ("v0.5.14", (0, 5, 14)),
        ("0.5.23", (0, 5, 23)),
        ("0.4.10.post2", (0, 4, 10)),
        ("0.5.10rc0", (0, 5, 10)),
        ("SGLang 0.5.9", (0, 5, 9)),
        ("0.5", (0, 5)),
        ("junk", None),
        ("", None),
        ("7", None),
    ],
)
def test_parse_version(text: str, expected: tuple[int, ...] | None) -> None:
    assert parse_version(text) == expected


def test_draft_rule_0_5_13_is_not_budgeted() -> None:
    rule = draft_budget_rule((0, 5, 13))
    assert rule.budgeted is False
    assert "0.5.13 does not budget the draft model" in rule.text
    assert "pre-load free × (1 − mem_fraction_static)" in rule.text
    assert "CUDA graphs" in rule.text
    assert "slightly exceed" not in rule.text


def test_draft_rule_0_5_14_is_budgeted() -> None:
    rule = draft_budget_rule((0, 5, 14))
    assert rule.budgeted is True
    assert "inside the mem_fraction_static budget" in rule.text
    assert draft_budget_rule((0, 6)).budgeted is True


def test_draft_rule_reference_version_text() -> None:
    rule = draft_budget_rule(parse_version("0.5.8.post1"))
    assert rule == DraftBudgetRule(
        budgeted=False,
        text=(
            "SGLang 0.5.8 does not budget the draft model: its weights, its KV cache and all "
            "CUDA graphs are paid from the reserve pre-load free × (1 − mem_fraction_static)."
        ),
    )


def test_draft_rule_old_versions_mention_pool_headroom() -> None:
    for version in ((0, 5, 6), (0, 4, 10), (0, 5)):
        rule = draft_budget_rule(version)
        assert rule.budgeted is False
        assert "slightly exceed the mem_fraction_static budget" in rule.text


def test_draft_rule_unknown_version() -> None:
    rule = draft_budget_rule(None)
    assert rule.budgeted is None
    assert "unknown" in rule.text
    assert "0.5.13" in rule.text
    assert "0.5.14" in rule.text


# --------------------------------------------------------------------------- labels (one name each)


def _range(low: tuple[int, int, int], high: tuple[int, int, int]) -> VersionRange:
    return VersionRange(low, high, ("a line format",))


def test_version_range_stays_a_range() -> None:
    """The version a rule picks from the log's range is shown as the range, never as its end."""
    hint = _range((0, 5, 3), (0, 5, 8))
    assert format_version((0, 5, 8), hint) == "0.5.3–0.5.8"
    assert format_version((0, 5, 3), hint) == "0.5.3–0.5.8"
    assert version_text((0, 5, 8), hint) == "0.5.3–0.5.8"
    assert version_text(None, _range((0, 5, 10), (0, 5, 16))) == "0.5.10–0.5.16"
    assert version_text(None, VersionRange((0, 3, 0), (0, 9, 999))) == "unknown"
    # One version pinned down, or the user's --sglang-version outside the range: as given.
    assert format_version((0, 5, 9), _range((0, 5, 9), (0, 5, 9))) == "0.5.9"
    assert format_version((0, 5, 20), hint) == "0.5.20"
    assert format_version((0, 5, 8)) == "0.5.8"


def test_draft_rule_names_the_range_and_its_older_end() -> None:
    rule = draft_budget_rule((0, 5, 8), _range((0, 5, 3), (0, 5, 8)))
    assert rule.text.startswith("SGLang 0.5.3–0.5.8 does not budget the draft model")
    assert "0.5.8 does not" not in rule.text.replace("0.5.3–0.5.8 does not", "")
    # 0.5.3 still pads the pools (≤0.5.6): said, for the older end only.
    assert "Up to 0.5.6 the target KV cache can also slightly exceed that budget." in rule.text
    later = draft_budget_rule((0, 5, 13), _range((0, 5, 9), (0, 5, 13)))
    assert later.text.startswith("SGLang 0.5.9–0.5.13 does not budget")
    assert "Up to 0.5.6" not in later.text
    budgeted = draft_budget_rule((0, 5, 14), _range((0, 5, 14), (0, 9, 999)))
    assert budgeted.text.startswith("SGLang ≥0.5.14: draft weights")


def _explained(rank_mins: tuple[str | None, str | None], rank: str) -> SizingExplanation:
    return SizingExplanation(
        rank=rank,
        mem_fraction_static=0.88,
        steps=(),
        reserve_spent=(),
        free_after_pool_gib=None,
        free_after_startup_gib=None,
        what_ifs=(),
        reverse=(),
        draft_rule=None,
        notes=(),
        pre_load_rank=rank_mins[0],
        post_load_rank=rank_mins[1],
    )


def test_rank_words_name_the_rank_of_each_figure() -> None:
    """The formula's label says whose numbers it uses: the minimum's rank and its own rank."""
    assert (
        _explained(("TP0", "TP0"), "TP0").rank_words()
        == "all figures from TP0, the rank with the minimum free memory"
    )
    assert _explained(("TP3", "TP3"), "TP0").rank_words() == (
        "pre-/post-load free: the minimum over ranks, at TP3 · "
        "logged tokens and where the reserve went: TP0"
    )
    assert _explained(("TP3", "TP5"), "TP0").rank_words() == (
        "pre-load free: the minimum over ranks, at TP3; post-load free: at TP5 · "
        "logged tokens and where the reserve went: TP0"
    )
    assert _explained((None, None), "TP0").rank_words() == (
        "logged tokens and where the reserve went: TP0"
    )
    assert _explained(("", ""), "").rank_words() == "the single GPU's numbers"
    # The formula opened on another GPU: the reserve's rows are that GPU's rank's.
    assert _explained(("TP0", "TP0"), "TP0").rank_words("TP2") == (
        "pre-/post-load free: the minimum over ranks, at TP0 · "
        "logged tokens: TP0 · where the reserve went: TP2 (selected GPU)"
    )
    assert _explained(("TP0", "TP0"), "TP0").rank_words("TP0") == (
        "all figures from TP0, the rank with the minimum free memory"
    )
