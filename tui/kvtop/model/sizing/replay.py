"""SGLang's KV-pool sizing replayed on a parsed startup: per rank, and explained step by step."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from kvtop.model.memory.rank_memory import free_after_startup
from kvtop.model.sizing import formula
from kvtop.model.sizing.dsv4 import unmodelled_note
from kvtop.model.sizing.hybrid import HybridRule, hybrid_rule
from kvtop.model.sizing.model_config import (
    CellSize,
    ConfigFile,
    ModelConfigError,
    cell_size_from_dims,
    cell_size_inferred,
    parse_model_dims,
)
from kvtop.model.sizing.plan import Planner, PoolSizes
from kvtop.sglang.server_args import ServerArgs
from kvtop.sglang.start_state import RankStartup, Startup

SAFE_HEADROOM_GIB = formula.SAFE_HEADROOM_GIB  # the one margin (formula.py)

# What startup allocated that no log line names (the report's memory table and the overview);
# it is part of the overview bar's live "runtime" (docs/glossary.md).
OTHER_STARTUP = "other startup allocations"
# In "where the reserve went": only what was taken after the KV cache that no line names (the
# memory table's "other startup allocations" counts everything since the pre-load reading).
OTHER_AFTER_POOL = "other allocations after the KV cache"
OTHER_STARTUP_WORDS = (
    f"{OTHER_STARTUP}: what startup took that no log line names (pre-load free − the itemised "
    "allocations − free after startup); the overview's runtime is this plus what the server "
    "allocated since, measured by NVML."
)
OTHER_AFTER_POOL_WORDS = (
    f"{OTHER_AFTER_POOL}: what was taken after the KV cache that no log line names (free after "
    f"the KV cache − the items above − free after startup); the memory table's {OTHER_STARTUP} "
    "also count what was taken before the pool."
)
# The hierarchical cache's host pool, in decimal GB as SGLang logs it.
HOST_KV = "host KV cache"


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
    # The caveat the formula modal adds to the same answer (tuning.what_if_at's warning): under
    # the safe margin, or SGLang would not start. The one-shot report shows it too.
    warning: str | None = None
    # How kvtop computed a result the log did not give (None: read, or the formula's own).
    derived: str | None = None


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
    # Hybrid models: a Mamba model runs at most this many requests (one state slot each); with
    # the ratio split its slots grow with the KV cache, and a full-pool token's KV bytes are
    # fewer than the rest memory it takes (the state's share).
    max_requests: int | None = None
    slots_follow_pool: bool = False
    kv_cell_bytes: float | None = None
    # Free after startup under this is an OOM risk (the configured margin, formula.py).
    safe_margin_gib: float = SAFE_HEADROOM_GIB
    # The sizing engine calibrated by this boot (log_planner.planner_from_boot): where there is
    # one, the what-if's tokens and free memory after startup are its own (the same as
    # `kvtop plan --from-log`: every rank, the draft's pool growing with the target's).
    planner: Planner | None = None

    def what_if(self, mfs: float) -> formula.WhatIf:
        """SGLang's pool at `mfs`, anchored on the logged token count (see formula.what_if)."""
        return self._from_engine(self._by_formula(mfs), mfs)

    def _from_engine(self, result: formula.WhatIf, mfs: float) -> formula.WhatIf:
        if self.planner is None:
            return result
        tokens, free = self.planner.headroom_at(mfs)
        pool_tokens = max(tokens, 0)
        delta = pool_tokens - self.tokens
        cell = self.kv_cell_bytes or self.cell_size_bytes
        requests = result.requests_at_context
        if self.context_len:
            requests = pool_tokens / self.context_len
            if self.max_requests is not None and self.tokens > 0:
                slots = self.max_requests
                if self.slots_follow_pool:
                    slots = self.max_requests * pool_tokens // self.tokens
                requests = min(requests, float(slots))
        return replace(
            result,
            tokens=tokens,
            delta_tokens=delta,
            delta_pct=None if self.tokens <= 0 else 100 * delta / self.tokens,
            kv_pool_gib=formula.kv_pool_gib(pool_tokens, cell, self.page_size)
            if tokens > 0
            else 0.0,
            delta_kv_gib=delta * cell / formula.GIB,
            # Before ready nothing is "after startup" yet: the engine's figure waits with it.
            headroom_after_graphs_gib=None if self.headroom_after_graphs_gib is None else free,
            requests_at_context=requests,
        )

    def _by_formula(self, mfs: float) -> formula.WhatIf:
        result = self._what_if(mfs)
        if not self.slots_follow_pool and self.kv_cell_bytes is None:
            return result
        tokens = max(result.tokens, 0)
        requests = result.requests_at_context
        if requests is not None and self.max_requests is not None and self.tokens > 0:
            requests = min(requests, float(self.max_requests * tokens // self.tokens))
        kv = result.kv_pool_gib
        if self.kv_cell_bytes is not None and result.tokens > 0:
            kv = formula.kv_pool_gib(tokens, self.kv_cell_bytes, self.page_size)
        return replace(result, requests_at_context=requests, kv_pool_gib=kv)

    def _what_if(self, mfs: float) -> formula.WhatIf:
        return formula.what_if(
            mfs,
            pre_load_free_gib=self.pre_load_free_gib,
            post_load_free_gib=self.post_load_free_gib,
            cell_size_bytes=self.cell_size_bytes,
            current_tokens=self.tokens,
            page_size=self.page_size,
            max_total_tokens=self.max_total_tokens,
            headroom_after_graphs_gib=self.headroom_after_graphs_gib,
            context_len=self.context_len,
            mem_fraction_static_current=self.mem_fraction_static,
            max_requests=None if self.slots_follow_pool else self.max_requests,
        )

    def mfs_for_requests(self, count: int, length: int) -> float:
        """The mem_fraction_static `count` requests of `length` tokens need (above 1: never)."""
        return formula.mfs_for_requests(
            count,
            length,
            self.pre_load_free_gib,
            self.post_load_free_gib,
            self.cell_size_bytes,
            self.page_size,
        )


@dataclass(frozen=True, slots=True)
class OverBudget:
    """The logged pool is larger than SGLang's formula gives with this log's numbers."""

    formula_tokens: int
    logged_tokens: int
    extra_gib: float  # the logged pool's excess, at the pool's bytes per token

    @property
    def extra_tokens(self) -> int:
        return self.logged_tokens - self.formula_tokens

    def sentence(self) -> str:
        return (
            f"the KV cache holds {self.logged_tokens:,} tokens, {self.extra_tokens:,} more than "
            f"SGLang's own formula gives with these numbers ({self.formula_tokens:,} tokens; "
            f"{self.extra_gib:.2f} GiB over budget): the pool was sized by another rule (a "
            "different SGLang version or model rule, --max-total-tokens, a draft's headroom) or "
            "an input here is a guess that failed (mem_fraction_static, the cell size), so the "
            "memory left after it is not SGLang's reserve."
        )


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
    pre_load_rank: str | None = None  # the rank with the minimum pre-load free (SGLang's input)
    post_load_rank: str | None = None  # the rank with the minimum post-load free
    # The KV pool holds more than SGLang's own formula allows: its premise (the rest is the
    # reserve) does not hold, and the reserve finding is not shown.
    over_budget: OverBudget | None = None
    hybrid: HybridRule | None = None
    # what_ifs' warnings, in their order (None: no caveat), worded as the formula modal's
    # (tuning.with_caveats fills them and `reverse`).
    what_if_warnings: tuple[str | None, ...] = ()
    # reserve_spent's rows kvtop computed rather than read: (label, how).
    reserve_derived: tuple[tuple[str, str], ...] = ()
    # Free after startup under this is an OOM risk (the configured margin, formula.py).
    safe_margin_gib: float = SAFE_HEADROOM_GIB

    @property
    def spent_title(self) -> str:
        """The reserve table's title: not "the reserve" when the pool ate into it."""
        return self.spent_title_of(self.rank)

    def spent_title_of(self, rank: str) -> str:
        """The reserve table's title for `rank`'s lines (the selected GPU's on the formula)."""
        where = rank or "single GPU"
        if self.over_budget is not None:
            return f"Where the memory after the KV cache went ({where}; not the reserve)"
        return f"Where the reserve went ({where})"

    def rank_words(self, reserve_rank: str | None = None) -> str:
        """Which rank each figure comes from, the same words on the formula screen and report.

        SGLang sizes the pool from the minimum free memory over ranks, so the budget steps use
        the ranks holding those minimums; the logged tokens, where the reserve went and the
        free memory after startup are the lines of `rank` (JSON `formula.rank`).
        """
        if not self.rank:
            return "the single GPU's numbers"
        own = f"logged tokens and where the reserve went: {self.rank}"
        if reserve_rank and reserve_rank != self.rank:  # the formula on another selected GPU
            own = (
                f"logged tokens: {self.rank} · where the reserve went: {reserve_rank} "
                "(selected GPU)"
            )
        minimum = {self.pre_load_rank, self.post_load_rank} - {None}
        if not minimum:
            return own
        if minimum == {self.rank} and own.startswith("logged tokens and"):
            return f"all figures from {self.rank}, the rank with the minimum free memory"
        if len(minimum) == 1:
            budget = f"pre-/post-load free: the minimum over ranks, at {minimum.pop()}"
        else:
            budget = (
                f"pre-load free: the minimum over ranks, at {self.pre_load_rank}; "
                f"post-load free: at {self.post_load_rank}"
            )
        return f"{budget} · {own}"


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


def _attention_tp_size(args: ServerArgs | None) -> int:
    """GPUs one attention layer's KV heads are split over (TP, or TP / DP with DP attention)."""
    if args is None or not args.tp_size:
        return 1
    if args.enable_dp_attention:
        return max(1, args.tp_size // (args.dp_size or 1))
    return args.tp_size


def _cell_from_config(startup: Startup, config: ConfigFile, text: str) -> CellSize:
    """The cell size from the model's config.json (raises ModelConfigError or ValueError)."""
    args = startup.server_args
    return cell_size_from_dims(
        parse_model_dims(text, config.path),
        (args.kv_cache_dtype if args else None) or "auto",
        attn_tp_size=_attention_tp_size(args),
        pp_size=(args.pp_size if args and args.pp_size else 1),
        model_dtype=_model_dtype(startup),
    )


def _cell_from_kv_line(startup: Startup) -> CellSize | None:
    """The cell size SGLang's `KV Cache is allocated` line implies: its GiB over its tokens."""
    reference = _reference_rank(startup)
    if reference is None:
        return None
    kv_gib, tokens = reference.target.kv_gib, reference.target.kv_tokens
    full = next((p for p in reference.target.pools() if p.kind == "full"), None)
    if reference.target.hybrid and full is not None:  # the full pool's own bytes per token
        kv_gib, tokens = full.gib, full.tokens
    if not kv_gib or kv_gib <= 0 or not tokens:
        return None
    return cell_size_inferred(kv_gib, tokens, page_size(startup))


def choose_cell_size(startup: Startup, config: ConfigFile | None = None) -> CellSizeChoice:
    """The model's config.json when one was read (--model-config, the local model_path or the
    Hugging Face cache: tui/kvtop/sources/model_config_file.py) and parses, else the KV line."""
    args = startup.server_args
    model_path = args.model_path if args else None
    problem = ""
    if config is not None and config.text is None:
        problem = f"{config.problem}; "
    elif config is not None and config.text is not None:
        try:
            return CellSizeChoice(
                _cell_from_config(startup, config, config.text), f"from {config.path}"
            )
        except (ModelConfigError, ValueError) as exc:
            problem = f"{exc}; "
    cell = _cell_from_kv_line(startup)
    if cell is not None:
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
    if rank.target.dsv4 is not None:
        return None  # DeepSeek-V4's own pool arithmetic (dsv4.py): no prediction to compare
    page = page_size(startup)
    cap = args.max_total_tokens if args else None
    rest = formula.rest_gib(post, pre, mfs)
    rule = hybrid_rule(rank.target, page, args, sglang_version(startup), rest)
    if rule is not None:  # a hybrid model: the full pool's share of rest, not rest / cell
        predicted = hybrid_tokens(rule, rest, page, cap)
        cell_bytes, source = rule.effective_cell_bytes, f"hybrid {rule.kind} (pool lines)"
    else:
        predicted = formula.profiled_tokens(rest, cell.bytes, page, cap)
        cell_bytes, source = cell.bytes, cell.source
    return RankSizing(
        rank=rank.rank,
        mem_fraction_static=mfs,
        pre_load_free_gib=pre,
        post_load_free_gib=post,
        reserve_gib=formula.reserve_gib(pre, mfs),
        rest_gib=rest,
        cell_size_bytes=cell_bytes,
        cell_size_source=source,
        predicted_tokens=predicted,
        actual_tokens=rank.target.kv_tokens,
    )


def hybrid_tokens(rule: HybridRule, rest: float, page: int, cap: int | None) -> int:
    """The full pool's max_total_num_tokens under a hybrid rule: user cap, page alignment."""
    tokens = rule.kv_tokens(rest)
    if cap is not None:
        tokens = min(tokens, cap)
    return tokens // page * page


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
    """The host KV cache (HiCache) SGLang sizes from the device pool (per rank, decimal GB)."""
    args = startup.server_args
    tokens = rank.target.kv_tokens
    if args is None or not args.enable_hierarchical_cache or cell is None or not tokens:
        return None
    size = args.hicache_size if args.hicache_size and args.hicache_size > 0 else None
    pool = formula.host_kv_pool(
        tokens, round(cell.bytes), page, hicache_ratio=args.hicache_ratio, hicache_size_gb=size
    )
    how = (
        f"HiCache: --hicache-size {size:g} GB / {cell.bytes:,.0f} B"
        if size
        else f"HiCache: {tokens:,} tokens × ratio {args.hicache_ratio or formula.DEFAULT_HICACHE_RATIO:g}"
    )
    result = f"{pool.gb:,.2f} GB per rank"
    if rank.host_kv_gb is not None:
        result += f" · {rank.host_kv_gb:,.2f} logged"
    ranks = len(startup.ranks) or 1
    return Step(
        HOST_KV,
        f"{how} → {pool.tokens:,} tokens (+1 page) × {cell.bytes:,.0f} B; × {ranks} rank(s) = "
        f"{pool.gb * ranks:,.2f} GB host RAM",
        result,
    )


@dataclass(frozen=True, slots=True)
class _Budget:
    """SGLang's own inputs to the sizing: the minimum over ranks of each free-memory reading."""

    mfs: float | None
    pre_load_free_gib: float | None
    post_load_free_gib: float | None
    pre_ranks: int  # ranks with a pre-load reading
    post_ranks: int
    pre_rank: str | None  # the rank holding the minimum pre-load free
    post_rank: str | None
    pre_estimated: bool  # some rank lacks `Load weight begin`: free after + weights
    page: int
    cap: int | None  # --max-total-tokens

    @property
    def reserve_gib(self) -> float | None:
        if self.pre_load_free_gib is None or self.mfs is None:
            return None
        return formula.reserve_gib(self.pre_load_free_gib, self.mfs)

    @property
    def rest_gib(self) -> float | None:
        pre, post, mfs = self.pre_load_free_gib, self.post_load_free_gib, self.mfs
        if pre is None or post is None or mfs is None:
            return None
        return formula.rest_gib(post, pre, mfs)


def _budget(startup: Startup) -> _Budget:
    ranks = startup.sorted_ranks()
    pres = [(p, r.rank) for r, p in ((r, pre_load_free(r)) for r in ranks) if p is not None]
    posts = [(r.post_load_free_gib, r.rank) for r in ranks if r.post_load_free_gib is not None]
    args = startup.server_args
    # The first rank (in rank order) holding the minimum: ties go to the lowest rank.
    pre = min(pres, key=lambda found: found[0]) if pres else None
    post = min(posts, key=lambda found: found[0]) if posts else None
    return _Budget(
        mfs=mem_fraction_static(startup),
        pre_load_free_gib=pre[0] if pre else None,
        post_load_free_gib=post[0] if post else None,
        pre_ranks=len(pres),
        post_ranks=len(posts),
        pre_rank=pre[1] if pre else None,
        post_rank=post[1] if post else None,
        pre_estimated=any(
            r.target.avail_before_load_gib is None and pre_load_free(r) is not None for r in ranks
        ),
        page=page_size(startup),
        cap=args.max_total_tokens if args else None,
    )


def _minimum_words(ranks: int, at: str | None) -> str:
    """Which rank's value a budget step uses: ", minimum over 8 ranks (at TP3)", " on TP0"."""
    if ranks > 1:
        return f", minimum over {ranks} ranks (at {at or '?'})"
    return f" on {at}" if at else " (single GPU)"


def _budget_steps(budget: _Budget) -> list[Step]:
    """From the two free-memory readings to the reserve, the rest for KV and the minimum mfs."""
    pre, post, mfs = budget.pre_load_free_gib, budget.post_load_free_gib, budget.mfs
    reserve, rest = budget.reserve_gib, budget.rest_gib
    steps: list[Step] = []
    if pre is not None:
        how = f"free GPU memory before weights{_minimum_words(budget.pre_ranks, budget.pre_rank)}"
        derived = None
        if budget.pre_estimated:
            how += "; where `Load weight begin` is missing: free after + weights"
            derived = "free after weights + the weights, where `Load weight begin` is missing"
        steps.append(Step("pre-load free", how, _gib(pre), derived=derived))
    if post is not None:
        how = f"free GPU memory after weights{_minimum_words(budget.post_ranks, budget.post_rank)}"
        steps.append(Step("post-load free", how, _gib(post)))
    if reserve is not None:
        how = f"pre-load free × (1 − mfs) = {pre:.2f} × (1 − {mfs:g})"
        steps.append(Step("reserve", how, _gib(reserve)))
    if rest is not None:
        how = f"post-load free − reserve = {post:.2f} − {reserve:.2f}"
        steps.append(Step("rest for KV cache", how, _gib(rest)))
    if pre is not None and post is not None and pre > 0:
        how = f"1 − post-load free / pre-load free = 1 − {post:.2f} / {pre:.2f}"
        steps.append(Step("minimum viable mfs", how, f"{formula.min_viable_mfs(pre, post):.4f}"))
    return steps


def _cell_size_step(cell: CellSize | None) -> Step | None:
    if cell is None:
        return None
    return Step(f"cell size ({cell.source})", cell.explanation, f"{cell.bytes:,.0f} B/token")


def _predicted_tokens(
    budget: _Budget, cell: CellSize | None, rule: HybridRule | None = None
) -> int | None:
    rest = budget.rest_gib
    if rest is None or cell is None or not usable(cell.bytes, abs(rest) or 1):
        return None
    if rule is not None:
        return hybrid_tokens(rule, rest, budget.page, budget.cap)
    return formula.profiled_tokens(rest, cell.bytes, budget.page, budget.cap)


def _max_total_tokens_step(
    budget: _Budget,
    cell: CellSize,
    predicted: int,
    logged: int | None,
    rule: HybridRule | None,
    engine: PoolSizes | None = None,
) -> Step:
    arithmetic = f"floor({budget.rest_gib:.2f} GiB × 2^30 / {cell.bytes:,.0f} B)"
    if rule is not None and rule.kind == "mamba" and engine is not None and engine.mamba_slots:
        arithmetic = (
            f"floor(({budget.rest_gib:.2f} − {engine.state_gib:.2f} state of "
            f"{engine.mamba_slots:,} slots) GiB × 2^30 / {rule.full_cell_bytes:,.0f} B)"
        )
    elif rule is not None and rule.kind == "mamba":
        arithmetic = (
            f"floor(({budget.rest_gib:.2f} − {rule.logged_state_gib:.2f} state) GiB × 2^30 / "
            f"{rule.full_cell_bytes:,.0f} B)"
        )
    if budget.page > 1:
        arithmetic += f", aligned down to page_size {budget.page}"
    if budget.cap:
        arithmetic += f", capped at --max-total-tokens {budget.cap:,}"
    result = f"{predicted:,} tokens predicted"
    if logged is not None:
        result += f" · {logged:,} logged"
    return Step("max_total_num_tokens", arithmetic, result)


def _tolerance(budget: _Budget, cell: CellSize, rule: HybridRule | None, logged: int) -> float:
    """Tokens the 0.01 GiB rounding of the logged figures can move the prediction by."""
    # Logged GiB figures carry ±0.005 each; post and 0.12 × pre move the result together.
    tolerance = (0.005 + 0.005 * (1 - (budget.mfs or 0))) * formula.GIB / cell.bytes + budget.page
    if rule is not None:
        # A hybrid's bytes per token come from rounded pool lines (±0.01 GiB over K + V), and a
        # Mamba state (±0.01 GiB) is taken from rest as logged.
        tolerance += logged * 0.01 / rule.full_pool_gib if rule.full_pool_gib else 0.0
        tolerance += 0.01 * formula.GIB / rule.full_cell_bytes
        if rule.request_slots is not None:  # the padding slot is budgeted from 0.5.19 only
            per_slot = rule.logged_state_gib / (rule.request_slots + 1)
            tolerance += per_slot * formula.GIB / rule.full_cell_bytes
    return tolerance


def _prediction_note(
    budget: _Budget, cell: CellSize, predicted: int, logged: int, rule: HybridRule | None = None
) -> str:
    tolerance = _tolerance(budget, cell, rule, logged)
    if abs(predicted - logged) <= tolerance:
        figures = "free-memory figures"
        if rule is not None:
            figures = "free-memory figures and pool sizes" + (
                " (and the state's whole slots)" if rule.kind == "mamba" else ""
            )
        return (
            f"prediction is within {abs(predicted - logged):,} tokens of the log: the "
            f"difference is the 0.01 GiB rounding of the logged {figures}."
        )
    return (
        f"prediction differs from the log by {predicted - logged:+,} tokens, more than "
        "rounding explains: another limit applied (page size, --max-total-tokens, a "
        "hybrid/SWA pool, or draft layers in the cell size from 0.5.14)."
    )


@dataclass(frozen=True, slots=True)
class ReserveTable:
    """Where the reserve went on one rank: the table's title (naming the rank) and rows."""

    title: str
    rows: tuple[tuple[str, float], ...]
    rank: str  # whose lines the rows are
    derived: tuple[tuple[str, str], ...] = ()  # rows kvtop computed: (label, how)


def reserve_table(
    explanation: SizingExplanation, rank: RankStartup | None, finished: bool
) -> ReserveTable:
    """Where the reserve went on `rank` (the selected GPU's), titled with its name; the
    explanation's own rank when none is selected or the selected one logged no KV pool."""
    if rank is not None and rank.rank != explanation.rank:
        spent, _ = _reserve_spent(rank)
        if spent:
            return ReserveTable(
                explanation.spent_title_of(rank.rank),
                _so_far(spent, finished),
                rank.rank,
                reserve_derived(rank, spent),
            )
    return ReserveTable(
        explanation.spent_title,
        explanation.reserve_spent,
        explanation.rank,
        explanation.reserve_derived,
    )


def reserve_derived(
    rank: RankStartup, spent: tuple[tuple[str, float], ...]
) -> tuple[tuple[str, str], ...]:
    """The rows of where the reserve went that kvtop computed rather than read, with how."""
    target, draft = rank.target.derived, rank.draft.derived if rank.draft is not None else {}
    how = {
        "draft KV": draft.get("kv_gib"),
        "target CUDA graphs": target.get("graph_gib"),
        "draft CUDA graphs": draft.get("graph_gib"),
        OTHER_AFTER_POOL: "free after the KV cache − the items above − free after startup",
    }
    return tuple((label, words) for label, _ in spent if (words := how.get(label)) is not None)


def _so_far(spent: tuple[tuple[str, float], ...], finished: bool) -> tuple[tuple[str, float], ...]:
    """Before ready the latest reading is not "after startup"."""
    if finished:
        return spent
    return tuple(("free so far" if k == "free after startup" else k, v) for k, v in spent)


def _reserve_spent(rank: RankStartup) -> tuple[tuple[tuple[str, float], ...], float | None]:
    """Where the memory left after the target KV pool went, and what stayed free after startup."""
    after_pool = rank.target.avail_after_pool_gib
    if after_pool is None:
        return (), None
    draft = rank.draft
    items = (
        ("draft weights", draft.weights_gib if draft is not None else None),
        ("draft KV", draft.kv_gib if draft is not None else None),
        ("target CUDA graphs", rank.target.graph_gib),
        ("draft CUDA graphs", draft.graph_gib if draft is not None else None),
    )
    itemised = [(label, gib) for label, gib in items if gib is not None]
    spent = [("free after the KV cache", after_pool), *itemised]
    last_free, _ = free_after_startup(rank)
    if last_free is not None:
        other = round(after_pool - sum(v for _, v in itemised) - last_free, 2)
        if other > 0.005:
            spent.append((OTHER_AFTER_POOL, other))
        spent.append(("free after startup", last_free))
    return tuple(spent), last_free


def _context_len(startup: Startup) -> int | None:
    context = startup.summary.context_len if startup.summary else None
    args = startup.server_args
    context = context or (args.context_length if args else None)
    return context if context is not None and usable(context) else None


def _sizing_inputs(
    startup: Startup,
    budget: _Budget,
    cell: CellSize | None,
    tokens: int | None,
    headroom: float | None,
) -> SizingInputs | None:
    """Everything a what-if needs, when SGLang's arithmetic can be replayed at all."""
    pre, post, mfs = budget.pre_load_free_gib, budget.post_load_free_gib, budget.mfs
    if pre is None or post is None or cell is None or mfs is None or not tokens:
        return None
    if not usable(pre, cell.bytes):
        return None
    return SizingInputs(
        mfs, pre, post, cell.bytes, tokens, budget.page, budget.cap, headroom, _context_len(startup)
    )


def _what_ifs(
    inputs: SizingInputs | None, extra_mfs: Sequence[float]
) -> tuple[formula.WhatIf, ...]:
    if inputs is None:
        return ()
    values = what_if_values(inputs.mem_fraction_static, extra_mfs)
    return tuple(inputs.what_if(value) for value in values)


def _headroom_note(headroom: float | None, margin_gib: float) -> str | None:
    if headroom is None or headroom >= margin_gib:
        return None
    return (
        f"free after startup is only {headroom:.2f} GiB, under the {margin_gib:g} "
        "GiB safe margin: large prefills may run out of memory."
    )


def _hybrid_cell(rule: HybridRule) -> CellSize:
    """A hybrid model's rest memory per full-pool token, as the formula's cell size."""
    return CellSize(
        bytes=rule.effective_cell_bytes,
        source=f"hybrid {rule.kind}",
        explanation=f"rest memory per full-pool token of a {rule.kind} hybrid, from its pool lines",
    )


def _hybrid_steps(rule: HybridRule | None) -> list[Step]:
    return [] if rule is None else [Step(*step) for step in rule.steps]


def _hybrid_inputs(inputs: SizingInputs | None, rule: HybridRule | None) -> SizingInputs | None:
    """A Mamba model's fixed state comes out of post-load free before the KV pool sees it."""
    if inputs is None or rule is None:
        return inputs
    split = rule.kind == "mamba" and rule.effective_cell_bytes != rule.full_cell_bytes
    return replace(
        inputs,
        post_load_free_gib=inputs.post_load_free_gib - rule.fixed_gib,
        max_requests=rule.request_slots,
        slots_follow_pool=split,
        kv_cell_bytes=rule.full_cell_bytes if split else None,
    )


def _over_budget(
    budget: _Budget, cell: CellSize, rule: HybridRule | None, predicted: int, logged: int
) -> OverBudget | None:
    """The logged pool is larger than the formula allows by more than rounding explains."""
    if logged - predicted <= _tolerance(budget, cell, rule, logged):
        return None
    return OverBudget(predicted, logged, (logged - predicted) * cell.bytes / formula.GIB)


def explain(
    startup: Startup,
    choice: CellSizeChoice,
    version: tuple[int, ...] | None,
    what_if_mfs: Sequence[float] = (),
    request_len: int | None = None,
    planner: Planner | None = None,
    safe_margin_gib: float = SAFE_HEADROOM_GIB,
) -> SizingExplanation | None:
    """The formula with this startup's numbers, using SGLang's own inputs: the minimum over ranks;
    free after startup under `safe_margin_gib` is an OOM risk."""
    rank = _reference_rank(startup)
    if rank is None:
        return None
    budget = _budget(startup)
    rule = hybrid_rule(rank.target, budget.page, startup.server_args, version, budget.rest_gib)
    cell = choice.cell if rule is None else _hybrid_cell(rule)
    tokens = rank.target.kv_tokens
    steps: list[Step | None] = [*_budget_steps(budget), *_hybrid_steps(rule)]
    steps.append(_cell_size_step(cell) if rule is None else None)
    notes: list[str | None] = [f"cell size {choice.note}"] if rule is None else [*rule.notes]
    dsv4 = unmodelled_note(rank.target)
    if dsv4 is not None:  # no cell size applies: nothing predicted, nothing what-if
        cell, steps[-1], notes = None, None, [dsv4]
    if budget.mfs is None:
        notes.append("mem_fraction_static is unknown (no server_args line): reserve not computed.")
    predicted = _predicted_tokens(budget, cell, rule)
    engine_pools = None
    if predicted is not None and planner is not None and budget.mfs is not None:
        # The engine unanchored: what SGLang computes from this boot's own inputs, to be
        # compared with what the log printed (the same engine as the plan and the what-if).
        engine_pools = replace(planner, anchor=None).pools_at(budget.mfs)
        predicted = engine_pools.tokens
    over = None
    if predicted is not None and cell is not None:
        steps.append(_max_total_tokens_step(budget, cell, predicted, tokens, rule, engine_pools))
        if tokens is not None:
            over = _over_budget(budget, cell, rule, predicted, tokens)
            notes.append(
                over.sentence() if over else _prediction_note(budget, cell, predicted, tokens, rule)
            )
    steps.append(_host_pool_step(startup, rank, choice.cell, budget.page))
    spent, headroom = _reserve_spent(rank)
    spent = _so_far(spent, startup.finished)
    if not startup.finished:  # before ready the latest reading is not "after startup"
        headroom = None
    inputs = _hybrid_inputs(_sizing_inputs(startup, budget, cell, tokens, headroom), rule)
    if inputs is not None and planner is not None:
        inputs = replace(inputs, planner=replace(planner, safe_margin_gib=safe_margin_gib))
    if inputs is not None:
        inputs = replace(inputs, safe_margin_gib=safe_margin_gib)
        notes.append(_headroom_note(headroom, safe_margin_gib))
    return SizingExplanation(
        rank=rank.rank,
        mem_fraction_static=budget.mfs,
        steps=tuple(step for step in steps if step is not None),
        reserve_spent=spent,
        free_after_pool_gib=rank.target.avail_after_pool_gib,
        free_after_startup_gib=headroom,
        what_ifs=_what_ifs(inputs, what_if_mfs),
        reverse=(),  # tuning.with_caveats: the questions answered as the formula modal does
        draft_rule=(
            formula.draft_budget_rule(version, startup.version) if startup.speculative else None
        ),
        notes=tuple(note for note in notes if note is not None),
        inputs=inputs,
        pre_load_rank=budget.pre_rank,
        post_load_rank=budget.post_rank,
        over_budget=over,
        hybrid=rule,
        reserve_derived=reserve_derived(rank, spent),
        safe_margin_gib=safe_margin_gib,
    )
