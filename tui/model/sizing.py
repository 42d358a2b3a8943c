"""SGLang's KV-pool sizing replayed on a parsed startup: per rank, and explained step by step."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tui.model import formula
from tui.model.memory import free_after_startup
from tui.model.model_config import (
    CellSize,
    ModelConfigError,
    ModelDims,
    cell_size_from_dims,
    cell_size_inferred,
    find_config_json,
    load_model_dims,
)
from tui.sglang.startup import RankStartup, Startup

# Below this much free memory after startup, prefill activations of a large chunk can OOM.
SAFE_HEADROOM_GIB = 4.0


@dataclass(frozen=True, slots=True)
class CellSizeChoice:
    cell: CellSize | None
    note: str  # why this source (or why none), in words


@dataclass(frozen=True, slots=True)
class RankSizing:
    rank: str
    mem_fraction_static: float
    pre_load_free_gib: float
    post_load_free_gib: float
    reserve_gib: float
    rest_gib: float
    cell_size_bytes: float
    cell_size_source: str
    predicted_tokens: int
    actual_tokens: int | None


@dataclass(frozen=True, slots=True)
class Step:
    """One line of the explanation: a label, the arithmetic with numbers, and the result."""

    label: str
    arithmetic: str
    result: str


@dataclass(frozen=True, slots=True)
class SizingInputs:
    """What SGLang's sizing used (minimum over ranks), enough to replay it at any value."""

    mem_fraction_static: float
    pre_load_free_gib: float
    post_load_free_gib: float
    cell_size_bytes: float
    tokens: int
    page_size: int
    max_total_tokens: int | None
    headroom_after_graphs_gib: float | None
    context_len: int | None


@dataclass(frozen=True, slots=True)
class SizingExplanation:
    rank: str
    mem_fraction_static: float | None
    steps: tuple[Step, ...]
    reserve_spent: tuple[tuple[str, float], ...]  # where the reserve went, GiB
    free_after_pool_gib: float | None
    free_after_startup_gib: float | None
    what_ifs: tuple[formula.WhatIf, ...]
    reverse: tuple[Step, ...]  # mem_fraction_static needed for N tokens / requests
    draft_rule: formula.DraftBudgetRule | None
    notes: tuple[str, ...]
    inputs: SizingInputs | None = None


def sglang_version(startup: Startup, override: str | None = None) -> tuple[int, ...] | None:
    """The version to apply version rules with: the user's, else what the formats pin down."""
    if override:
        return formula.parse_version(override)
    hint = startup.version
    if not hint.known:
        return None
    if hint.high <= (0, 5, 13) or hint.low >= (0, 5, 14):
        return hint.high if hint.high <= (0, 5, 13) else hint.low
    return None


def page_size(startup: Startup) -> int:
    """SGLang's page size from server_args (1 when not logged)."""
    args = startup.server_args
    return args.page_size if args is not None and args.page_size else 1


def mem_fraction_static(startup: Startup) -> float | None:
    """From server_args, else from a failure line that quotes it."""
    if startup.server_args is not None and startup.server_args.mem_fraction_static is not None:
        return startup.server_args.mem_fraction_static
    failure = startup.failure
    return failure.mem_fraction_static if failure is not None else None


def pre_load_free(rank: RankStartup) -> float | None:
    """Free memory before weights; when the begin line is missing, free after + weights."""
    target = rank.target
    if target.avail_before_load_gib is not None:
        return target.avail_before_load_gib
    if target.avail_after_load_gib is not None and target.weights_gib is not None:
        return round(target.avail_after_load_gib + target.weights_gib, 2)
    return None


def _model_dtype(startup: Startup) -> str | None:
    for rank in startup.sorted_ranks():
        if rank.target.dtype:
            return rank.target.dtype
    return None


def _reference_rank(startup: Startup) -> RankStartup | None:
    """The rank whose lines are most complete (TP0 usually): used for cluster-level numbers."""
    ranks = startup.sorted_ranks()
    with_kv = [r for r in ranks if r.target.kv_gib is not None and r.target.kv_tokens]
    if with_kv:
        return with_kv[0]
    return ranks[0] if ranks else None


