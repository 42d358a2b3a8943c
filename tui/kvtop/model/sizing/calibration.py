"""What an earlier boot's log tells a plan that no config can: each rank's free memory before
and after the weights, the weights per rank, the pool SGLang sized (tokens and bytes per
token), the CUDA graphs, the draft, and what startup took after the pool."""

from __future__ import annotations

from dataclasses import dataclass

from kvtop.model.memory.rank_memory import free_after_startup
from kvtop.model.sizing import dsv4, formula, replay
from kvtop.model.sizing.hybrid import hybrid_rule
from kvtop.model.sizing.plan import RankMemory
from kvtop.sglang.start_state import RankStartup, Startup


class CalibrationError(ValueError):
    """The log has too little of a boot to calibrate a plan; the message says what is missing."""


@dataclass(frozen=True, slots=True)
class Calibration:
    ranks: tuple[RankMemory, ...]
    mem_fraction_static: float | None
    page_size: int
    tokens: int | None  # the logged max_total_num_tokens (full pool)
    budget_bytes: float | None  # rest memory per full-pool token the logged pool implies
    full_bytes: float | None  # the full pool's own bytes per token
    draft_bytes: float  # the draft pool's bytes per token (0: none logged)
    kv_pool_gib: float | None  # target pool (all sub-pools) as logged
    state_gib: float  # a Mamba model's state slots as logged
    mamba_slots: int | None
    mamba_slot_bytes: int | None  # one slot's logged state (the log's state over slots + 1)
    swa_ratio: float | None
    pool_overhead_gib: float | None  # post-load free − pools − free after the pool
    cuda_graph_gib: float | None  # target + draft graphs
    draft_weights_gib: float
    draft_kv_gib: float
    other_gib: float  # taken after the pool that no line names
    free_after_startup_gib: float | None
    context_len: int | None
    tp_size: int
    version: tuple[int, ...] | None
    version_text: str
    server_args: dict[str, object]
    reference_rank: str
    speculative: bool
    kv_dtype: str | None  # as logged ("torch.bfloat16"), the pool's own dtype
    model_path: str | None
    capped: bool  # the logged pool hit --max-total-tokens
    mla: bool  # one latent per token ("KV size"), the same on every TP rank
    # What the log measured and what the plan estimates in its place (an excerpt without the
    # `Load weight` lines: the free memory before the weights is estimated).
    calibrated: tuple[str, ...] = ()
    estimated: tuple[str, ...] = ()
    # False when the log has no server_args: tp_size is only the ranks its lines show (an
    # excerpt may quote one rank of eight), so a --tp-size given is taken as the boot's.
    tp_size_logged: bool = True


# Names of the figures a calibration takes from the log or estimates (JSON `calibration`).
FREE_BEFORE_WEIGHTS = "free memory before the weights"
WEIGHTS = "weights per rank"
FREE_AFTER_WEIGHTS = "free memory after the weights"
KV_CELL = "bytes per token (KV line)"
FREE_AFTER_POOL = "free memory after the KV pool"
CUDA_GRAPHS = "CUDA graphs"
FREE_AFTER_STARTUP = "free memory after startup"


def _rank_memory(rank: RankStartup) -> RankMemory | None:
    pre = replay.pre_load_free(rank)
    post = rank.post_load_free_gib
    if pre is None or post is None:
        return None
    source = (
        "log"
        if rank.target.avail_before_load_gib is not None
        else "log (pre-load: after + weights)"
    )
    return RankMemory(rank.rank or "GPU", pre, rank.target.weights_gib, post, source)


