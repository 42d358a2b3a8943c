"""SGLang's KV pool before launch: the sizing replayed for launch arguments not yet run.

Given each rank's free memory before and after the weights (measured by an earlier boot, or
estimated), the bytes per token of each pool and the launch's arguments, this is what SGLang
will compute: the reserve, the rest for KV, `max_total_num_tokens` after page rounding, the
SWA/full split or the Mamba state slots, `max_running_requests`, and what stays free after
startup, with a verdict (fits / not_enough_memory / oom_risk) and the flags that fix it.

Pure arithmetic on figures; where they come from is tui/kvtop/plan/inputs.py. The formula screen's
what-if (tuning.what_if_at) gives its verdict through `verdict_kind` below, and both anchor a
calibrated pool the same way (formula.anchored_rest_gib).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from kvtop.model.sizing import formula, sglang_rules
from kvtop.model.sizing.formula import GIB
from kvtop.model.str_enum import StrEnum

SAFE_HEADROOM_GIB = formula.SAFE_HEADROOM_GIB


class PlanVerdictKind(StrEnum):
    """What the plan says of one mem_fraction_static; its value is the JSON's and the text's word."""

    FITS = "fits"
    NOT_ENOUGH_MEMORY = "not_enough_memory"
    OOM_RISK = "oom_risk"
    # SGLang starts, but one request of the full context length does not fit in the pool.
    POOL_UNDER_CONTEXT = "pool_under_context"


FITS = PlanVerdictKind.FITS
NOT_ENOUGH_MEMORY = PlanVerdictKind.NOT_ENOUGH_MEMORY
OOM_RISK = PlanVerdictKind.OOM_RISK
POOL_UNDER_CONTEXT = PlanVerdictKind.POOL_UNDER_CONTEXT
DEFAULT_MAMBA_FULL_MEMORY_RATIO = sglang_rules.DEFAULT_MAMBA_FULL_MEMORY_RATIO
DEFAULT_SWA_FULL_TOKENS_RATIO = sglang_rules.DEFAULT_SWA_FULL_TOKENS_RATIO
SPECULATIVE_MAX_RUNNING_REQUESTS = 48  # SGLang resets it to 48 for EAGLE/MTP/NGRAM drafts
_MILLI = 1000


@dataclass(frozen=True, slots=True)
class RankMemory:
    """One rank's free memory around the weights, as SGLang measures it before sizing."""

    rank: str
    pre_load_free_gib: float
    weights_gib: float | None
    post_load_free_gib: float
    source: str  # "log", "log, rescaled" or "estimate"


@dataclass(frozen=True, slots=True)
class PoolCells:
    """Bytes per token of each pool on one rank, and how SGLang divides rest memory."""

    full_bytes: float  # the target's full-attention pool, bytes per token
    budget_bytes: float  # what SGLang divides rest memory by (full + r·SWA + budgeted draft)
    draft_bytes: float = 0.0  # the draft's own pool, bytes per token (0: no draft pool)
    swa_bytes: float | None = None
    swa_ratio: float | None = None
    mamba_state_bytes: int | None = None  # one request slot's Mamba state on this rank
    mamba_full_memory_ratio: float = DEFAULT_MAMBA_FULL_MEMORY_RATIO
    mamba_slots_fixed: int | None = None  # --max-mamba-cache-size
    mamba_slots_per_request: int = 3  # 3 state slots per running request with radix cache
    steps: tuple[tuple[str, str, str], ...] = ()  # (label, arithmetic, result)
    # How the SWA/full split is made (sglang_rules "swa_split"): "budget" divides rest by
    # budget_bytes (0.5.14 on); "profile_all" profiles with every layer as full attention first
    # (0.5.2–0.5.8); "profile_mixed" profiles with each kind's own size first (0.5.10).
    swa_split: str = "budget"
    profile_bytes: float | None = None  # what the profile divides rest by, for profile_*
    full_layers: int = 0
    swa_layers: int = 0
    # The padding slot of the Mamba state is inside the budget (0.5.19 on) or beside it.
    mamba_padding_in_budget: bool = True
    taken_from_rest_gib: float = 0.0  # a multimodal model's runtime reservation (0.5.19 on)


