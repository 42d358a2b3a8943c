"""`kvtop plan`'s output: the text report and the JSON document (schema kvtop-plan/1)."""

from __future__ import annotations

import io
from dataclasses import dataclass

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.text import Text

from kvtop.fmt import UNKNOWN
from kvtop.model.sizing.engine import Built, Gpus, ModelInfo
from kvtop.model.sizing.formula import GIB, format_version
from kvtop.model.sizing.launch_args import LaunchArgs
from kvtop.model.sizing.plan import PlanResult
from kvtop.report.plain_output import plain
from kvtop.report.reflow import FitColumn, FitTable, Hanging
from kvtop.report.width import report_width
from kvtop.sglang.control_chars import make_visible

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
    width: int | None = None  # the text's width (--width); None: the report width rule
    ascii: bool = False  # ASCII glyphs, for a stream that cannot take Unicode


def version_shown(built: Built) -> str:
    """The version as the report shows it: the log's range where the log narrows it no
    further ("0.4.3–0.4.9"), else the version whose rules applied."""
    return built.version_text or format_version(built.version)


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def _bytes(value: float) -> int | float:
    """A byte count for the JSON: an integer when whole (70272, not 70272.0), else rounded."""
    rounded = round(value, 1)
    return int(rounded) if rounded == int(rounded) else rounded


def plan_json(ctx: PlanContext) -> dict[str, object]:
    r, b = ctx.result, ctx.built
    cells = r.cells
    model = ctx.model
    return {
        "schema": SCHEMA,
        "sglang_version": format_version(b.version),
        "sglang_version_range": version_shown(b),
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
        else {
            "from": ctx.calibrated_from,
            "rank": ctx.calibration_rank,
            "calibrated": list(ctx.built.calibrated),
            "estimated": list(ctx.built.estimated),
        },
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
        "cell_bytes": _bytes(cells.budget_bytes),
        "cell_bytes_by_pool": {
            "full": _bytes(cells.full_bytes),
            "swa": None if cells.swa_bytes is None else _bytes(cells.swa_bytes),
            "draft": _bytes(cells.draft_bytes),
            "mamba_state_per_request": cells.mamba_state_bytes,
        },
        "page_size": r.page_size,
        "pre_load_free_gib": _round(r.pre_load_free_gib),
        "pre_load_rank": r.pre_load_rank,
        "startup_memory": _startup_json(b),
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
        "safe_headroom_gib": r.safe_margin_gib,
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
            "firm": r.verdict.firm,
        },
        "context_len": ctx.built.planner.rules.context_len,
        "requests_at_context_len": _round(r.requests_at_context),
        "tokens_per_request": [{"concurrent": n, "tokens": t} for n, t in r.tokens_per_request],
        "anchored_on_log": r.anchored,
        "ignored_arguments": list(ctx.args.ignored),
        "notes": list(r.notes),
    }


def _startup_json(built: Built) -> dict[str, object] | None:
    """The start-up memory row the estimate used, its spread and the boots it comes from
    (None: a log measured the free memory before the weights)."""
    row = built.startup
    if row is None:
        return None
    return {
        "platform": row.platform,
        "words": row.words,
        "gib": row.gib,
        "spread_gib": row.spread_gib,
        "evidence": [
            {
                "where": boot.where,
                "gpu": boot.gpu,
                "ranks": boot.ranks,
                "total_gib": boot.total_gib,
                "pre_load_free_gib": boot.pre_load_free_gib,
            }
            for boot in row.evidence
        ],
    }


# --------------------------------------------------------------------------- text

LABEL = 21  # the sizing rows' label column: values start one space after it
_RANK_COLUMNS = (
    "rank",
    "weights",
    "pre-load free",
    "reserve",
    "rest",
    "tokens alone",
    "free after startup",
)


def _gib(value: float | None) -> str:
    return UNKNOWN if value is None else f"{value:,.2f} GiB"


def _line(text: str, hang: int = 2) -> Hanging:
    """A sentence that wraps at word boundaries, continuation lines `hang` further in."""
    return Hanging(Text(make_visible(text)), hang=hang)


def _row(label: str, value: str, words: str = "", indent: int = 2) -> Hanging:
    """`label  value  words`, the value at a fixed column; wrapped words hang under the value."""
    text = f"{' ' * indent}{label:<{LABEL}} {value}" + (f"  {words}" if words else "")
    return Hanging(Text(make_visible(text)), hang=LABEL + 1)