def _excerpt_rank_memory(rank: RankStartup) -> RankMemory | None:
    """A rank whose log starts after the weights: the free memory SGLang sized the pool from is
    the pools plus what the next reading left free; the weights and the free memory before them
    are unknown (pre-load is set to post-load here, the engine estimates it)."""
    target = rank.target
    if not target.kv_tokens or not target.kv_gib:
        if rank.post_load_free_gib is None:
            return None
        # No KV line (SGLang 0.4.0 and earlier printed none) but the free memory after the
        # weights: that is what the pool was sized from; the summary gives the tokens.
        post = rank.post_load_free_gib
        return RankMemory(rank.rank or "GPU", post, None, post, EXCERPT_SOURCE)
    pools = target.kv_gib + (target.mamba_gib or 0.0) + (target.mamba_intermediate_gib or 0.0)
    after_pool = target.avail_after_pool_gib
    if after_pool is None and target.graph_gib is not None:
        # No `Memory pool end` line: the graph capture's own before-reading is the next one.
        after_pool = next(
            (p.avail_gib for p in rank.phases if p.avail_gib is not None and "graph" in p.name),
            None,
        )
    if after_pool is None:
        last, _ = free_after_startup(rank)
        if last is None:
            return None
        after_pool = last + (target.graph_gib or 0.0)
    post = round(pools + after_pool, 2)
    return RankMemory(rank.rank or "GPU", post, None, post, EXCERPT_SOURCE)


# The source of a rank whose free memory before the weights the log does not give.
EXCERPT_SOURCE = "log (after the weights: pools + free after them); pre-load estimated"


