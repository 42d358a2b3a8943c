"""Two boots compared: each quantity's change per rank, and the change in KV tokens split into
what moved it (free memory at start, weights, loading, mem_fraction_static, the rest of the
pool's change, the pool's bytes per token), the parts adding up to the logged change."""

from __future__ import annotations

import dataclasses

import pytest

from kvtop.model.analysis import analyse
from kvtop.model.boot_diff import (
    CELL,
    FREE_AT_START,
    GIB,
    MFS,
    POOL,
    WEIGHTS,
    BootFacts,
    boot_facts,
    compare,
)
from kvtop.sglang.story import fold_lines
from tests.support.paths import REAL_LOGS, STORY_LOG


def _facts(path: object, where: str) -> BootFacts:
    with open(str(path), encoding="utf-8") as handle:
        return boot_facts(analyse(fold_lines(handle), where), where)


STORY = _facts(STORY_LOG, "story")


def _with(facts: BootFacts, mfs: float | None = None, **rank: float) -> BootFacts:
    """The story's boot with every rank's figures changed as SGLang would have sized them."""
    ranks = {name: {**values, **rank} for name, values in facts.ranks.items()}
    boot = dict(facts.boot)
    if mfs is not None:
        boot["mem_fraction_static"] = mfs
    return dataclasses.replace(facts, ranks=ranks, boot=boot)


def _sized(pool_gib: float, cell: float) -> dict[str, float]:
    tokens = round(pool_gib * GIB / cell)
    return {
        "kv_pool_gib": pool_gib,
        "kv_tokens": float(tokens),
        "kv_cell_bytes": pool_gib * GIB / tokens,
    }


def _sum_is_the_change(diff_group: object) -> None:
    group = diff_group
    assert group.tokens_a is not None and group.tokens_b is not None  # type: ignore[attr-defined]
    total = sum(p.tokens for p in group.parts)  # type: ignore[attr-defined]
    assert abs(total - (group.tokens_b - group.tokens_a)) <= 2  # type: ignore[attr-defined]


def test_the_same_boot_changes_nothing() -> None:
    diff = compare(STORY, STORY)
    assert diff.args_changed == ()
    (group,) = diff.ranks
    assert len(group.ranks) == 8  # TP0-TP7 changed alike: one comparison
    assert group.explained_by is None
    assert diff.summary == "KV tokens per rank unchanged (159,277)."


def test_less_free_memory_at_start_explains_fewer_tokens() -> None:
    """A new driver takes 2 GiB more before the weights: free memory after the weights falls
    by 2 GiB, the reserve by 2 × 0.12: the pool loses 1.76 GiB."""
    tp0 = STORY.ranks["TP0"]
    cell = tp0["kv_cell_bytes"]
    assert cell is not None
    b = _with(
        STORY,
        pre_load_free_gib=93.17 - 2,
        post_load_free_gib=21.60 - 2,
        **_sized(10.42 - 1.76, cell),
    )
    group = compare(_with(STORY, pre_load_free_gib=93.17, post_load_free_gib=21.60), b).ranks[0]
    assert group.explained_by is not None and group.explained_by.factor == FREE_AT_START
    assert group.explained_by.tokens == pytest.approx(-1.76 * GIB / cell, abs=2)
    assert {p.factor: p.tokens for p in group.parts}[WEIGHTS] == 0
    _sum_is_the_change(group)


def test_a_higher_mem_fraction_static_explains_more_tokens() -> None:
    cell = STORY.ranks["TP0"]["kv_cell_bytes"]
    assert cell is not None
    a = _with(STORY, pre_load_free_gib=93.17, post_load_free_gib=21.60)
    b = _with(a, mfs=0.90, **_sized(10.42 + 93.17 * 0.02, cell))
    diff = compare(a, b)
    group = diff.ranks[0]
    assert group.explained_by is not None and group.explained_by.factor == MFS
    assert "0.88 → 0.9" in group.explained_by.text
    _sum_is_the_change(group)
    assert "explains most of it" in diff.summary


def test_a_smaller_cell_explains_more_tokens_in_the_same_pool() -> None:
    cell = STORY.ranks["TP0"]["kv_cell_bytes"]
    assert cell is not None
    b = _with(STORY, **_sized(10.42, cell / 2))
    group = compare(STORY, b).ranks[0]
    assert group.explained_by is not None and group.explained_by.factor == CELL
    assert group.tokens_b == pytest.approx(2 * (group.tokens_a or 0), abs=2)
    _sum_is_the_change(group)


def test_two_real_boots_of_one_model_split_exactly() -> None:
    """MiMo-V2-Flash on TP4 twice (two public threads, page size 1 then 64): free memory is
    not in B's excerpt, so the pool's change is one part and the bytes per token the other."""
    a = _facts(REAL_LOGS / "51-pr15464-mimo-v2-flash-swa-tp4.log", "51")
    b = _facts(REAL_LOGS / "52-pr18039-mimo-v2-flash-swa-page64-tp4.log", "52")
    diff = compare(a, b)
    split = [g for g in diff.ranks if g.parts]
    assert split
    for group in split:
        assert group.explained_by is not None and group.explained_by.factor == POOL
        _sum_is_the_change(group)
    unsplit = [g for g in diff.ranks if not g.parts]
    assert all(g.unexplained and "not split" in g.unexplained for g in unsplit)


def test_only_the_launch_arguments_that_changed_are_listed() -> None:
    b = dataclasses.replace(
        STORY, args={**STORY.args, "kv_cache_dtype": "fp8_e4m3", "random_seed": "1"}
    )
    assert compare(STORY, b).args_changed == (("kv_cache_dtype", "auto", "fp8_e4m3"),)
