"""SGLang's KV-cache sizing arithmetic (reserve, profiled tokens, cell size, what-if, host pool)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

# The one margin's home is below the sizing (the thresholds share it); kvtop plan and the
# command line read it from here.
from kvtop.model.safe_margin import SAFE_HEADROOM_GIB as SAFE_HEADROOM_GIB
from kvtop.model.safe_margin import SAFE_MARGIN_MAX_GIB as SAFE_MARGIN_MAX_GIB

if TYPE_CHECKING:  # the version range is read, never built, here: its module loads every event
    from kvtop.sglang.version_hint import VersionRange

GIB: int = 1 << 30
"""SGLang's device "GB" (get_available_gpu_memory, KV Cache lines) is this many bytes."""

DECIMAL_GB: int = 10**9
"""HiCache host lines and --hicache-size use decimal GB."""

DEFAULT_HICACHE_RATIO: float = 2.0

FIRST_DRAFT_BUDGETED_VERSION: tuple[int, int, int] = (0, 5, 14)
LAST_DRAFT_HEADROOM_VERSION: tuple[int, int, int] = (0, 5, 6)

# Users type mem_fraction_static with three decimals; solving for it rounds to this step.
_MFS_STEPS_PER_UNIT = 1000


# --------------------------------------------------------------------------- budget


def reserve_gib(pre_load_free_gib: float, mem_fraction_static: float) -> float:
    """GiB that SGLang keeps out of the KV pool: pre-load free × (1 − mem_fraction_static)."""
    return pre_load_free_gib * (1 - mem_fraction_static)


def rest_gib(
    post_load_free_gib: float, pre_load_free_gib: float, mem_fraction_static: float
) -> float:
    """GiB handed to the KV pool: post-load free − reserve (negative means SGLang fails)."""
    # Same operation order as SGLang so float rounding matches its integer token count.
    return post_load_free_gib - reserve_gib(pre_load_free_gib, mem_fraction_static)