def _rest_and_pool(ctx: PlanContext) -> str | None:
    """Why "rest for KV" and "KV pool" differ, from this plan's figures: rest is what SGLang
    divides by the bytes per token; the pool is the tokens times the bytes per token plus one
    page of padding rows, plus the SWA and the draft pools where there are."""
    r = ctx.result
    tokens = r.pools.tokens
    if tokens <= 0 or r.kv_pool_gib <= 0:
        return None
    cells, page = r.cells, r.page_size
    target = tokens * cells.full_bytes / GIB
    padding = page * cells.full_bytes / GIB
    words = (
        f"rest for KV {r.pools.rest_gib:,.2f} GiB is what SGLang divides by "
        f"{cells.budget_bytes:,.0f} B/token"
    )
    if r.pools.mamba_slots is not None:
        words += f" once the Mamba state ({r.pools.state_gib:,.2f} GiB) is taken from it"
    words += (
        f"; the KV pool {r.kv_pool_gib:,.2f} GiB is {tokens:,} tokens × "
        f"{cells.full_bytes:,.0f} B ({target:,.2f} GiB) plus one page of padding rows "
        f"({padding:,.2f} GiB)"
    )
    if cells.swa_bytes and cells.swa_ratio is not None and r.pools.swa_tokens is not None:
        swa = (r.pools.swa_tokens + page) * cells.swa_bytes / GIB
        words += f", the SWA pool's {r.pools.swa_tokens:,} tokens ({swa:,.2f} GiB)"
    if cells.draft_bytes:
        draft = (tokens + page) * cells.draft_bytes / GIB
        swa_share = (cells.swa_ratio or 0.0) * (cells.swa_bytes or 0.0)
        budgeted = cells.budget_bytes - cells.full_bytes - swa_share >= cells.draft_bytes / 2
        where = (
            "inside the budget"
            if budgeted
            else f"outside the budget at SGLang {version_shown(ctx.built)}"
        )
        words += (
            f" and the draft's pool ({draft:,.2f} GiB, {cells.draft_bytes:,.0f} B/token, {where})"
        )
    return words + "."


def _rank_table(ctx: PlanContext) -> FitTable:
    r = ctx.result
    several = len(r.ranks) > 1
    names = _RANK_COLUMNS + (("SGLang's minimum",) if several else ())
    table = FitTable(
        [
            FitColumn(name, justify="left" if name in ("rank", "SGLang's minimum") else "right")
            for name in names
        ]
    )
    for o in r.ranks:
        cells = [
            o.rank,
            _gib(o.memory.weights_gib),
            _gib(o.memory.pre_load_free_gib),
            _gib(o.reserve_gib),
            _gib(o.rest_gib),
            f"{max(o.tokens_alone, 0):,}",
            _gib(o.free_after_startup_gib),
        ]
        if several:
            marks = [
                name
                for name, at in (("pre-load", r.pre_load_rank), ("post-load", r.post_load_rank))
                if o.rank == at
            ]
            cells.append(", ".join(marks))
        table.add_row(*(Text(make_visible(c)) for c in cells))
    return table


def _header(ctx: PlanContext) -> list[RenderableType]:
    b = ctx.built
    parts: list[RenderableType] = [
        Text(f"kvtop plan · SGLang {version_shown(b)} ({b.version_source})", style="bold")
    ]
    what = []
    if ctx.model is not None:
        d = ctx.model.dims
        hybrid = f", {ctx.model.shape.hybrid} hybrid" if ctx.model.shape.hybrid else ""
        what.append(
            f"model {d.architecture or UNKNOWN} ({d.attention}, {d.num_layers} layers{hybrid})"
        )
    if ctx.calibrated_from:
        what.append(f"calibrated by {ctx.calibrated_from}")
        if ctx.built.estimated:
            what.append(f"estimated: {', '.join(ctx.built.estimated)}")
    if ctx.gpus is not None:
        what.append(
            f"{ctx.gpus.count} × {ctx.gpus.name or 'GPU'} {ctx.gpus.total_mib / 1024:,.2f} GiB "
            f"({ctx.gpus.source})"
        )
    if what:
        parts.append(_line(" · ".join(what)))
    a = ctx.args
    parts.append(_line(f"TP {a.tp} · DP {a.dp} · PP {a.pp} · page {ctx.result.page_size}"))
    parts.append(Text(""))
    parts.append(
        _row("mem_fraction_static", f"{ctx.result.mem_fraction_static:.3f}", f"({b.mfs_source})", 0)
    )
    if b.default is not None:
        parts.append(_line(f"  SGLang's default rule ({b.default.rule}):", hang=4))
        parts.extend(_line(f"    {step}", hang=2) for step in b.default.steps)
    return parts