def calibrate(startup: Startup, version_override: str | None = None) -> Calibration:
    """The figures of `startup` a plan needs; raises CalibrationError naming what is missing."""
    ranks = [m for m in (_rank_memory(r) for r in startup.sorted_ranks()) if m is not None]
    excerpt = not ranks
    if excerpt:
        ranks = [
            m for m in (_excerpt_rank_memory(r) for r in startup.sorted_ranks()) if m is not None
        ]
    if not ranks:
        raise CalibrationError(
            "the log has no boot with free memory before and after the weights (`Load weight "
            "begin/end ... avail mem=` lines), nor a `KV Cache is allocated` line with a free "
            "memory reading after it, nor a `Load weight end ... avail mem=` line: give the log of a boot that got past loading the "
            "weights, or plan from --model with --gpu-memory"
        )
    reference = next(
        (r for r in startup.sorted_ranks() if r.target.kv_tokens and r.target.kv_gib),
        startup.sorted_ranks()[0],
    )
    target = reference.target
    unmodelled = dsv4.unmodelled_note(target)
    if unmodelled is not None:  # a plan from rules that do not apply would be a guess
        raise CalibrationError(f"the log's boot cannot calibrate a plan: {unmodelled}")
    page = replay.page_size(startup)
    args = startup.server_args
    version = replay.sglang_version(startup, version_override)
    mfs = replay.mem_fraction_static(startup)
    tokens = target.kv_tokens
    if tokens is None and startup.summary is not None:
        tokens = startup.summary.max_total_num_tokens  # no KV line: the summary's count
    full_bytes = budget = None
    swa_ratio = None
    state = 0.0
    slot_bytes = None
    if target.mamba_gib and target.mamba_slots:
        slot_bytes = int(target.mamba_gib * formula.GIB / (target.mamba_slots + 1))
    if tokens and target.kv_gib:
        choice = replay.choose_cell_size(startup)
        full_bytes = choice.cell.bytes if choice.cell is not None else None
        budget = full_bytes
        post = reference.post_load_free_gib
        rest = None
        if post is not None and mfs is not None and replay.pre_load_free(reference) is not None:
            rest = formula.rest_gib(post, min(r.pre_load_free_gib for r in ranks), mfs)
        rule = hybrid_rule(target, page, args, version, rest)
        if rule is not None:
            full_bytes = rule.full_cell_bytes
            budget = rule.effective_cell_bytes if rule.kind == "swa" else rule.full_cell_bytes
            swa_ratio = rule.swa_ratio
            state = rule.logged_state_gib
            slots = target.mamba_slots
            if slots and (*(version or (0, 0, 0)), 0, 0)[:3] < (0, 5, 19):
                # The padding slot is allocated beside the budget until 0.5.19.
                state = state * slots / (slots + 1)
    draft = reference.draft if reference.draft is not None and reference.draft.seen else None
    draft_kv = draft.kv_gib if draft is not None and draft.kv_gib else 0.0
    draft_bytes = draft_kv * formula.GIB / (tokens + page) if tokens and draft_kv else 0.0
    draft_weights = draft.weights_gib if draft is not None and draft.weights_gib else 0.0
    graphs = [g for g in (target.graph_gib, draft.graph_gib if draft else None) if g is not None]
    graph_gib = sum(graphs) if graphs else None
    # Ready, or at least past the graphs: the last reading is what startup left free.
    done = startup.finished or target.graph_gib is not None
    free_last = free_after_startup(reference)[0] if done else None
    after_pool = target.avail_after_pool_gib
    overhead = None
    pools_gib = (
        (target.kv_gib or 0.0) + (target.mamba_gib or 0.0) + (target.mamba_intermediate_gib or 0.0)
    )
    if reference.post_load_free_gib is not None and after_pool is not None and target.kv_gib:
        overhead = max(0.0, reference.post_load_free_gib - pools_gib - after_pool)
    elif excerpt and after_pool is not None:
        overhead = 0.0  # the excerpt's post-load free memory is the pools + what they left
    other = 0.0
    phased = (*(version or (0, 0, 0)), 0, 0)[:3] >= formula.FIRST_DRAFT_BUDGETED_VERSION
    late_draft_weights = 0.0 if phased else draft_weights
    if after_pool is not None and free_last is not None:
        other = max(
            0.0, after_pool - late_draft_weights - draft_kv - (graph_gib or 0.0) - free_last
        )
    cap = args.max_total_tokens if args is not None else None
    found = [
        (FREE_BEFORE_WEIGHTS, not excerpt),
        (WEIGHTS, not excerpt and reference.target.weights_gib is not None),
        (FREE_AFTER_WEIGHTS, not excerpt),
        (KV_CELL, full_bytes is not None),
        (FREE_AFTER_POOL, after_pool is not None),
        (CUDA_GRAPHS, graph_gib is not None),
        (FREE_AFTER_STARTUP, free_last is not None),
    ]
    calibrated = tuple(name for name, seen in found if seen)
    estimated = tuple(name for name, seen in found if not seen)
    if excerpt:
        # Reconstructed from the pools and the reading after them: calibrated, if not read.
        estimated = tuple(n for n in estimated if n != FREE_AFTER_WEIGHTS)
        calibrated += (FREE_AFTER_WEIGHTS,)
    return Calibration(
        ranks=tuple(ranks),
        mem_fraction_static=mfs,
        page_size=page,
        tokens=tokens,
        budget_bytes=budget,
        full_bytes=full_bytes,
        draft_bytes=draft_bytes,
        kv_pool_gib=target.kv_gib,
        state_gib=state,
        mamba_slots=target.mamba_slots,
        mamba_slot_bytes=slot_bytes,
        swa_ratio=swa_ratio,
        pool_overhead_gib=overhead,
        cuda_graph_gib=graph_gib,
        draft_weights_gib=draft_weights,
        draft_kv_gib=draft_kv,
        other_gib=other,
        free_after_startup_gib=free_last,
        context_len=replay._context_len(startup),
        tp_size=(args.tp_size if args is not None and args.tp_size else max(1, len(ranks))),
        version=version,
        version_text=formula.version_text(version, startup.version),
        server_args=dict(args.raw) if args is not None else {},
        reference_rank=reference.rank or "GPU",
        speculative=bool(startup.speculative),
        kv_dtype=target.kv_dtype or startup.kv_cache_dtype,
        model_path=args.model_path if args is not None else None,
        capped=bool(cap and tokens and tokens >= cap // page * page),
        mla=bool(target.kv_gib and target.k_gib is None and not target.hybrid),
        calibrated=calibrated,
        estimated=estimated,
        tp_size_logged=bool(args is not None and args.tp_size),
    )