def choose_cell_size(
    startup: Startup,
    config_path: str | None = None,
    env: Mapping[str, str] | None = None,
) -> CellSizeChoice:
    """config.json when it can be read (explicit path, local model_path, HF cache), else the KV line."""
    args = startup.server_args
    model_path = args.model_path if args else None
    found: Path | None = Path(config_path) if config_path else None
    if found is None and model_path:
        found = find_config_json(model_path, env=env if env is not None else os.environ)
    problem = ""
    if found is not None:
        try:
            dims: ModelDims = load_model_dims(found)
            attn_tp = 1
            if args is not None and args.tp_size:
                dp = args.dp_size or 1
                attn_tp = max(1, args.tp_size // dp) if args.enable_dp_attention else args.tp_size
            cell = cell_size_from_dims(
                dims,
                (args.kv_cache_dtype if args else None) or "auto",
                attn_tp_size=attn_tp,
                pp_size=(args.pp_size if args and args.pp_size else 1),
                model_dtype=_model_dtype(startup),
            )
            return CellSizeChoice(cell, f"from {found}")
        except (ModelConfigError, ValueError) as exc:
            problem = f"{exc}; "
    reference = _reference_rank(startup)
    if (
        reference is not None
        and reference.target.kv_gib
        and reference.target.kv_gib > 0
        and reference.target.kv_tokens
    ):
        cell = cell_size_inferred(
            reference.target.kv_gib, reference.target.kv_tokens, page_size(startup)
        )
        where = f"no config.json for {model_path}" if model_path else "model path unknown"
        return CellSizeChoice(cell, f"{problem}{where}: inferred from the KV Cache line")
    return CellSizeChoice(None, f"{problem}no config.json and no KV Cache line to infer from")


def rank_sizing(rank: RankStartup, startup: Startup, cell: CellSize | None) -> RankSizing | None:
    """Replay the formula with this rank's own figures; None when any input is missing."""
    args = startup.server_args
    mfs = mem_fraction_static(startup)
    pre = rank.target.avail_before_load_gib
    post = rank.post_load_free_gib
    if mfs is None or pre is None or post is None or cell is None or not usable(pre, cell.bytes):
        return None
    page = page_size(startup)
    cap = args.max_total_tokens if args else None
    rest = formula.rest_gib(post, pre, mfs)
    return RankSizing(
        rank=rank.rank,
        mem_fraction_static=mfs,
        pre_load_free_gib=pre,
        post_load_free_gib=post,
        reserve_gib=formula.reserve_gib(pre, mfs),
        rest_gib=rest,
        cell_size_bytes=cell.bytes,
        cell_size_source=cell.source,
        predicted_tokens=formula.profiled_tokens(rest, cell.bytes, page, cap),
        actual_tokens=rank.target.kv_tokens,
    )


def usable(*values: float) -> bool:
    """Positive and finite: the only inputs SGLang's arithmetic is defined for."""
    return all(0 < v < 1e15 for v in values)


def what_if_values(current: float, extra: Sequence[float] = ()) -> list[float]:
    """Current, ± a few points, and the user's values, sorted and within (0, 1)."""
    steps = (-0.02, 0.0, 0.02, 0.04)
    values = {round(current + step, 3) for step in steps} | {round(v, 3) for v in extra}
    return sorted(v for v in values if 0 < v < 1)


def _gib(value: float) -> str:
    return f"{value:,.2f} GiB"


def _host_pool_step(
    startup: Startup, rank: RankStartup, cell: CellSize | None, page: int
) -> Step | None:
    """The hierarchical-cache host pool SGLang sizes from the device pool (per rank, decimal GB)."""
    args = startup.server_args
    tokens = rank.target.kv_tokens
    if args is None or not args.enable_hierarchical_cache or cell is None or not tokens:
        return None
    size = args.hicache_size if args.hicache_size and args.hicache_size > 0 else None
    pool = formula.host_kv_pool(
        tokens, round(cell.bytes), page, hicache_ratio=args.hicache_ratio, hicache_size_gb=size
    )
    how = (
        f"--hicache-size {size:g} GB / {cell.bytes:,.0f} B"
        if size
        else f"{tokens:,} tokens × ratio {args.hicache_ratio or formula.DEFAULT_HICACHE_RATIO:g}"
    )
    result = f"{pool.gb:,.2f} GB per rank"
    if rank.host_kv_gb is not None:
        result += f" · {rank.host_kv_gb:,.2f} logged"
    ranks = len(startup.ranks) or 1
    return Step(
        "host KV pool",
        f"{how} → {pool.tokens:,} tokens (+1 page) × {cell.bytes:,.0f} B; × {ranks} rank(s) = "
        f"{pool.gb * ranks:,.1f} GB host RAM",
        result,
    )


def explain(
    startup: Startup,
    choice: CellSizeChoice,
    version: tuple[int, ...] | None,
    what_if_mfs: Sequence[float] = (),
    request_len: int | None = None,
) -> SizingExplanation | None:
    """The formula with this startup's numbers, using SGLang's own inputs: the minimum over ranks."""
    rank = _reference_rank(startup)
    if rank is None:
        return None
    args = startup.server_args
    mfs = mem_fraction_static(startup)
    page = page_size(startup)
    cap = args.max_total_tokens if args else None
    ranks = startup.sorted_ranks()
    pres = [p for p in (pre_load_free(r) for r in ranks) if p is not None]
    estimated_pre = any(
        r.target.avail_before_load_gib is None and pre_load_free(r) is not None for r in ranks
    )
    posts = [r.post_load_free_gib for r in ranks if r.post_load_free_gib is not None]
    pre = min(pres) if pres else None
    post = min(posts) if posts else None
    tokens = rank.target.kv_tokens
    cell = choice.cell
    steps: list[Step] = []
    notes: list[str] = []
    spent: list[tuple[str, float]] = []
    what_ifs: list[formula.WhatIf] = []
    reverse: list[Step] = []
    inputs: SizingInputs | None = None

    if pre is not None:
        how = f"free GPU memory before weights, minimum over {len(pres)} rank(s)"
        if estimated_pre:
            how += " (where `Load weight begin` is missing: free after + weights)"
        steps.append(Step("pre-load free", how, _gib(pre)))
    if post is not None:
        steps.append(
            Step(
                "post-load free",
                f"free GPU memory after weights, minimum over {len(posts)} rank(s)",
                _gib(post),
            )
        )
    if mfs is None:
        notes.append("mem_fraction_static is unknown (no server_args line): reserve not computed.")
    reserve = rest = None
    if pre is not None and mfs is not None:
        reserve = formula.reserve_gib(pre, mfs)
        steps.append(
            Step("reserve", f"pre-load free × (1 − mfs) = {pre:.2f} × (1 − {mfs:g})", _gib(reserve))
        )
    if reserve is not None and post is not None and pre is not None and mfs is not None:
        rest = formula.rest_gib(post, pre, mfs)
        steps.append(
            Step(
                "rest for KV", f"post-load free − reserve = {post:.2f} − {reserve:.2f}", _gib(rest)
            )
        )
    if pre is not None and post is not None and pre > 0:
        steps.append(
            Step(
                "minimum viable mfs",
                f"1 − post-load free / pre-load free = 1 − {post:.2f} / {pre:.2f}",
                f"{formula.min_viable_mfs(pre, post):.4f}",
            )
        )
    if cell is not None:
        steps.append(
            Step(f"cell size ({cell.source})", cell.explanation, f"{cell.bytes:,.0f} B/token")
        )
    if rest is not None and cell is not None and usable(cell.bytes, abs(rest) or 1):
        predicted = formula.profiled_tokens(rest, cell.bytes, page, cap)
        arithmetic = f"floor({rest:.2f} GiB × 2^30 / {cell.bytes:,.0f} B)"
        if page > 1:
            arithmetic += f", aligned down to page_size {page}"
        if cap:
            arithmetic += f", capped at --max-total-tokens {cap:,}"
        result = f"{predicted:,} tokens predicted"
        if tokens is not None:
            result += f" · {tokens:,} logged"
        steps.append(Step("max_total_num_tokens", arithmetic, result))
        if tokens is not None:
            # Logged GiB figures carry ±0.005 each; post and 0.12 × pre move the result together.
            tolerance = (0.005 + 0.005 * (1 - (mfs or 0))) * formula.GIB / cell.bytes + page
            if abs(predicted - tokens) <= tolerance:
                notes.append(
                    f"prediction is within {abs(predicted - tokens):,} tokens of the log: the "
                    "difference is the 0.01 GiB rounding of the logged free-memory figures."
                )
            else:
                notes.append(
                    f"prediction differs from the log by {predicted - tokens:+,} tokens, more than "
                    "rounding explains: another limit applied (page size, --max-total-tokens, a "
                    "hybrid/SWA pool, or draft layers in the cell size from 0.5.14)."
                )
    last_free = None
    if rank.target.avail_after_pool_gib is not None:
        spent.append(("free after the KV pool", rank.target.avail_after_pool_gib))
        draft = rank.draft
        if draft is not None and draft.weights_gib is not None:
            spent.append(("draft weights", draft.weights_gib))
        if draft is not None and draft.kv_gib is not None:
            spent.append(("draft KV cache", draft.kv_gib))
        if rank.target.graph_gib is not None:
            spent.append(("target CUDA graphs", rank.target.graph_gib))
        if draft is not None and draft.graph_gib is not None:
            spent.append(("draft CUDA graphs", draft.graph_gib))
        last_free, _ = free_after_startup(rank)
        if last_free is not None:
            itemised = sum(v for _, v in spent[1:])
            other = round(rank.target.avail_after_pool_gib - itemised - last_free, 2)
            if other > 0.005:
                spent.append(("other runtime allocations", other))
            spent.append(("still free after startup", last_free))
    host_step = _host_pool_step(startup, rank, cell, page)
    if host_step is not None:
        steps.append(host_step)
    draft_rule = formula.draft_budget_rule(version) if startup.speculative else None
    headroom = last_free if rank.target.avail_after_pool_gib is not None else None
    if (
        pre is not None
        and post is not None
        and cell is not None
        and mfs is not None
        and tokens
        and usable(pre, cell.bytes)
    ):
        context = startup.summary.context_len if startup.summary else None
        context = context or (args.context_length if args else None)
        if context is not None and not usable(context):
            context = None
        inputs = SizingInputs(mfs, pre, post, cell.bytes, tokens, page, cap, headroom, context)
        for value in what_if_values(mfs, what_if_mfs):
            what_ifs.append(
                formula.what_if(
                    value,
                    pre_load_free_gib=pre,
                    post_load_free_gib=post,
                    cell_size_bytes=cell.bytes,
                    current_tokens=tokens,
                    page_size=page,
                    max_total_tokens=cap,
                    headroom_after_graphs_gib=headroom,
                    context_len=context,
                    mem_fraction_static_current=mfs,
                )
            )
        for length in [n for n in (context, request_len) if n]:
            for count in (1, 4, 16):
                need = formula.mfs_for_requests(count, length, pre, post, cell.bytes, page)
                verdict = f"{need:.3f}" if need <= 1 else "impossible on these GPUs"
                reverse.append(
                    Step(
                        f"{count} × {length:,}-token requests",
                        f"needs {count * length:,} tokens",
                        f"mem_fraction_static {verdict}",
                    )
                )
        if headroom is not None and headroom < SAFE_HEADROOM_GIB:
            notes.append(
                f"only {headroom:.2f} GiB stays free after startup, under the {SAFE_HEADROOM_GIB:g} "
                "GiB safe margin: large prefills may run out of memory."
            )
    return SizingExplanation(
        rank=rank.rank,
        mem_fraction_static=mfs,
        steps=tuple(steps),
        reserve_spent=tuple(spent),
        free_after_pool_gib=rank.target.avail_after_pool_gib,
        free_after_startup_gib=headroom,
        what_ifs=tuple(what_ifs),
        reverse=tuple(reverse),
        draft_rule=draft_rule,
        notes=(f"cell size {choice.note}", *notes),
        inputs=inputs,
    )
