"""`kvtop plan`'s output: the text report and the JSON document (schema kvtop-plan/1)."""

from __future__ import annotations

from dataclasses import dataclass

from kvtop.model.sizing.formula import format_version
from kvtop.model.sizing.launch_args import LaunchArgs
from kvtop.model.sizing.plan import SAFE_HEADROOM_GIB, PlanResult
from kvtop.plan.build import Built, Gpus, ModelInfo

SCHEMA = "kvtop-plan/1"


@dataclass(frozen=True, slots=True)
class PlanContext:
    """What the plan was made from, for the report's header."""

    built: Built
    result: PlanResult
    args: LaunchArgs
    model: ModelInfo | None
    gpus: Gpus | None
    calibrated_from: str | None  # "LOG" or "unit UNIT"
    calibration_rank: str | None


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def plan_json(ctx: PlanContext) -> dict[str, object]:
    r, b = ctx.result, ctx.built
    cells = r.cells
    model = ctx.model
    return {
        "schema": SCHEMA,
        "sglang_version": format_version(b.version),
        "sglang_version_source": b.version_source,
        "model": None
        if model is None
        else {
            "config": model.path,
            "architecture": model.dims.architecture,
            "attention": model.dims.attention,
            "num_layers": model.dims.num_layers,
            "hybrid": model.shape.hybrid,
            "context_len": model.shape.context_len,
            "weights_gib": _round(model.weights_bytes / (1 << 30)) if model.weights_bytes else None,
        },
        "calibration": None
        if ctx.calibrated_from is None
        else {"from": ctx.calibrated_from, "rank": ctx.calibration_rank},
        "gpus": None
        if ctx.gpus is None
        else {
            "count": ctx.gpus.count,
            "total_gib": _round(ctx.gpus.total_mib / 1024),
            "name": ctx.gpus.name,
            "source": ctx.gpus.source,
        },
        "tp_size": ctx.args.tp,
        "dp_size": ctx.args.dp,
        "pp_size": ctx.args.pp,
        "mem_fraction_static": r.mem_fraction_static,
        "mem_fraction_static_source": b.mfs_source,
        "default_mem_fraction_static": None
        if b.default is None
        else {
            "value": b.default.mem_fraction_static,
            "reserved_mb": round(b.default.reserved_mb, 1),
            "rule": b.default.rule,
            "steps": list(b.default.steps),
        },
        "cell_bytes": round(cells.budget_bytes, 1),
        "cell_bytes_by_pool": {
            "full": round(cells.full_bytes, 1),
            "swa": None if cells.swa_bytes is None else round(cells.swa_bytes, 1),
            "draft": round(cells.draft_bytes, 1),
            "mamba_state_per_request": cells.mamba_state_bytes,
        },
        "page_size": r.page_size,
        "pre_load_free_gib": _round(r.pre_load_free_gib),
        "pre_load_rank": r.pre_load_rank,
        "post_load_free_gib": _round(r.post_load_free_gib),
        "post_load_rank": r.post_load_rank,
        "reserve_gib": _round(r.reserve_gib),
        "rest_gib": _round(r.pools.rest_gib),
        "max_total_num_tokens": max(r.pools.tokens, 0),
        "swa_tokens": r.pools.swa_tokens,
        "mamba_slots": r.pools.mamba_slots,
        "mamba_state_gib": _round(r.pools.state_gib) if r.pools.mamba_slots is not None else None,
        "kv_pool_gib": _round(r.kv_pool_gib),
        "max_running_requests": r.max_running_requests,
        "max_running_requests_rule": r.max_running_requests_rule,
        "cuda_graph_gib": _round(r.after_pool.cuda_graph_gib),
        "cuda_graph_source": r.after_pool.cuda_graph_source,
        "free_after_startup_gib": _round(r.free_after_startup_gib),
        "safe_headroom_gib": SAFE_HEADROOM_GIB,
        "ranks": [
            {
                "rank": o.rank,
                "weights_gib": _round(o.memory.weights_gib),
                "pre_load_free_gib": _round(o.memory.pre_load_free_gib),
                "post_load_free_gib": _round(o.memory.post_load_free_gib),
                "reserve_gib": _round(o.reserve_gib),
                "rest_gib": _round(o.rest_gib),
                "max_total_num_tokens_alone": max(o.tokens_alone, 0),
                "free_after_startup_gib": _round(o.free_after_startup_gib),
                "source": o.memory.source,
            }
            for o in r.ranks
        ],
        "verdict": {
            "kind": r.verdict.kind,
            "minimum_mem_fraction_static": r.verdict.minimum_mem_fraction_static,
            "fixes": list(r.verdict.fixes),
            "reasons": list(r.verdict.reasons),
        },
        "context_len": ctx.built.planner.rules.context_len,
        "requests_at_context_len": _round(r.requests_at_context),
        "tokens_per_request": [{"concurrent": n, "tokens": t} for n, t in r.tokens_per_request],
        "anchored_on_log": r.anchored,
        "ignored_arguments": list(ctx.args.ignored),
        "notes": list(r.notes),
    }


def _gib(value: float | None) -> str:
    return "?" if value is None else f"{value:,.2f} GiB"