def profiled_tokens(
    rest_gib: float,
    cell_size_bytes: float,
    page_size: int = 1,
    max_total_tokens: int | None = None,
) -> int:
    """max_total_num_tokens as SGLang computes it; <= 0 is its "Not enough memory" failure."""
    _check_cell(cell_size_bytes)
    _check_page(page_size)
    # int() first, as SGLang does; with an inferred (float) cell the floor of the division.
    tokens = int(int(rest_gib * GIB) // cell_size_bytes)
    if max_total_tokens is not None:
        tokens = min(tokens, max_total_tokens)
    return tokens // page_size * page_size


def kv_pool_gib(tokens: int, cell_size_bytes: float, page_size: int = 1) -> float:
    """GiB of the KV pool SGLang logs: one extra page of rows pads slot 0."""
    return (tokens + page_size) * cell_size_bytes / GIB


def min_viable_mfs(pre_load_free_gib: float, post_load_free_gib: float) -> float:
    """mem_fraction_static at which rest memory is exactly zero (SGLang ≥0.5.14's hint)."""
    _check_pre(pre_load_free_gib)
    return 1 - post_load_free_gib / pre_load_free_gib


def mfs_for_tokens(
    tokens: int,
    pre_load_free_gib: float,
    post_load_free_gib: float,
    cell_size_bytes: float,
    page_size: int = 1,
) -> float:
    """Smallest 3-decimal mem_fraction_static whose profiled pool holds ``tokens``.

    Values above 1.0 mean no mem_fraction_static can fit that many tokens.
    """
    if tokens < 1:
        raise ValueError(f"tokens must be at least 1, got {tokens}")
    _check_pre(pre_load_free_gib)
    _check_cell(cell_size_bytes)
    _check_page(page_size)
    aligned_tokens = -(-tokens // page_size) * page_size
    needed_rest_gib = aligned_tokens * cell_size_bytes / GIB
    exact_mfs = 1 - (post_load_free_gib - needed_rest_gib) / pre_load_free_gib
    milli = math.ceil(exact_mfs * _MFS_STEPS_PER_UNIT)

    def reaches(m: int) -> bool:
        rest = rest_gib(post_load_free_gib, pre_load_free_gib, m / _MFS_STEPS_PER_UNIT)
        return profiled_tokens(rest, cell_size_bytes, page_size) >= tokens

    # The closed form ignores SGLang's int() truncation and float noise in 1 − mfs; stepping
    # against profiled_tokens itself settles the exact boundary.
    for _ in range(_MFS_STEPS_PER_UNIT):
        if reaches(milli):
            break
        milli += 1
    for _ in range(_MFS_STEPS_PER_UNIT):
        if not reaches(milli - 1):
            break
        milli -= 1
    return milli / _MFS_STEPS_PER_UNIT


def mfs_for_requests(
    num_requests: int,
    context_len: int,
    pre_load_free_gib: float,
    post_load_free_gib: float,
    cell_size_bytes: float,
    page_size: int = 1,
) -> float:
    """Smallest 3-decimal mem_fraction_static that fits ``num_requests`` full contexts."""
    return mfs_for_tokens(
        num_requests * context_len,
        pre_load_free_gib,
        post_load_free_gib,
        cell_size_bytes,
        page_size,
    )


def concurrent_requests(tokens: int, context_len: int) -> float:
    """How many requests of ``context_len`` tokens the pool holds at once."""
    if context_len <= 0:
        raise ValueError(f"context_len must be positive, got {context_len}")
    return tokens / context_len


# --------------------------------------------------------------------------- cell size

_DTYPE_BYTES: dict[str, float] = {
    "bfloat16": 2,
    "float16": 2,
    "float32": 4,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "uint8": 1,
    "fp4_e2m1": 0.5,
}

_DTYPE_ALIASES: dict[str, str] = {
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16": "float16",
    "float16": "float16",
    "half": "float16",
    "fp32": "float32",
    "float32": "float32",
    "float": "float32",
    "fp8": "float8_e4m3fn",
    "fp8_e4m3": "float8_e4m3fn",
    "float8_e4m3fn": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
    "float8_e5m2": "float8_e5m2",
    # ROCm builds report the fnuz variants.
    "float8_e4m3fnuz": "float8_e4m3fnuz",
    "float8_e5m2fnuz": "float8_e5m2fnuz",
    "uint8": "uint8",
    "fp4_e2m1": "fp4_e2m1",
    "float4_e2m1fn_x2": "fp4_e2m1",
}


def canonical_dtype(name: str | None) -> str | None:
    """torch name ("bfloat16", "float8_e4m3fn", ...) for a server-arg or log spelling."""
    if name is None:
        return None
    key = name.strip().lower().removeprefix("torch.")
    return _DTYPE_ALIASES.get(key)


def kv_cache_dtype_name(
    kv_cache_dtype: str | None,
    model_dtype: str | None = None,
    kv_cache_quant_fp8: bool = False,
) -> str | None:
    """The dtype the KV pool really uses after SGLang resolves ``auto``; None if unknown."""
    if kv_cache_dtype is None or kv_cache_dtype.strip().lower() == "auto":
        # A checkpoint that ships FP8 KV scales makes SGLang pick e4m3 on its own.
        if kv_cache_quant_fp8:
            return "float8_e4m3fn"
        if model_dtype is None:
            return "bfloat16"
        return canonical_dtype(model_dtype) or "bfloat16"
    return canonical_dtype(kv_cache_dtype)


def element_size_bytes(
    kv_cache_dtype: str | None,
    model_dtype: str | None = None,
    kv_cache_quant_fp8: bool = False,
) -> float | None:
    """Bytes per KV element (torch element size); fp4 is 0.5, scale buffers not counted."""
    name = kv_cache_dtype_name(kv_cache_dtype, model_dtype, kv_cache_quant_fp8)
    return None if name is None else _DTYPE_BYTES[name]


def mla_cell_size_bytes(
    kv_lora_rank: int, qk_rope_head_dim: int, num_layers: int, element_bytes: float
) -> int:
    """MLA bytes per token per rank; every TP rank stores the whole latent, so no TP split."""
    return int((kv_lora_rank + qk_rope_head_dim) * num_layers * element_bytes)


def kv_heads_per_rank(total_kv_heads: int, attn_tp_size: int = 1) -> int:
    """SGLang's get_num_kv_heads: heads are replicated when TP exceeds the KV head count."""
    return max(1, total_kv_heads // attn_tp_size)


def mha_cell_size_bytes(
    total_kv_heads: int,
    head_dim: int,
    v_head_dim: int | None,
    num_layers: int,
    element_bytes: float,
    attn_tp_size: int = 1,
) -> int:
    """MHA/GQA bytes per token per rank (K and V)."""
    v_dim = head_dim if v_head_dim is None else v_head_dim
    heads = kv_heads_per_rank(total_kv_heads, attn_tp_size)
    return int(heads * (head_dim + v_dim) * num_layers * element_bytes)


def inferred_cell_size_bytes(kv_gib: float, tokens: int, page_size: int = 1) -> float:
    """Bytes per token implied by a logged pool size (MLA "KV size" or K + V)."""
    rows = tokens + page_size
    if rows <= 0:
        raise ValueError(f"cannot infer a cell size from {tokens} tokens")
    return kv_gib * GIB / rows


# --------------------------------------------------------------------------- what-if


@dataclass(frozen=True, slots=True)
class WhatIf:
    """The KV pool and headroom SGLang would end up with at another mem_fraction_static."""

    mem_fraction_static: float
    reserve_gib: float
    rest_gib: float
    tokens: int
    delta_tokens: int
    delta_pct: float | None
    kv_pool_gib: float
    delta_kv_gib: float
    headroom_after_graphs_gib: float | None
    requests_at_context: float | None

    @property
    def would_start(self) -> bool:
        """False when SGLang would stop with "Not enough memory" at this value."""
        return self.tokens > 0


def what_if(
    mem_fraction_static_new: float,
    *,
    pre_load_free_gib: float,
    post_load_free_gib: float,
    cell_size_bytes: float,
    current_tokens: int,
    page_size: int = 1,
    max_total_tokens: int | None = None,
    headroom_after_graphs_gib: float | None = None,
    context_len: int | None = None,
    mem_fraction_static_current: float | None = None,
    max_requests: int | None = None,
) -> WhatIf:
    """Replay SGLang's sizing at ``mem_fraction_static_new``.

    ``headroom_after_graphs_gib`` is the free memory measured after startup at the current
    value (None while startup is unfinished: sizing.explain passes no "after startup" figure
    before the server was ready, so no what-if speaks of one); raising the fraction eats into it by exactly the extra KV pool. Pass
    ``mem_fraction_static_current`` to anchor on the logged token count: the logged free-memory
    figures are rounded to 0.01 GiB, which alone can move the replayed count by ~100 tokens,
    so without the anchor the current value itself could show a spurious delta.
    ``max_requests`` caps the requests at the context length by another pool (a Mamba model's
    state slots: one per running request).
    """
    reserve_new = reserve_gib(pre_load_free_gib, mem_fraction_static_new)
    cap_aligned = None if max_total_tokens is None else max_total_tokens // page_size * page_size
    current_was_capped = cap_aligned is not None and current_tokens >= cap_aligned
    if mem_fraction_static_current is not None and current_tokens > 0 and not current_was_capped:
        rest_new = anchored_rest_gib(
            current_tokens,
            cell_size_bytes,
            page_size,
            pre_load_free_gib,
            mem_fraction_static_current,
            mem_fraction_static_new,
        )
    else:
        rest_new = rest_gib(post_load_free_gib, pre_load_free_gib, mem_fraction_static_new)
    tokens = profiled_tokens(rest_new, cell_size_bytes, page_size, max_total_tokens)
    formula_rest = rest_gib(post_load_free_gib, pre_load_free_gib, mem_fraction_static_new)
    if formula_rest <= 0:
        # At or under the minimum viable value SGLang stops ("Not enough memory", ≥0.5.14 "Loaded
        # weights leave no GPU memory for the KV cache"), whatever the anchor's rounding gives.
        tokens = min(tokens, profiled_tokens(formula_rest, cell_size_bytes, page_size))
    pool_tokens = max(tokens, 0)
    delta_tokens = pool_tokens - current_tokens
    delta_kv = delta_tokens * cell_size_bytes / GIB
    return WhatIf(
        mem_fraction_static=mem_fraction_static_new,
        reserve_gib=reserve_new,
        rest_gib=rest_new,
        tokens=tokens,
        delta_tokens=delta_tokens,
        delta_pct=None if current_tokens <= 0 else 100 * delta_tokens / current_tokens,
        kv_pool_gib=kv_pool_gib(pool_tokens, cell_size_bytes, page_size) if tokens > 0 else 0.0,
        delta_kv_gib=delta_kv,
        headroom_after_graphs_gib=(
            None if headroom_after_graphs_gib is None else headroom_after_graphs_gib - delta_kv
        ),
        requests_at_context=_requests_at_context(pool_tokens, context_len, max_requests),
    )


def anchored_rest_gib(
    logged_tokens: int,
    cell_size_bytes: float,
    page_size: int,
    pre_load_free_gib: float,
    mem_fraction_static_logged: float,
    mem_fraction_static_new: float,
) -> float:
    """Rest memory at another mem_fraction_static, pinned by a logged pool of `logged_tokens`.

    The logged count pins the rest to within one page (the logged GiB figures are rounded to
    0.01, which alone moves a replay by ~100 tokens); take the middle of that page and move it
    by pre-load free × the change of the fraction. The formula screen's what-if and
    `kvtop plan --from-log` both start here.
    """
    observed_rest = (logged_tokens + page_size / 2) * cell_size_bytes / GIB
    return observed_rest + pre_load_free_gib * (
        mem_fraction_static_new - mem_fraction_static_logged
    )


def _requests_at_context(
    tokens: int, context_len: int | None, max_requests: int | None
) -> float | None:
    """Requests of the context length the pools hold: the KV pool's, or fewer state slots."""
    if context_len is None:
        return None
    requests = concurrent_requests(tokens, context_len)
    return requests if max_requests is None else min(requests, float(max_requests))


# --------------------------------------------------------------------------- host pool


@dataclass(frozen=True, slots=True)
class HostKvPool:
    """One rank's HiCache host pool; ``gb`` is decimal GB as SGLang logs it."""

    tokens: int
    bytes: int
    gb: float


def host_kv_pool(
    device_tokens: int,
    size_per_token_bytes: int,
    page_size: int = 1,
    hicache_ratio: float | None = None,
    hicache_size_gb: float | None = None,
) -> HostKvPool:
    """Host pool per rank: --hicache-size (decimal GB) wins over the ratio when > 0."""
    _check_cell(size_per_token_bytes)
    _check_page(page_size)
    if hicache_size_gb is not None and hicache_size_gb > 0:
        host_tokens = int(hicache_size_gb * DECIMAL_GB // size_per_token_bytes)
    else:
        ratio = DEFAULT_HICACHE_RATIO if hicache_ratio is None else hicache_ratio
        host_tokens = int(device_tokens * ratio)
    # SGLang always adds one page, even when host_tokens is already aligned.
    page_num = host_tokens // page_size + 1
    tokens = page_num * page_size
    total_bytes = tokens * size_per_token_bytes
    return HostKvPool(tokens=tokens, bytes=total_bytes, gb=total_bytes / DECIMAL_GB)


# --------------------------------------------------------------------------- versions

_VERSION_RE = re.compile(r"(?<![\w.])v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> tuple[int, ...] | None:
    """(major, minor, patch) from "0.5.8.post1", "v0.5.14", "SGLang 0.5.23"; None if absent."""
    match = _VERSION_RE.search(text)
    if match is None:
        return None
    return tuple(int(part) for part in match.groups() if part is not None)


def format_version(version: tuple[int, ...], hint: VersionRange | None = None) -> str:
    """The SGLang version in the words every screen and the report use.

    With the log's `hint`, a version that is one end of that range (the end kvtop picked to
    apply a version rule, see sizing.sglang_version) is shown as the whole range,
    "0.5.3–0.5.8": the log pins down no more than that. A version outside the range (the
    user's --sglang-version) is shown as given.
    """
    ranged = hint is not None and hint.known and hint.low != hint.high
    if hint is not None and ranged and tuple(version) in (hint.low, hint.high):
        return hint.text()
    return ".".join(str(part) for part in version)


def version_text(version: tuple[int, ...] | None, hint: VersionRange) -> str:
    """The version every screen and the report show: the rule's version in the range's words
    (format_version), else the log's range ("0.5.3–0.5.8", "≥0.5.14", "unknown")."""
    return hint.text() if version is None else format_version(version, hint)


@dataclass(frozen=True, slots=True)
class DraftBudgetRule:
    """Whether this SGLang counts the speculative draft inside mem_fraction_static."""

    budgeted: bool | None
    text: str


_RESERVE_WORDS = "the reserve pre-load free × (1 − mem_fraction_static)"
_BUDGETED_WORDS = (
    "draft weights are loaded before profiling and the draft's KV layers are added to the "
    "target's cell size, so they are inside the mem_fraction_static budget"
)
_HEADROOM_WORDS = (
    "also sizes the target and draft KV caches a little above the profiled value (max_running_requests × "
    "(speculative_num_steps × speculative_eagle_topk + speculative_num_draft_tokens) + 100 "
    "tokens), so the target KV cache can slightly exceed the mem_fraction_static budget"
)


def _reaches_headroom(hint: VersionRange) -> bool:
    """A range whose older end still pads the pools (up to 0.5.6)."""
    return hint.low <= LAST_DRAFT_HEADROOM_VERSION


def draft_budget_rule(
    version: tuple[int, ...] | None, hint: VersionRange | None = None
) -> DraftBudgetRule:
    """How the speculative draft model is paid for, in an operator's words.

    `hint` (the log's version range) names the version as a range where the log gives one,
    and adds what the older end of the range does differently.
    """
    if version is None:
        # A range across 0.5.13/0.5.14 is still a range: named, with both rules (never "unknown").
        which = (
            f"SGLang {hint.text()} (the log's formats do not say which)"
            if hint is not None and hint.known
            else "SGLang version unknown"
        )
        return DraftBudgetRule(
            budgeted=None,
            text=(
                f"{which}. Up to 0.5.13 the draft model is not budgeted: its "
                f"weights, its KV cache and all CUDA graphs are paid from {_RESERVE_WORDS}. "
                f"From 0.5.14 the {_BUDGETED_WORDS}."
            ),
        )
    padded = (*version, 0, 0, 0)[:3]
    shown = format_version(version, hint)
    if padded >= FIRST_DRAFT_BUDGETED_VERSION:
        return DraftBudgetRule(budgeted=True, text=f"SGLang {shown}: {_BUDGETED_WORDS}.")
    text = (
        f"SGLang {shown} does not budget the draft model: its weights, its KV cache and all "
        f"CUDA graphs are paid from {_RESERVE_WORDS}."
    )
    if padded <= LAST_DRAFT_HEADROOM_VERSION:
        text += f" SGLang {shown} {_HEADROOM_WORDS}."
    elif hint is not None and shown != format_version(version) and _reaches_headroom(hint):
        last = format_version(LAST_DRAFT_HEADROOM_VERSION)
        text += f" Up to {last} the target KV cache can also slightly exceed that budget."
    return DraftBudgetRule(budgeted=False, text=text)


# --------------------------------------------------------------------------- checks


def _check_cell(cell_size_bytes: float) -> None:
    if not cell_size_bytes > 0:
        raise ValueError(f"cell size must be positive, got {cell_size_bytes} B/token")


def _check_page(page_size: int) -> None:
    if page_size < 1:
        raise ValueError(f"page_size must be at least 1, got {page_size}")


def _check_pre(pre_load_free_gib: float) -> None:
    if not pre_load_free_gib > 0:
        raise ValueError(f"pre-load free memory must be positive, got {pre_load_free_gib} GiB")