@dataclass(frozen=True, slots=True)
class Anchor:
    """An earlier boot's logged pool: pins rest memory to within a page (formula.what_if)."""

    tokens: int
    budget_bytes: float
    page_size: int
    mem_fraction_static: float
    post_load_free_gib: float
    state_gib: float = 0.0  # a Mamba model's logged state, taken from rest before the pool


@dataclass(frozen=True, slots=True)
class AfterPool:
    """What startup takes after the target pool, per rank (GiB), and the pool's own extras."""

    pool_overhead_gib: float = 0.0  # req_to_token pool and friends, beside the KV pool
    cuda_graph_gib: float = 0.0
    draft_weights_gib: float = 0.0  # loaded after the pool (SGLang ≤0.5.13)
    other_gib: float = 0.0  # what the earlier boot took that no line names
    cuda_graph_source: str = "estimate"


@dataclass(frozen=True, slots=True)
class RequestRules:
    """The inputs of SGLang's max_running_requests."""

    context_len: int | None
    max_running_requests: int | None = None  # as given (all DP workers together)
    attn_dp_size: int = 1
    speculative: bool = False
    version: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class PoolSizes:
    rest_gib: float
    tokens: int  # max_total_num_tokens (the full pool)
    swa_tokens: int | None = None
    mamba_slots: int | None = None
    state_gib: float = 0.0


@dataclass(frozen=True, slots=True)
class RankOutcome:
    rank: str
    memory: RankMemory
    reserve_gib: float
    rest_gib: float
    tokens_alone: int  # what this rank's own figures would give
    free_after_startup_gib: float | None


@dataclass(frozen=True, slots=True)
class PlanVerdict:
    """The plan's answer at one mem_fraction_static: its kind, the least value that starts, the
    fixes and the reasons (not the status verdict of tui/kvtop/model/verdict.py)."""

    kind: PlanVerdictKind
    minimum_mem_fraction_static: float | None
    fixes: tuple[str, ...]
    reasons: tuple[str, ...]
    # False when a launch flag the engine does not model may change the answer.
    firm: bool = True


@dataclass(frozen=True, slots=True)
class PlanResult:
    mem_fraction_static: float
    page_size: int
    pre_load_free_gib: float  # SGLang's input: the minimum over ranks
    post_load_free_gib: float
    pre_load_rank: str
    post_load_rank: str
    reserve_gib: float
    cells: PoolCells
    pools: PoolSizes
    kv_pool_gib: float  # target pool (+ draft pool), as allocated
    max_running_requests: int | None
    max_running_requests_rule: str
    after_pool: AfterPool
    free_after_startup_gib: float | None
    ranks: tuple[RankOutcome, ...]
    verdict: PlanVerdict
    requests_at_context: float | None
    tokens_per_request: tuple[tuple[int, int], ...]  # (concurrent requests, tokens each)
    anchored: bool
    notes: tuple[str, ...] = field(default=())
    safe_margin_gib: float = SAFE_HEADROOM_GIB  # the margin the verdict was judged by


# --------------------------------------------------------------------------- pools