def plan_text(ctx: PlanContext) -> str:
    r, b = ctx.result, ctx.built
    lines: list[str] = []
    head = f"kvtop plan · SGLang {format_version(b.version)} ({b.version_source})"
    lines.append(head)
    what = []
    if ctx.model is not None:
        d = ctx.model.dims
        what.append(
            f"model {d.architecture or '?'} ({d.attention}, {d.num_layers} layers"
            + (f", {ctx.model.shape.hybrid} hybrid" if ctx.model.shape.hybrid else "")
            + ")"
        )
    if ctx.calibrated_from:
        what.append(f"calibrated by {ctx.calibrated_from}")
    if ctx.gpus is not None:
        what.append(
            f"{ctx.gpus.count} × {ctx.gpus.name or 'GPU'} {ctx.gpus.total_mib / 1024:.2f} GiB "
            f"({ctx.gpus.source})"
        )
    lines.append(" · ".join(what))
    lines.append(f"TP {ctx.args.tp} · DP {ctx.args.dp} · PP {ctx.args.pp} · page {r.page_size}")
    lines.append("")
    lines.append(f"mem_fraction_static   {r.mem_fraction_static:.3f}  ({b.mfs_source})")
    if b.default is not None:
        lines.append(f"  SGLang's default rule ({b.default.rule}):")
        lines.extend(f"    {step}" for step in b.default.steps)
    lines.append("")
    lines.append(
        "Per rank                weights    pre-load free  reserve   rest      tokens alone  free after startup"
    )
    for o in r.ranks:
        marks = []
        if o.rank == r.pre_load_rank:
            marks.append("min pre-load")
        if o.rank == r.post_load_rank:
            marks.append("min post-load")
        mark = f"  ← {', '.join(marks)}" if marks and len(r.ranks) > 1 else ""
        lines.append(
            f"  {o.rank:<20}  {_gib(o.memory.weights_gib):>10} {_gib(o.memory.pre_load_free_gib):>13}"
            f"  {_gib(o.reserve_gib):>9} {_gib(o.rest_gib):>10}  {max(o.tokens_alone, 0):>12,}"
            f"  {_gib(o.free_after_startup_gib):>10}{mark}"
        )
    src = sorted({o.memory.source for o in r.ranks})
    lines.append(f"  (figures: {', '.join(src)})")
    lines.append("")
    lines.append("SGLang's sizing (minimum over ranks)")
    lines.append(f"  pre-load free         {_gib(r.pre_load_free_gib)}  at {r.pre_load_rank}")
    lines.append(f"  post-load free        {_gib(r.post_load_free_gib)}  at {r.post_load_rank}")
    lines.append(
        f"  reserve               {_gib(r.reserve_gib)}  pre-load free × (1 − mfs) = "
        f"{r.pre_load_free_gib:.2f} × (1 − {r.mem_fraction_static:.3f})"
    )
    lines.append(
        f"  rest for KV           {_gib(r.pools.rest_gib)}"
        + ("  (anchored on the log's pool)" if r.anchored else "  post-load free − reserve")
    )
    for label, arithmetic, result in r.cells.steps:
        lines.append(f"  {label:<21} {result}  {arithmetic}")
    if r.pools.mamba_slots is not None:
        lines.append(
            f"  Mamba state           {r.pools.mamba_slots:,} slots · {_gib(r.pools.state_gib)}"
        )
    lines.append(
        f"  cell size             {r.cells.budget_bytes:,.0f} B/token (what rest is divided by)"
    )
    tokens = max(r.pools.tokens, 0)
    lines.append(
        f"  max_total_num_tokens  {tokens:,}"
        + (f" (page {r.page_size})" if r.page_size > 1 else "")
    )
    if r.pools.swa_tokens is not None:
        lines.append(f"  SWA pool tokens       {r.pools.swa_tokens:,}")
    lines.append(f"  KV pool               {_gib(r.kv_pool_gib)}")
    mrr = "?" if r.max_running_requests is None else f"{r.max_running_requests:,}"
    lines.append(f"  max_running_requests  {mrr}  {r.max_running_requests_rule}")
    lines.append(
        f"  CUDA graphs           {_gib(r.after_pool.cuda_graph_gib)}  ({r.after_pool.cuda_graph_source})"
    )
    if r.after_pool.draft_weights_gib:
        lines.append(
            f"  draft weights         {_gib(r.after_pool.draft_weights_gib)}  (after the pool)"
        )
    lines.append(
        f"  free after startup    {_gib(r.free_after_startup_gib)}  (safe margin {SAFE_HEADROOM_GIB:g} GiB)"
    )
    lines.append("")
    v = r.verdict
    lines.append(f"Verdict: {v.kind}")
    lines.extend(f"  {reason}" for reason in v.reasons)
    if v.minimum_mem_fraction_static is not None:
        lines.append(
            f"  least mem_fraction_static that starts: {v.minimum_mem_fraction_static:.3f}"
        )
    if v.fixes:
        lines.append("  fixes: " + " · ".join(v.fixes))
    context = b.planner.rules.context_len
    if tokens > 0:
        lines.append("")
        lines.append("What the pool means")
        if context and r.requests_at_context is not None:
            lines.append(
                f"  requests of the full context ({context:,} tokens) at once: {r.requests_at_context:,.2f}"
            )
        per = " · ".join(f"{n:,} → {t:,}" for n, t in r.tokens_per_request)
        lines.append(f"  tokens per request at N concurrent: {per}")
    if ctx.args.ignored:
        lines.append("")
        lines.append("Not modelled (no effect on the plan): " + " ".join(ctx.args.ignored))
    if r.notes:
        lines.append("")
        lines.append("Notes")
        lines.extend(f"  • {note}" for note in r.notes)
    return "\n".join(lines) + "\n"
