"""SGLang's sizing of hybrid models: sliding-window (SWA) sub-pools and Mamba state beside the KV.

Both kinds split the same rest memory (post-load free − reserve) between several pools, so the
plain `rest / cell size` does not give the KV pool. What SGLang does, by version
(reference sglang.md f.3):

* SWA hybrids: the full pool gets `full = rest / (F + r·S)` tokens and the SWA pool `r·full`,
  where F and S are the bytes per token of the full and SWA sub-pools and r the SWA/full token
  ratio (`--swa-full-tokens-ratio`, default 0.8; some models set their own). 0.5.10 onwards
  sizes exactly so; 0.5.2–0.5.8 profile as if every layer had the full layers' size, which is
  the same whenever both kinds of layer have the same size per layer.
* Mamba hybrids (0.5.8+): the state slots are carved out of rest first (`--max-mamba-cache-size`,
  or the ratio split rest × r_m / (1 + r_m), r_m = `--mamba-full-memory-ratio`, default 0.9),
  the KV pool (full-attention layers only) gets what remains: `(rest − state) / F`.

kvtop reads F, S, the ratio and the state's size from the log's own pool lines, so the rule
below is "bytes of rest memory per full-pool token" (`effective_cell_bytes`) plus a fixed part
(`fixed_gib`) that does not grow with the pool: with those, the plain formula, the what-if and
the reverse questions apply unchanged to the full pool.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtop import fmt
from kvtop.model.sizing import sglang_rules
from kvtop.model.sizing.formula import GIB
from kvtop.sglang.server_args import ServerArgs
from kvtop.sglang.start_state import FULL, MAMBA, SWA, ModelMemory, Pool

DEFAULT_SWA_FULL_TOKENS_RATIO = sglang_rules.DEFAULT_SWA_FULL_TOKENS_RATIO
DEFAULT_MAMBA_FULL_MEMORY_RATIO = sglang_rules.DEFAULT_MAMBA_FULL_MEMORY_RATIO
# How close the logged state share of rest must be to r_m / (1 + r_m) to call it the ratio split.
_RATIO_SPLIT_TOLERANCE = 0.03


@dataclass(frozen=True, slots=True)
class HybridRule:
    """How SGLang divides the rest memory of a hybrid model, per token of its full pool."""

    kind: str  # "swa" or "mamba"
    full_cell_bytes: float  # bytes per token of the full-attention pool
    effective_cell_bytes: float  # rest memory per full-pool token (what grows with the pool)
    fixed_gib: float  # taken from rest before the pool and not growing with it
    steps: tuple[tuple[str, str, str], ...]  # (label, arithmetic, result)
    notes: tuple[str, ...]
    request_slots: int | None = None  # Mamba: a running request needs a state slot
    swa_ratio: float | None = None
    logged_state_gib: float = 0.0  # Mamba: the state (and intermediate caches) as logged
    full_pool_gib: float | None = None  # the logged full pool (its rounding bounds the match)

    def kv_tokens(self, rest_gib: float) -> int:
        """The full pool's tokens for `rest_gib` of rest memory (before page alignment, cap).

        A Mamba model's logged state is taken from rest as it is (its slot count is whole), so
        the prediction does not carry the ratio split's rounding to whole slots.
        """
        if self.kind == MAMBA:
            return int(int((rest_gib - self.logged_state_gib) * GIB) // self.full_cell_bytes)
        return int(int(rest_gib * GIB) // self.effective_cell_bytes)


def _cell(pool: Pool | None, page: int) -> float | None:
    if pool is None or not pool.tokens or pool.gib is None or pool.gib <= 0:
        return None
    return pool.gib * GIB / (pool.tokens + page)


def _arg_float(args: ServerArgs | None, name: str) -> float | None:
    value = args.raw.get(name) if args is not None else None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if 0 < number < 1e6 else None


def _find(pools: list[Pool], kind: str) -> Pool | None:
    return next((pool for pool in pools if pool.kind == kind), None)


def swa_rule(model: ModelMemory, page: int, version: tuple[int, ...] | None) -> HybridRule | None:
    pools = model.pools()
    full, swa = _find(pools, FULL), _find(pools, SWA)
    full_cell, swa_cell = _cell(full, page), _cell(swa, page)
    if full is None or swa is None or full_cell is None or swa_cell is None:
        return None
    ratio = (swa.tokens or 0) / (full.tokens or 1)
    effective = full_cell + ratio * swa_cell
    steps = (
        (
            "full sub-pool",
            f"{full.gib:.2f} GiB × 2^30 / ({full.tokens:,} + {page}) tokens",
            f"{full_cell:,.0f} B/token",
        ),
        (
            "SWA sub-pool",
            f"{swa.gib:.2f} GiB × 2^30 / ({swa.tokens:,} + {page}) tokens",
            f"{swa_cell:,.0f} B/token",
        ),
        (
            "SWA/full token ratio",
            f"{swa.tokens:,} / {full.tokens:,} (--swa-full-tokens-ratio, default "
            f"{DEFAULT_SWA_FULL_TOKENS_RATIO:g}; some models set their own)",
            f"{ratio:.3f}",
        ),
        (
            "rest per full-pool token",
            f"full + ratio × SWA = {full_cell:,.0f} + {ratio:.3f} × {swa_cell:,.0f}",
            f"{effective:,.0f} B/token",
        ),
    )
    notes = [
        f"sliding-window hybrid: SGLang sizes the full pool as rest / (full + {ratio:.3f} × SWA "
        "bytes per token) and gives the SWA pool that ratio of its tokens; requests at the "
        "context length are limited by the full pool (the SWA pool keeps only the window)."
    ]
    if version is not None and (*version, 0, 0)[:3] <= (0, 5, 8):
        notes.append(
            "SGLang ≤0.5.8 profiles a sliding-window model as if every layer had the full "
            "layers' size: kvtop's figure is exact only when both kinds of layer have the same "
            "size per layer."
        )
    return HybridRule(
        kind=SWA,
        full_cell_bytes=full_cell,
        effective_cell_bytes=effective,
        fixed_gib=0.0,
        steps=steps,
        notes=tuple(notes),
        swa_ratio=ratio,
        full_pool_gib=(full.gib or 0.0) + (swa.gib or 0.0),
    )


def mamba_rule(
    model: ModelMemory, page: int, args: ServerArgs | None, rest_gib: float | None
) -> HybridRule | None:
    pools = model.pools()
    full, state = _find(pools, FULL), model.mamba_gib
    full_cell = _cell(full, page)
    if full is None or full_cell is None or state is None:
        return None
    intermediate = model.mamba_intermediate_gib or 0.0
    ratio = _arg_float(args, "mamba_full_memory_ratio") or DEFAULT_MAMBA_FULL_MEMORY_RATIO
    share = ratio / (1 + ratio)
    explicit = _arg_float(args, "max_mamba_cache_size") is not None
    split = (
        not explicit
        and not intermediate
        and rest_gib is not None
        and rest_gib > 0
        and abs(state / rest_gib - share) <= _RATIO_SPLIT_TOLERANCE
    )
    slots = model.mamba_slots
    slots_text = f"{slots:,} request slots" if slots is not None else "request slots not logged"
    steps = [
        (
            "Mamba state",
            f"conv_state + ssm_state for {slots_text} (+1 padding slot)",
            f"{state:,.2f} GiB",
        )
    ]
    if intermediate:
        steps.append(
            ("Mamba intermediate states", "speculative decoding", f"{intermediate:.2f} GiB")
        )
    if split and rest_gib is not None:  # split needs rest_gib; the test narrows it for mypy
        how = (
            f"rest × {ratio:g} / (1 + {ratio:g}) = {rest_gib:.2f} × {share:.4f} "
            f"(--mamba-full-memory-ratio {ratio:g}): {state:.2f} GiB logged"
        )
        steps.append(("state share of rest", how, f"{rest_gib * share:,.2f} GiB"))
        effective, fixed = full_cell * (1 + ratio), 0.0
        rule = f"the state takes {fmt.pct(100 * share, 1)} of rest (ratio split), the KV cache the rest"
    elif rest_gib is None:
        effective, fixed = full_cell, state + intermediate
        rule = (
            "the state is taken from rest first (the ratio split of --mamba-full-memory-ratio, "
            "or a fixed slot count; without rest memory kvtop cannot tell which), the KV cache "
            "gets what remains"
        )
    else:
        effective, fixed = full_cell, state + intermediate
        rule = (
            "the state's slots are fixed (--max-mamba-cache-size, --max-running-requests or a "
            "speculative buffer), so the KV cache gets rest minus the state"
        )
    steps.append(
        (
            "KV bytes per token",
            f"{full.gib:.2f} GiB × 2^30 / ({full.tokens:,} + {page}) tokens (full-attention "
            "layers only)",
            f"{full_cell:,.0f} B/token",
        )
    )
    notes = (
        f"Mamba hybrid: {rule}; requests at the context length are limited by the KV cache and "
        f"by the {slots_text} (one per running request).",
    )
    return HybridRule(
        kind=MAMBA,
        full_cell_bytes=full_cell,
        effective_cell_bytes=effective,
        fixed_gib=fixed,
        steps=tuple(steps),
        notes=notes,
        request_slots=slots,
        logged_state_gib=state + intermediate,
        full_pool_gib=full.gib,
    )


def hybrid_rule(
    model: ModelMemory,
    page: int,
    args: ServerArgs | None,
    version: tuple[int, ...] | None,
    rest_gib: float | None,
) -> HybridRule | None:
    """The hybrid rule this model's pools follow, None for a plain model (or too little logged)."""
    if model.mamba_gib is not None:
        return mamba_rule(model, page, args, rest_gib)
    if model.sliding_window:
        return swa_rule(model, page, version)
    return None