def _sizing(ctx: PlanContext) -> list[RenderableType]:
    r = ctx.result
    parts: list[RenderableType] = [Text("SGLang's sizing (minimum over ranks)", style="bold")]
    parts.append(_row("pre-load free", _gib(r.pre_load_free_gib), f"at {r.pre_load_rank}"))
    startup = ctx.built.startup
    if startup is not None:
        parts.append(
            _row(
                "before the weights",
                _gib(startup.gib),
                f"± {startup.spread_gib:g} GiB: {startup.words} ({len(startup.evidence)} "
                f"boot{'s' if len(startup.evidence) > 1 else ''} in docs/plan.md)",
            )
        )
    parts.append(_row("post-load free", _gib(r.post_load_free_gib), f"at {r.post_load_rank}"))
    parts.append(
        _row(
            "reserve",
            _gib(r.reserve_gib),
            f"pre-load free × (1 − mfs) = {r.pre_load_free_gib:,.2f} × "
            f"(1 − {r.mem_fraction_static:.3f})",
        )
    )
    parts.append(
        _row(
            "rest for KV",
            _gib(r.pools.rest_gib),
            "(anchored on the log's pool)" if r.anchored else "post-load free − reserve",
        )
    )
    parts.extend(_row(label, result, arithmetic) for label, arithmetic, result in r.cells.steps)
    if r.pools.mamba_slots is not None:
        parts.append(
            _row("Mamba state", f"{r.pools.mamba_slots:,} slots · {_gib(r.pools.state_gib)}")
        )
    parts.append(
        _row("cell size", f"{r.cells.budget_bytes:,.0f} B/token", "(what rest is divided by)")
    )
    tokens = max(r.pools.tokens, 0)
    page = f"(page {r.page_size})" if r.page_size > 1 else ""
    parts.append(_row("max_total_num_tokens", f"{tokens:,}", page))
    if r.pools.swa_tokens is not None:
        parts.append(_row("SWA pool tokens", f"{r.pools.swa_tokens:,}"))
    parts.append(_row("KV pool", _gib(r.kv_pool_gib)))
    why = _rest_and_pool(ctx)
    if why is not None:
        parts.append(_line(f"    {why}", hang=2))
    mrr = UNKNOWN if r.max_running_requests is None else f"{r.max_running_requests:,}"
    parts.append(_row("max_running_requests", mrr, r.max_running_requests_rule))
    a = r.after_pool
    parts.append(_row("CUDA graphs", _gib(a.cuda_graph_gib), f"({a.cuda_graph_source})"))
    if a.draft_weights_gib:
        parts.append(_row("draft weights", _gib(a.draft_weights_gib), "(after the pool)"))
    parts.append(
        _row(
            "free after startup",
            _gib(r.free_after_startup_gib),
            f"(safe margin {r.safe_margin_gib:g} GiB)",
        )
    )
    return parts


def _verdict(ctx: PlanContext) -> list[RenderableType]:
    r, v = ctx.result, ctx.result.verdict
    why = "flags not modelled" if ctx.built.planner.unmodelled_flags else "start-up estimate"
    title = f"Verdict: {v.kind}" + ("" if v.firm else f" (not firm: {why})")
    parts: list[RenderableType] = [Text(title, style="bold")]
    parts.extend(_line(f"  {reason}") for reason in v.reasons)
    if v.minimum_mem_fraction_static is not None:
        parts.append(
            _line(f"  least mem_fraction_static that starts: {v.minimum_mem_fraction_static:.3f}")
        )
    if v.fixes:
        parts.append(_line("  fixes: " + " · ".join(v.fixes)))
    context = ctx.built.planner.rules.context_len
    if r.pools.tokens > 0:
        parts += [Text(""), Text("What the pool means", style="bold")]
        if context and r.requests_at_context is not None:
            parts.append(
                _line(
                    f"  requests of the full context ({context:,} tokens) at once: "
                    f"{r.requests_at_context:,.2f}"
                )
            )
        # "48→3,318" holds together: a wrapped line never starts with the arrow.
        per = " · ".join(f"{n:,}→{t:,}" for n, t in r.tokens_per_request)
        parts.append(_line(f"  tokens per request at N concurrent: {per}"))
    return parts


def render_plan(ctx: PlanContext) -> Group:
    """The plan as Rich renderables: sentences wrap with a hanging indent, the per-rank table
    reflows to the width it is printed at, nothing is cut."""
    r = ctx.result
    parts = _header(ctx)
    table = Padding(_rank_table(ctx), (0, 0, 0, 2))
    parts += [Text(""), Text("Per rank", style="bold"), table]
    sources = sorted({o.memory.source for o in r.ranks})
    parts.append(_line(f"  figures: {', '.join(sources)}"))
    parts += [Text(""), *_sizing(ctx), Text(""), *_verdict(ctx)]
    unmodelled = set(ctx.built.planner.unmodelled_flags)
    harmless = [flag for flag in ctx.args.ignored if flag not in unmodelled]
    if harmless:
        parts += [
            Text(""),
            _line("Not modelled (no effect on GPU memory): " + " ".join(harmless)),
        ]
    if r.notes:
        parts += [Text(""), Text("Notes", style="bold")]
        parts.extend(_line(f"  • {note}") for note in r.notes)
    return Group(*parts)


def plan_text(ctx: PlanContext, width: int | None = None) -> str:
    """The plan as text `width` columns wide (else the context's, else the report width rule:
    the terminal's, $COLUMNS, 80 on a pipe); ASCII glyphs when the context asks for them."""
    columns = report_width(width if width is not None else ctx.width)
    out = io.StringIO()
    console = Console(
        file=out,
        width=columns,
        highlight=False,
        soft_wrap=False,
        color_system=None,
        force_terminal=False,
        emoji=False,
    )
    console.print(render_plan(ctx), crop=False)  # a long path stays whole
    text = "\n".join(line.rstrip() for line in out.getvalue().split("\n"))
    return plain(text) if ctx.ascii else text