def size_pools(rest_gib: float, cells: PoolCells, page: int, cap: int | None) -> PoolSizes:
    """SGLang's division of rest memory into its pools (full, SWA, Mamba state), by the rules
    of the version the cells were made for (sglang_rules: "mamba_slots", "swa_split")."""
    state_gib = 0.0
    slots: int | None = None
    kv_rest = rest_gib - cells.taken_from_rest_gib
    if cells.mamba_state_bytes:
        per = cells.mamba_state_bytes
        if cells.mamba_slots_fixed is not None:
            slots = cells.mamba_slots_fixed
        else:
            share = cells.mamba_full_memory_ratio / (1 + cells.mamba_full_memory_ratio)
            budget = max(kv_rest, 0) * share * GIB
            if cells.mamba_padding_in_budget:
                slots = max(0, int((budget - per) // per))
            else:
                slots = max(0, int(budget // per))
        held = slots + 1 if cells.mamba_padding_in_budget else slots
        state_gib = held * per / GIB
        kv_rest = kv_rest - state_gib
    if cells.swa_ratio is not None and cells.swa_split != "budget" and cells.profile_bytes:
        return _profiled_swa(rest_gib, kv_rest, cells, page, cap, slots, state_gib)
    tokens = int(int(kv_rest * GIB) // cells.budget_bytes)
    if cap is not None:
        tokens = min(tokens, cap)
    tokens = tokens // page * page
    swa = None
    if cells.swa_ratio is not None:
        swa = int(max(tokens, 0) * cells.swa_ratio) // page * page
    return PoolSizes(rest_gib, tokens, swa, slots, state_gib)


def _profiled_swa(
    rest_gib: float,
    kv_rest: float,
    cells: PoolCells,
    page: int,
    cap: int | None,
    slots: int | None,
    state_gib: float,
) -> PoolSizes:
    """0.5.2–0.5.13: a profile of T tokens first (user cap, page), then the split."""
    assert cells.profile_bytes is not None and cells.swa_ratio is not None
    profiled = int(int(kv_rest * GIB) // cells.profile_bytes)
    if cap is not None:
        profiled = min(profiled, cap)
    profiled = profiled // page * page
    ratio = cells.swa_ratio
    if cells.swa_split == "profile_all":
        layers = cells.full_layers + cells.swa_layers
        full = int(profiled * layers / (ratio * cells.swa_layers + cells.full_layers))
    else:
        full = int(profiled * cells.profile_bytes / cells.budget_bytes)
    swa = int(full * ratio) // page * page
    return PoolSizes(rest_gib, full // page * page, swa, slots, state_gib)


def rest_at(
    mfs: float, pre: float, post: float, anchor: Anchor | None, page_budget_bytes: float
) -> float:
    """Rest memory at `mfs`: anchored on an earlier boot's pool when there is one."""
    if anchor is None or anchor.tokens <= 0:
        return formula.rest_gib(post, pre, mfs)
    observed = formula.anchored_rest_gib(
        anchor.tokens,
        anchor.budget_bytes,
        anchor.page_size,
        pre,
        anchor.mem_fraction_static,
        mfs,
    )
    # The anchor's own state came out of that rest first; other changes of post-load free
    # (weights, TP) move rest one for one.
    return observed + anchor.state_gib + (post - anchor.post_load_free_gib)


# --------------------------------------------------------------------------- requests


def max_running_requests(
    tokens: int, rules: RequestRules, mamba_slots: int | None, ratio: int
) -> tuple[int | None, str]:
    """SGLang's max_running_requests (per DP worker) for this pool, and its rule in words."""
    if tokens <= 0:
        return None, "no pool"
    if not rules.context_len:
        return None, "context length unknown"
    given = rules.max_running_requests
    prefix = ""
    if given is None and rules.speculative:
        given = SPECULATIVE_MAX_RUNNING_REQUESTS
        prefix = "48, SGLang's value for speculative decoding: "
    limit = sglang_rules.max_running_requests(
        tokens, rules.context_len, given, rules.attn_dp_size, rules.version
    )
    result, words = limit.value, prefix + limit.words
    if mamba_slots is not None:
        cap = mamba_slots // max(1, ratio)
        if cap < result:
            result = cap
            words += f"; capped by the Mamba state: {mamba_slots:,} slots // {ratio}"
    return result, words


# --------------------------------------------------------------------------- plan


def verdict_kind(
    tokens: int,
    free_after_startup_gib: float | None,
    safe_margin_gib: float = SAFE_HEADROOM_GIB,
    spread_gib: float = 0.0,
) -> PlanVerdictKind:
    """The verdict for one mem_fraction_static (the plan's, and the formula screen's what-if).

    `spread_gib`: how far the pre-load free memory may be off (an estimate's start-up row; 0
    when a log measured it). Free memory after startup moves with it, so only a headroom under
    the margin by more than the spread is an OOM risk whichever way the estimate errs."""
    if tokens <= 0:
        return NOT_ENOUGH_MEMORY
    if free_after_startup_gib is not None and free_after_startup_gib < safe_margin_gib - spread_gib:
        return OOM_RISK
    return FITS


def within_spread(
    free_after_startup_gib: float | None, safe_margin_gib: float, spread_gib: float
) -> bool:
    """Whether the start-up estimate's spread decides the verdict: the headroom lies within
    the spread of the margin, on either side."""
    if free_after_startup_gib is None or spread_gib <= 0:
        return False
    return abs(free_after_startup_gib - safe_margin_gib) < spread_gib


@dataclass(frozen=True, slots=True)
class Planner:
    """Everything a plan needs; `at(mfs)` replays SGLang at any mem_fraction_static."""

    ranks: tuple[RankMemory, ...]
    cells: PoolCells
    page_size: int
    max_total_tokens: int | None
    after_pool: AfterPool | None  # None: what startup takes after the pool is unknown
    rules: RequestRules
    anchor: Anchor | None = None
    tp_size: int = 1
    disable_radix_cache: bool = False
    notes: tuple[str, ...] = ()
    unmodelled_flags: tuple[str, ...] = ()  # launch flags that may change memory, not modelled
    safe_margin_gib: float = SAFE_HEADROOM_GIB  # free after startup under this: OOM risk
    # How far the estimated pre-load free memory may be off (the start-up row's spread; 0 when
    # a log measured it): the verdict does not call a risk the estimate cannot tell.
    startup_spread_gib: float = 0.0

    def _minimum(self) -> tuple[RankMemory, RankMemory]:
        pre = min(self.ranks, key=lambda r: r.pre_load_free_gib)
        post = min(self.ranks, key=lambda r: r.post_load_free_gib)
        return pre, post

    def pools_at(self, mfs: float) -> PoolSizes:
        pre, post = self._minimum()
        rest = rest_at(
            mfs,
            pre.pre_load_free_gib,
            post.post_load_free_gib,
            self.anchor,
            self.cells.budget_bytes,
        )
        sizes = size_pools(rest, self.cells, self.page_size, self.max_total_tokens)
        formula_rest = formula.rest_gib(post.post_load_free_gib, pre.pre_load_free_gib, mfs)
        if formula_rest <= 0:
            # SGLang stops at or under the minimum whatever the anchor's rounding gives.
            sizes = replace(sizes, tokens=min(sizes.tokens, 0))
        return sizes

    def kv_pool_gib(self, tokens: int, swa_tokens: int | None = None) -> float:
        """The pools as allocated: one page of padding rows each, the SWA and draft pools."""
        if tokens <= 0:
            return 0.0
        rows = tokens + self.page_size
        target = rows * self.cells.full_bytes
        swa = 0.0
        if self.cells.swa_bytes and self.cells.swa_ratio is not None:
            if swa_tokens is None:
                ratio = self.cells.swa_ratio
                swa_tokens = int(tokens * ratio) // self.page_size * self.page_size
            swa = (swa_tokens + self.page_size) * self.cells.swa_bytes
        return (target + swa + rows * self.cells.draft_bytes) / GIB

    def free_after(self, memory: RankMemory, sizes: PoolSizes) -> float | None:
        """What stays free on this rank after startup (None when it cannot be told)."""
        if self.after_pool is None or sizes.tokens <= 0:
            return None
        a = self.after_pool
        taken = self.kv_pool_gib(sizes.tokens, sizes.swa_tokens) + sizes.state_gib
        taken += a.pool_overhead_gib + a.cuda_graph_gib + a.draft_weights_gib + a.other_gib
        taken += self.cells.taken_from_rest_gib
        beside = not self.cells.mamba_padding_in_budget
        if sizes.mamba_slots is not None and self.cells.mamba_state_bytes and beside:
            taken += self.cells.mamba_state_bytes / GIB  # the padding slot
        return memory.post_load_free_gib - taken

    def headroom_at(self, mfs: float) -> tuple[int, float | None]:
        """Tokens and the least free-after-startup over ranks at `mfs`."""
        sizes = self.pools_at(mfs)
        frees = [self.free_after(r, sizes) for r in self.ranks]
        known = [f for f in frees if f is not None]
        return sizes.tokens, (min(known) if known else None)

    def minimum_mfs(self) -> float | None:
        """The least 3-decimal mem_fraction_static at which SGLang starts (a pool of a page)."""
        return _first_milli(lambda m: self.pools_at(m).tokens > 0)

    def safe_mfs(self) -> float | None:
        """The largest 3-decimal mem_fraction_static leaving the safe margin free after startup."""
        best = None
        for milli in range(1, _MILLI):
            tokens, free = self.headroom_at(milli / _MILLI)
            if tokens > 0 and free is not None and free >= self.safe_margin_gib:
                best = milli / _MILLI
        return best

    def at(self, mfs: float) -> PlanResult:
        pre, post = self._minimum()
        sizes = self.pools_at(mfs)
        reserve = formula.reserve_gib(pre.pre_load_free_gib, mfs)
        outcomes = tuple(
            RankOutcome(
                rank=r.rank,
                memory=r,
                reserve_gib=formula.reserve_gib(r.pre_load_free_gib, mfs),
                rest_gib=formula.rest_gib(r.post_load_free_gib, r.pre_load_free_gib, mfs),
                tokens_alone=size_pools(
                    formula.rest_gib(r.post_load_free_gib, r.pre_load_free_gib, mfs),
                    self.cells,
                    self.page_size,
                    self.max_total_tokens,
                ).tokens,
                free_after_startup_gib=self.free_after(r, sizes),
            )
            for r in self.ranks
        )
        ratio = 1 if self.disable_radix_cache else self.cells.mamba_slots_per_request
        mrr, mrr_words = max_running_requests(
            sizes.tokens,
            self.rules,
            sizes.mamba_slots if self.cells.mamba_state_bytes else None,
            ratio,
        )
        frees = [o.free_after_startup_gib for o in outcomes if o.free_after_startup_gib is not None]
        free = min(frees) if frees else None
        context = self.rules.context_len
        requests = None
        if context and sizes.tokens > 0:
            requests = sizes.tokens / context
            if mrr is not None:
                requests = min(requests, float(mrr))
        per_request = _tokens_per_request(sizes.tokens, mrr)
        verdict = self._verdict(mfs, sizes.tokens, free)
        return PlanResult(
            mem_fraction_static=mfs,
            page_size=self.page_size,
            pre_load_free_gib=pre.pre_load_free_gib,
            post_load_free_gib=post.post_load_free_gib,
            pre_load_rank=pre.rank,
            post_load_rank=post.rank,
            reserve_gib=reserve,
            cells=self.cells,
            pools=sizes,
            kv_pool_gib=self.kv_pool_gib(sizes.tokens, sizes.swa_tokens),
            max_running_requests=mrr,
            max_running_requests_rule=mrr_words,
            after_pool=self.after_pool or AfterPool(),
            free_after_startup_gib=free,
            ranks=outcomes,
            verdict=verdict,
            requests_at_context=requests,
            tokens_per_request=per_request,
            anchored=self.anchor is not None,
            notes=self.notes,
            safe_margin_gib=self.safe_margin_gib,
        )

    def _verdict(self, mfs: float, tokens: int, free: float | None) -> PlanVerdict:
        spread = self.startup_spread_gib
        kind = verdict_kind(tokens, free, self.safe_margin_gib, spread)
        unsure = kind != NOT_ENOUGH_MEMORY and within_spread(free, self.safe_margin_gib, spread)
        context = self.rules.context_len
        short = bool(context and 0 < tokens < context)
        if kind == FITS and short:
            kind = POOL_UNDER_CONTEXT
        least = self.minimum_mfs()
        fixes: list[str] = []
        reasons: list[str] = []
        if kind == NOT_ENOUGH_MEMORY and mfs <= 0:
            reasons.append(
                f"mem_fraction_static {mfs:.3f}: SGLang's own default for a GPU this small is "
                "not above 0 (its reserve for activations and CUDA graphs is more than the GPU "
                "holds), so it leaves nothing for weights and KV cache"
            )
        elif kind == NOT_ENOUGH_MEMORY:
            reasons.append(
                f"at mem_fraction_static {mfs:.3f} the weights leave no memory for the KV cache "
                '(SGLang stops with "Not enough memory" / "Loaded weights leave no GPU '
                'memory for the KV cache")'
            )
            safe = self.safe_mfs()
            if least is not None and least < 1:
                pick = safe if safe is not None and safe >= least else least
                fixes.append(f"--mem-fraction-static {pick:.3f}")
            fixes.append(f"--tp-size {self.tp_size * 2} (the weights over twice the GPUs)")
            fixes.append("quantized weights (an FP8 or INT4 checkpoint)")
        elif kind == OOM_RISK and free is not None:
            if free < 0:
                reasons.append(
                    f"the CUDA graphs and what startup takes after the KV cache do not fit: "
                    f"{-free:.2f} GiB short (CUDA out of memory at startup)"
                    + self._largest_after_pool()
                )
            else:
                reasons.append(
                    f"only {free:.2f} GiB stays free after startup, under the "
                    f"{self.safe_margin_gib:g} GiB safe margin: large prefills may run out of memory"
                )
            safe = self.safe_mfs()
            if safe is not None and (least is None or safe >= least):
                fixes.append(f"--mem-fraction-static {safe:.3f}")
            graphs = self.after_pool.cuda_graph_gib if self.after_pool else 0.0
            table = self.after_pool.pool_overhead_gib if self.after_pool else 0.0
            if table > max(graphs, 1.0):
                fixes.append(
                    "a smaller --context-length or --max-running-requests (the request table "
                    f"takes {table:,.2f} GiB)"
                )
            if graphs >= 0.5:
                fixes.append(
                    f"--cuda-graph-max-bs with a smaller batch (the graphs take {graphs:.2f} GiB)"
                )
            fixes.append(f"--tp-size {self.tp_size * 2}")
        if short and context:
            reasons.append(
                f"the KV pool holds {tokens:,} tokens, {tokens / context:.2f} of one request of "
                f"the context length ({context:,} tokens): a request longer than the pool cannot "
                "run"
            )
            fixes.extend(self._context_fixes(tokens, context))
        if unsure and free is not None:
            reasons.append(
                f"{free:.2f} GiB stays free after startup by the estimate, within ±{spread:g} "
                f"GiB of the {self.safe_margin_gib:g} GiB safe margin: the free memory before "
                "the weights is estimated, and on this platform it varies that much between "
                "boots, so the plan cannot tell whether a boot keeps the margin (--from-log LOG "
                "of a boot here, or --gpu-memory free, measures it)"
            )
        firm = not self.unmodelled_flags and not unsure
        if self.unmodelled_flags:
            reasons.append(
                "not modelled: " + " ".join(self.unmodelled_flags) + " (the figures assume "
                "SGLang's defaults for them; a boot's log, --from-log, measures their effect)"
            )
        return PlanVerdict(kind, least, _one_each(fixes), tuple(reasons), firm)

    def _largest_after_pool(self) -> str:
        """The largest thing startup takes after the KV cache, in words (empty if unknown)."""
        a = self.after_pool
        if a is None:
            return ""
        items = {
            "the CUDA graphs": a.cuda_graph_gib,
            "the request table (max_running_requests × context length, int32)": (
                a.pool_overhead_gib
            ),
            "the draft's weights": a.draft_weights_gib,
        }
        name, gib = max(items.items(), key=lambda item: item[1])
        return f"; the largest is {name}, {gib:,.2f} GiB" if gib > 0 else ""

    def _context_fixes(self, tokens: int, context: int) -> list[str]:
        """A shorter context that fits the pool, or the fraction whose pool holds one request."""
        fixes = [f"--context-length {tokens // 1024 * 1024 or tokens:,}".replace(",", "")]
        holds = _first_milli(lambda m: self.pools_at(m).tokens >= context)
        free = self.headroom_at(holds)[1] if holds is not None else None
        if holds is not None and (free is None or free >= self.safe_margin_gib):
            fixes.append(f"--mem-fraction-static {holds:.3f} (holds one full-context request)")
        else:
            fixes.append(
                f"--tp-size {self.tp_size * 2} (no fraction holds one full-context request and "
                f"keeps the {self.safe_margin_gib:g} GiB margin on these GPUs)"
            )
        return fixes


def _one_each(fixes: list[str]) -> tuple[str, ...]:
    """Each flag and value once: the first fix that names it keeps its words."""
    seen: set[str] = set()
    kept = []
    for fix in fixes:
        key = " ".join(fix.split()[:2])
        if key not in seen:
            seen.add(key)
            kept.append(fix)
    return tuple(kept)


def _first_milli(ok: Callable[[float], bool]) -> float | None:
    low, high = 1, _MILLI - 1
    if not ok(high / _MILLI):
        return None
    # ok() grows with mem_fraction_static: bisect to the first value that passes.
    while low < high:
        mid = (low + high) // 2
        if ok(mid / _MILLI):
            high = mid
        else:
            low = mid + 1
    return low / _MILLI


def _tokens_per_request(tokens: int, mrr: int | None) -> tuple[tuple[int, int], ...]:
    if tokens <= 0:
        return ()
    counts = [1, 8, 32, 128]
    if mrr is not None and mrr not in counts:
        counts.append(mrr)
    return tuple((n, tokens // n) for n in sorted(set(counts)) if n <= max(tokens, 1))


def ceil_milli(value: float) -> float:
    """Up to the next 3-decimal value (SGLang's own suggestion rounds so)."""
    return math.ceil(value * _MILLI) / _MILLI
