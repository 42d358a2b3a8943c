"""Render a Snapshot as plain text with Rich tables (`kvtop --once`; log text is always shown
literally)."""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.text import Text

from kvtop import fmt
from kvtop.model.analysis import Analysis
from kvtop.model.binding_limit import binding_limit
from kvtop.model.deployment_shape import deployment_shape
from kvtop.model.derived_marks import MARK, footnote, marked
from kvtop.model.kv_usage import (
    kv_now,
    load_from_batch,
    load_from_metrics,
    load_line,
    source_text,
    usage_pct,
)
from kvtop.model.memory.gpu_reading import GpuStatus, gpu_library
from kvtop.model.memory.rank_memory import BREAKDOWN_HOW
from kvtop.model.processes.columns import cells as process_cells
from kvtop.model.processes.summary import host_line, processes_summary
from kvtop.model.processes.table import DEFAULT_ORDER as DEFAULT_PROCESS_ORDER
from kvtop.model.processes.table import process_rows, sorted_rows
from kvtop.model.retractions import retractions_text
from kvtop.model.sizing.replay import (
    HOST_KV,
    OTHER_AFTER_POOL,
    OTHER_AFTER_POOL_WORDS,
    OTHER_STARTUP,
    OTHER_STARTUP_WORDS,
)
from kvtop.model.snapshot import Snapshot
from kvtop.model.state_pool import state_pool_text
from kvtop.model.status.identity import mismatch_text
from kvtop.model.status.insights import oom_text
from kvtop.model.status.levels import DEFAULT_THRESHOLDS, Level
from kvtop.model.status.orphans import find_orphans, kill_command, orphan_words
from kvtop.model.status.server_status import stopped_text
from kvtop.model.verdict import Verdict, local_time
from kvtop.report.reflow import FitColumn, FitTable, hang
from kvtop.sglang.control_chars import make_visible
from kvtop.sglang.events import Failure
from kvtop.sglang.failures import SERVING
from kvtop.sglang.lifecycle import crash_loop, phase_in_progress
from kvtop.sglang.start_state import STARTING, STOPPED, ModelMemory, RankStartup, Startup


def _visible(value: str) -> str:
    """`value` with control characters made visible, keeping the report's own line breaks."""
    return "\n".join(make_visible(line) for line in value.split("\n"))


def _text(value: str, style: str = "") -> Text:
    """Text shown literally: no markup is parsed and no control character reaches the terminal."""
    return Text(_visible(value), style=style)


# Columns of words (left-aligned); all others hold a number with its unit or a count (right).
_WORD_COLUMNS = {
    "rank",
    "time",
    "model",
    "phase",
    "step",
    "arithmetic",
    "item",
    "requests",
    "tokens needed",
    "answer",
    "name",
    "user",
    "whose",
    "command",
}
# Prose that may wrap at word boundaries inside its column; nothing else ever wraps or is cut.
_WRAP_COLUMNS = {"arithmetic", "phase", "answer", "tokens needed", "requests", "command"}


def _table(
    *columns: str,
    gap: int = 2,
    transpose: bool = True,
    aside: int | None = None,
    key_prefix: str = "",
) -> FitTable:
    """A borderless table that reflows to the console's width (kvtop.report.reflow): wide while
    every column fits, else one column per record or one block per record; numeric columns
    right-aligned and never cut; `gap` spaces between columns."""
    return FitTable(
        [
            FitColumn(
                name,
                justify="left" if name in _WORD_COLUMNS else "right",
                wrap=name in _WRAP_COLUMNS,
            )
            for name in columns
        ],
        gap=gap,
        transpose=transpose,
        aside=aside,
        key_prefix=key_prefix,
    )


def _titled(title: str, table: RenderableType) -> Group:
    return Group(_text(title, style="bold"), table)


def state_words(startup: Startup) -> str:
    """The state as the report says it: `starting: load weights since 09:02:11`, `stopped
    09:12:03 after 2h14m ready`, `ready`, `failed`."""
    if startup.state == STOPPED:
        return stopped_text(startup)
    if startup.failure is not None and startup.failure.phase == SERVING:
        return "failed while serving"  # a crash after ready, not a failed start
    if startup.state == STARTING and not startup.has_rank_lines and startup.server_args is None:
        return "no server start read"  # nothing of a start: not "starting"
    step = phase_in_progress(startup)
    if step is None:
        return f"{startup.state} ({startup.note})" if startup.note else startup.state
    since = f" since {step.since:%H:%M:%S}" if step.since is not None else ""
    return f"starting: {step.phase}{since}"


def _header(report: Analysis) -> Text:
    startup = report.startup
    args = startup.server_args
    parts = [f"kvtop report · {report.source}", f"SGLang {report.version_shown}"]
    parts.append(state_words(startup))
    loop = crash_loop(startup)
    if loop is not None:
        parts.append(loop.text)
    elif startup.restarts:
        parts.append(f"restarted {startup.restarts}×")
    line1 = " · ".join(parts)
    facts: list[str] = []
    if args is not None:
        if args.model_path:
            facts.append(args.model_path)
        sizes = [
            f"{name}{value}"
            for name, value in (
                ("TP", args.tp_size),
                ("DP", args.dp_size),
                ("PP", args.pp_size),
                ("EP", args.ep_size),
            )
            if value and (value > 1 or name == "TP")
        ]
        facts.extend(sizes)
        if args.mem_fraction_static is not None:
            facts.append(f"mem_fraction_static {args.mem_fraction_static:g}")
        elif "mem_fraction_static" in args.rejected:
            refused = args.rejected["mem_fraction_static"]
            facts.append(f"mem_fraction_static {refused}: rejected, sizing not replayed")
        if args.speculative_algorithm:
            facts.append(f"speculative {args.speculative_algorithm}")
        if args.enable_hierarchical_cache:
            ratio = f" ratio {args.hicache_ratio:g}" if args.hicache_ratio else ""
            facts.append(f"hierarchical cache{ratio}")
    else:
        facts.append("no server_args line in this log: mem_fraction_static unknown")
    # server_args strings come from a repr: an escaped control character is real after parsing.
    return _text(make_visible(line1) + "\n" + make_visible(" · ".join(facts)))


def _deployment(report: Analysis) -> list[Text]:
    """The deployment's shape when it says something (several nodes, a PD server) and rank tags
    that do not fit it; nothing for a plain single-node server."""
    shape = deployment_shape(report.startup)
    lines = []
    words = shape.words()
    if words:
        expected = shape.ranks_expected
        count = f"{shape.ranks_in_log} ranks in this log"
        if expected and shape.ranks_in_log <= expected:
            count = f"{shape.ranks_in_log} of {expected} ranks in this log"
        elif expected:
            count += f", {expected} expected on this node"
        lines.append(_text(f"deployment: {words} · {count}"))
    lines += [_text(f"deployment: {flag}", style="bold") for flag in shape.flags()]
    return lines


def _summary(report: Analysis) -> Text:
    s = report.startup.summary
    if s is None:
        return _text("log summary line: not in this log")
    return _text(
        f"log summary line: max_total_num_tokens {fmt.count(s.max_total_num_tokens)} · context_len {fmt.count(s.context_len)} · "
        f"max_running_requests {fmt.count(s.max_running_requests)} · chunked_prefill {fmt.count(s.chunked_prefill_size)}"
        f" · {free_label(report.startup)} {fmt.number(s.available_gpu_mem_gib)} GiB"
    )


def _rejected(report: Analysis) -> Group | None:
    """Every number kvtop refused, as logged, so a blank cell is never a silent guess."""
    startup = report.startup
    args = startup.server_args
    lines = [
        f"server_args {name}={value}" for name, value in (args.rejected if args else {}).items()
    ]
    lines += [
        f"{r.rank or 'main'} {r.time_text or '?'} · {r.value} · in: {r.line[:60]}"
        for r in startup.rejected_values
    ]
    if not lines:
        return None
    more = startup.rejected_count - len(startup.rejected_values)
    if more > 0:
        lines.append(f"… and {more:,} more")
    title = "Rejected values (not used; their cells show —)"
    return Group(_text(title, style="bold"), *(_text(f"  {line}") for line in lines))


# The memory table's columns, each with the MemoryBreakdown field it shows (GiB). The names
# are the glossary's (docs/glossary.md), one word a header line to fit 100 columns.
_MEMORY_COLUMNS = (
    ("pre-load\nfree", "pre_load_free_gib"),
    ("weights", "weights_gib"),
    ("KV\ncache", "kv_cache_gib"),
    ("draft\nweights", "draft_weights_gib"),
    ("draft\nKV", "draft_kv_gib"),
    ("CUDA\ngraphs", "graphs_gib"),
    (OTHER_STARTUP.replace(" ", "\n"), "startup_other_gib"),
    ("free\nafter\nstartup", "free_after_startup_gib"),
    ("reserve", "reserve_gib"),
)


def free_label(startup: Startup) -> str:
    """ "free after startup" once the server was ready; before, the latest reading is only
    "free so far" (nothing is called after startup before startup finished)."""
    return "free after startup" if startup.finished else "free so far"


# Hybrid models' state caches: a column only when some rank has them (after the KV cache).
_HYBRID_COLUMNS = (("mamba", "mamba_gib"), ("other\ncaches", "other_caches_gib"))


def _memory_columns(report: Analysis) -> tuple[tuple[str, str], ...]:
    hybrid = tuple(
        column
        for column in _HYBRID_COLUMNS
        if any(getattr(b, column[1]) is not None for b in report.breakdowns)
    )
    return _MEMORY_COLUMNS[:3] + hybrid + _MEMORY_COLUMNS[3:]


def _memory_table(report: Analysis) -> Group:
    columns = _memory_columns(report)
    titles = [title for title, _ in columns]
    if not report.startup.finished:
        titles[titles.index("free\nafter\nstartup")] = "free\nso far"
    table = _table("rank", *titles, "host\nKV cache\nGB", gap=1)
    hosts = {r.rank: r.host_kv_gb for r in report.ranks}
    for b in report.breakdowns:
        table.add_row(
            _text(b.rank or "(single)"),
            *(marked(fmt.number(getattr(b, name)), name in b.derived) for _, name in columns),
            fmt.number(hosts.get(b.rank)),
        )
    title = "Memory per rank (GiB, from the log; host KV cache in decimal GB as SGLang logs it)"
    note = _text(OTHER_STARTUP_WORDS.replace("free after startup", free_label(report.startup)))
    derived = footnote(
        (head.replace("\n", " "), BREAKDOWN_HOW[name])
        for head, name in columns
        if any(name in b.derived for b in report.breakdowns)
    )
    if derived:
        derived = derived.replace("free after startup", free_label(report.startup))
    return Group(_titled(title, table), note, *([_text(derived)] if derived else []))


_POOL_WORDS = {
    "full": "full-attention KV cache",
    "swa": "sliding-window (SWA) KV cache",
    "mamba": "Mamba state",
    "mamba_intermediate": "Mamba intermediate states (speculative decoding)",
    "c4": "c4 compressed KV cache (an entry per 4 tokens)",
    "c128": "c128 compressed KV cache (an entry per 128 tokens)",
}


def pool_lines(rank: RankStartup) -> str:
    """A hybrid model's pools, one line each (nothing for a plain model's single pool)."""
    model = rank.target
    if not model.hybrid:
        return ""
    text = ""
    for pool in model.pools():
        what = _POOL_WORDS.get(pool.kind, f"{pool.kind} pool")
        size = f"{fmt.count(pool.tokens)} tokens, " if pool.tokens is not None else ""
        if pool.kind == "mamba" and model.mamba_slots is not None:
            size = f"{fmt.count(model.mamba_slots)} request slots, "
        derived = MARK if pool.gib_derived is not None else ""  # _kv_pool's footnote says how
        gib = "size not logged" if model.dsv4 is not None else f"{fmt.number(pool.gib)} GiB"
        text += f"\n  {what}: {size}{gib}{derived}"
    return text + dsv4_budget_line(model)


def dsv4_budget_line(model: ModelMemory) -> str:
    """DeepSeek-V4's budget for all its pools together, as its memory line gave it."""
    pools = model.dsv4
    if pools is None or pools.budget_gib is None:
        return ""
    text = f"\n  all DSV4 pools together: {pools.budget_gib:.2f} GiB"
    if pools.bytes_per_full_token is not None:
        text += f", {pools.bytes_per_full_token:,.2f} B per full-pool token"
    fixed = ", ".join(f"{name} {gib:.2f} GiB" for name, gib in pools.fixed_gib)
    if fixed:
        text += f" (set aside first: {fixed})"
    return text


def _kv_pool(report: Analysis) -> Text:
    ranks = [r for r in report.ranks if r.target.kv_tokens is not None]
    if not ranks:
        return _text("KV cache: no `KV Cache is allocated` line in this log")
    first = ranks[0]
    cell = report.cell.cell
    kv_how = first.target.derived.get("kv_gib")
    kv_gib = marked(f"{fmt.number(first.target.kv_gib)} GiB", kv_how is not None)
    text = f"KV cache: {fmt.count(first.target.kv_tokens)} tokens, {kv_gib} per rank"
    if first.target.kv_dtype or report.startup.kv_cache_dtype:
        text += f" ({first.target.kv_dtype or report.startup.kv_cache_dtype})"
    text += pool_lines(first)
    derived = footnote(
        ([("KV cache", kv_how)] if kv_how is not None else [])
        + [
            (_POOL_WORDS.get(pool.kind, f"{pool.kind} pool"), pool.gib_derived)
            for pool in first.target.pools()
            if first.target.hybrid and pool.gib_derived is not None
        ]
    )
    if derived:
        text += f"\n{derived}"
    if cell is not None:
        text += f"\ncell size: {cell.bytes:,.0f} B/token, {cell.source}: {cell.explanation}"
    else:
        text += f"\ncell size: unknown ({report.cell.note})"
    hosts = [r.host_kv_gb for r in report.ranks if r.host_kv_gb is not None]
    if hosts:
        text += (
            f"\n{HOST_KV} (HiCache): {hosts[0]:.2f} GB per rank × {len(hosts)} = "
            f"{sum(hosts):,.2f} GB host RAM (decimal GB, as SGLang logs it)"
        )
    return _text(text)


def _phases(rank: RankStartup) -> Group:
    table = _table(
        "time", "model", "phase", "free after\nGiB", "moved\nGiB", "took s", transpose=False
    )
    shown = [p for p in rank.phases if not p.name.endswith(" begin")]
    for p in shown:
        table.add_row(
            p.time_text or "",
            p.model,
            _text(p.name),
            fmt.number(p.avail_gib),
            marked(fmt.number(p.delta_gib), "delta_gib" in p.derived),
            marked(fmt.number(p.duration_s, 1), "duration_s" in p.derived),
        )
    titled = _titled(f"Startup phases ({rank.rank or 'single GPU'})", table)
    derived = footnote(
        (f"{p.name} {_PHASE_WORDS[name]}", how) for p in shown for name, how in p.derived.items()
    )
    return Group(titled, _text(derived)) if derived else titled


_PHASE_WORDS = {"delta_gib": "moved", "duration_s": "took"}


def _formula(report: Analysis) -> RenderableType:
    e = report.explanation
    if e is None:
        return _text("Formula: nothing to explain yet (no rank lines).")
    steps = _table("step", "result", "arithmetic", transpose=False)
    for s in e.steps:
        result = marked(s.result, s.derived is not None)
        steps.add_row(_text(s.label), _text(result), _text(s.arithmetic))
    title = f"SGLang's KV sizing with this log's numbers · {e.rank_words()}"
    parts: list[RenderableType] = [_titled(title, steps)]
    said = footnote((s.label, s.derived) for s in e.steps if s.derived is not None)
    if said:
        parts.append(_text(said))
    if e.reserve_spent:
        spent = _table("item", "GiB")
        derived = dict(e.reserve_derived)
        for label, value in e.reserve_spent:
            spent.add_row(label, marked(fmt.number(value), label in derived))
        parts.append(_titled(e.spent_title, spent))
        if any(label == OTHER_AFTER_POOL for label, _ in e.reserve_spent):
            parts.append(_text(OTHER_AFTER_POOL_WORDS))
        said = footnote(e.reserve_derived)
        if said:
            parts.append(_text(said))
    if e.what_ifs:
        table = _table(
            "mfs",
            "tokens",
            "change",
            "KV cache\nGiB",
            f"{free_label(report.startup)}\nGiB".replace(" startup", "\nstartup"),
            "requests of\ncontext_len",
            gap=1,
        )
        for w in e.what_ifs:
            change = f"{w.delta_tokens:+,}".replace("-", "−") + (
                f" ({fmt.change_pct(w.delta_pct)})" if w.delta_pct is not None else ""
            )
            headroom = fmt.number(w.headroom_after_graphs_gib)
            if (
                w.headroom_after_graphs_gib is not None
                and w.headroom_after_graphs_gib < e.safe_margin_gib
            ):
                headroom += " (under safe margin)"
            table.add_row(
                f"{w.mem_fraction_static:.3f}",
                fmt.count(w.tokens) if w.would_start else "fails",
                change,
                fmt.number(w.kv_pool_gib),
                headroom,
                fmt.ratio(w.requests_at_context),
            )
        parts.append(_titled("What if mem_fraction_static were…", table))
        # The caveats the formula modal gives for the same values (the model words them).
        warned = zip(e.what_ifs, e.what_if_warnings, strict=False)
        parts += [
            _text(f"⚠ {w.mem_fraction_static:.3f}: {warning}") for w, warning in warned if warning
        ]
    if e.reverse:
        table = _table("requests", "tokens needed", "answer", transpose=False)
        for s in e.reverse:
            table.add_row(s.label, s.arithmetic, s.result + (" ⚠" if s.warning else ""))
        parts.append(_titled("mem_fraction_static needed for…", table))
        parts += [_text(f"⚠ {s.label} ({s.result}): {s.warning}") for s in e.reverse if s.warning]
    if e.draft_rule is not None:
        parts.append(_text(f"draft model: {e.draft_rule.text}"))
    for note in e.notes:
        if note:
            parts.append(_text(f"note: {note}"))
    spaced: list[RenderableType] = []
    for part in parts:  # a blank line between the tables; notes stay together
        if spaced and not isinstance(part, Text):
            spaced.append(Text(""))
        spaced.append(part)
    return Group(*spaced)


def _failure_block(report: Analysis, failure: Failure) -> list[RenderableType]:
    """What failed (the line and the cause its traceback named, literally), where, what next."""
    title = "CRASHED while serving" if failure.phase == SERVING else "FAILED"
    facts = [f"kind: {failure.kind.replace('_', ' ')}"]
    if failure.phase:
        facts.append(f"phase: {failure.phase}")
    oom = oom_text(failure.oom)
    if oom:
        facts.append(f"out of memory: {oom}")
    if failure.profiled_tokens is not None:
        facts.append(f"profiled KV capacity: {failure.profiled_tokens:,} tokens")
    if report.minimum_viable_mfs is not None:
        facts.append(f"minimum viable mem_fraction_static: {report.minimum_viable_mfs:.4f}")
    return [
        _text(f"{title}: {failure.reported[:600]}", style="bold red"),
        _text("  " + " · ".join(facts)),
        _text(f"next step: {report.next_step}"),
    ]


def render_title(report: Analysis) -> list[RenderableType]:
    """What the report says first: its title line with the state, the deployment, and the
    verdict when the start failed (before any source or table)."""
    startup = report.startup
    parts: list[RenderableType] = [_header(report), *_deployment(report)]
    if startup.failure is not None:
        parts += [Text(""), *_failure_block(report, startup.failure)]
    return parts


def render_body(report: Analysis) -> list[RenderableType]:
    """The log's numbers, after the title: summary line, tables, formula, insights."""
    startup = report.startup
    parts: list[RenderableType] = [Text(""), _summary(report)]
    rejected = _rejected(report)
    if rejected is not None:
        parts += [Text(""), rejected]
    if not report.ranks:
        parts += [
            Text(""),
            _text(
                f"No SGLang startup lines found in {report.source} ({report.lines_seen:,} lines read). "
                "Point --log-file at the server's output (for example `journalctl -u UNIT > log`)."
            ),
        ]
        return parts
    parts += [Text(""), _memory_table(report), Text(""), _kv_pool(report)]
    reference = next(
        (
            r
            for r in report.ranks
            if r.rank == (report.explanation.rank if report.explanation else None)
        ),
        report.ranks[0],
    )
    parts += [Text(""), _phases(reference), Text(""), _formula(report)]
    if report.insights:
        parts += [Text(""), _text("Insights", style="bold")]
        parts += [_text(f"• {line}") for line in report.insights]
    batch = startup.latest_batch
    if batch:
        last = max(batch.values(), key=lambda b: b.prefix.time_text or "")
        parts += [
            Text(""),
            _text(
                f"log, latest batch line ({last.prefix.rank or 'single'} {last.prefix.time_text}): "
                f"{fmt.count(last.tokens)} tokens in use, KV usage "
                f"{_kv_pct(last.tokens, _pool(startup), last.token_usage)} · "
                f"{load_line(load_from_batch(last))} · {startup.batch_lines:,} batch lines in the log"
            ),
        ]
    return parts


def _sources_line(snapshot: Snapshot) -> Text:
    text = Text("sources: ")
    for source in snapshot.sources:
        text.append(f"{source.name} {source.state.mark} {source.state}  ")
    ages = [
        f"{s.name} {s.age_s:.1f} s ago" if s.age_s is not None else f"{s.name} none yet"
        for s in snapshot.sources
    ]
    if ages:
        text.append("\n  last good reading: " + " · ".join(ages))
    for source in snapshot.sources:
        if source.detail:
            text.append(_visible(f"\n  {source.name}: {source.detail}"))
    return text


def _sum_gib(*values: float | None) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _gpu_table(snapshot: Snapshot) -> Group:
    hybrid = any(
        g.memory.mamba_gib is not None or g.memory.other_caches_gib is not None
        for g in snapshot.gpus
    )
    headers = [
        "GPU",
        "rank",
        "name",
        "total",
        "baseline",
        "weights",
        "KV\ncache",
        "draft",
        "CUDA\ngraphs",
        "runtime",
        "other procs",  # after the server's segments, as the bar draws it
        "free",
        "reserve",
        "util %",
        "temp C",
        "power W",
    ]
    if hybrid:  # the Mamba state and other caches beside the KV pool, after it
        headers.insert(7, "mamba +\ncaches")
    table = _table(*headers, aside=2, key_prefix="GPU ")
    for view in snapshot.gpus:
        s, m = view.sample, view.memory
        draft = None
        if m.draft_weights_gib is not None or m.draft_kv_gib is not None:
            draft = (m.draft_weights_gib or 0.0) + (m.draft_kv_gib or 0.0)
        cells: list[RenderableType] = [
            str(s.index),
            _text(" ".join(view.ranks) or "—"),
            _text(s.name if s.status == GpuStatus.OK else f"{s.name} ({s.status})"),
            fmt.number(m.total_gib),
            fmt.number(m.baseline_gib),
            fmt.number(m.weights_gib),
            fmt.number(m.kv_cache_gib),
            fmt.number(draft),
            fmt.number(m.graphs_gib),
            fmt.number(m.runtime_gib),
            fmt.number(m.other_processes_gib),
            fmt.number(m.free_gib),
            fmt.number(m.reserve_gib),
            fmt.count(s.utilization_pct),
            fmt.count(s.temperature_c),
            fmt.number(s.power_w, 0),
        ]
        if hybrid:
            cells.insert(7, fmt.number(_sum_gib(m.mamba_gib, m.other_caches_gib)))
        table.add_row(*cells)
    lib = gpu_library(g.sample for g in snapshot.gpus)
    title = (
        f"GPUs (GiB; {lib} joined with the log, ranks by {snapshot.rank_mapping}; draft = draft "
        f"weights + draft KV; runtime = {lib} used − the items; free = {lib} free now)"
    )
    return _titled(title, table)


def _process_table(snapshot: Snapshot) -> Group:
    """Every process on the GPUs, as the live processes view lists them (GPU memory first),
    with the host's CPU, RAM and swap in its title."""
    rows = process_rows(snapshot)
    table = _table(
        "GPU", "pid", "user", "whose", "GPU GiB", "CPU %", "RSS GiB", "time", "command",
        gap=1,  # so that a line of 80 holds the table with the command wrapped
        key_prefix="GPU ",
    )  # fmt: skip
    for row in sorted_rows(rows, DEFAULT_PROCESS_ORDER):
        words = process_cells(row)
        table.add_row(
            words["gpu"],
            words["pid"],
            _text(words["user"]),
            _text(words["whose"]),
            fmt.number(row.gpu_memory_gib),
            words["cpu"],
            fmt.number(row.rss_gib),
            words["time"],
            _text(words["command"]),
        )
    title = f"processes ({processes_summary(rows)}; host {host_line(snapshot.host)})"
    return _titled(title, table)


# The default KV thresholds: a usage shown next to them never reads as one it is not on.
_KV_EDGES = (DEFAULT_THRESHOLDS.kv_usage_warning_pct, DEFAULT_THRESHOLDS.kv_usage_critical_pct)


def _pool(startup: Startup) -> int | None:
    summary = startup.summary
    return summary.max_total_num_tokens if summary is not None else None


def _kv_pct(used: int | None, pool: int | None, ratio: float | None) -> str:
    """The pool's use (kv_usage.usage_pct: exact counts where they agree with the ratio), two
    decimals, never on an edge it is not on."""
    return fmt.pct(usage_pct(used, pool, ratio), 2, edges=_KV_EDGES)


def _metrics_line(snapshot: Snapshot) -> Text | None:
    m = snapshot.trusted_metrics  # another server's scrape is named in the mismatch lines
    if m is None:
        return None
    usage = _kv_pct(m.used_tokens, m.max_total_num_tokens, m.token_usage)
    pool = f"KV cache {fmt.count(m.used_tokens)} / {fmt.count(m.max_total_num_tokens)} tokens" + (
        f", KV usage {usage}" if m.token_usage is not None or m.used_tokens is not None else ""
    )
    return _text(f"metrics (/metrics): {pool} · {load_line(load_from_metrics(m))}")


def _kv_source_line(snapshot: Snapshot) -> Text:
    """Where the KV usage comes from, and how old a batch line standing in for metrics is
    (the snapshot's time is "now" in the log's clock, as for the uptime)."""
    usage = kv_now(snapshot)
    return _text(f"KV usage from: {source_text(usage, float('inf')) or 'metrics'}")


_LEVEL_STYLE = {Level.CRITICAL: "bold red", Level.WARNING: "bold yellow", Level.UNKNOWN: "bold"}


def verdict_lines(verdict: Verdict) -> list[Text]:
    """`verdict: CRITICAL, 2 alerts` and each alert (glyph, words, since when), or
    `verdict: OK - ready 2h14m, …`: the level `kvtop --check` exits with for the same inputs."""
    word = verdict.level.value.upper()
    style = _LEVEL_STYLE.get(verdict.level, "bold green")
    if not verdict.alerts:
        return [_text(f"verdict: {word} - {verdict.summary}", style=style)]
    lines = [_text(f"verdict: {verdict.level.glyph} {word}, {verdict.count_text()}", style=style)]
    for alert in verdict.alerts:
        since = f" (since {local_time(alert.since)})" if alert.since is not None else ""
        lines.append(_text(f"  {alert.level.glyph} {alert.text}{since}"))
    return lines


def retractions_line(snapshot: Snapshot) -> str | None:
    """`retractions: 14 retracted since start · 2.8/min over 5 min (from the log; latest
    16:10:20; new_token_ratio 0.3487)`; nothing when none were retracted."""
    found = snapshot.retractions
    if found is None or found.count == 0:
        return None
    said = [f"from {'/metrics' if found.source == 'metrics' else 'the log'}"]
    if found.rate_source is not None and found.rate_source != found.source:
        said.append(f"rate from {'/metrics' if found.rate_source == 'metrics' else 'the log'}")
    if found.latest_at is not None:
        said.append(f"latest {local_time(found.latest_at)}")
    if found.new_token_ratio is not None:
        said.append(f"new_token_ratio {found.new_token_ratio:.4f}")
    return f"retractions: {retractions_text(found)} ({'; '.join(said)})"


def render_snapshot(snapshot: Snapshot) -> Group:
    """The whole report: the verdict and its alerts first, then the title, the sources, the
    GPUs and the log's numbers; sentences wrap with a hanging indent and tables reflow to the
    console's width."""
    parts: list[RenderableType] = [*verdict_lines(snapshot.verdict), Text("")]
    parts += [*render_title(snapshot.analysis), Text("")]
    parts.append(_sources_line(snapshot))
    # Sources about another server: said first, in red where the console has colour.
    parts += [
        _text(f"mismatch: {line}", style="bold red") for line in mismatch_text(snapshot.mismatches)
    ]
    if snapshot.server is not None:
        parts.append(_text(f"server: {snapshot.server.sentence()}"))
    line = _metrics_line(snapshot)
    if line is not None:
        parts.append(line)
    parts.append(_kv_source_line(snapshot))
    kv = kv_now(snapshot)
    if kv.state_pool is not None:  # a hybrid model's state slots, beside the KV usage
        known = "" if kv.current else " (last known)"
        parts.append(_text(f"state pool{known}: {state_pool_text(kv.state_pool)}"))
    retracted = retractions_line(snapshot)
    if retracted is not None:
        parts.append(_text(retracted))
    if kv.evictable_pct is not None and kv.current:  # cached prefixes SGLang frees on demand
        used, evictable = fmt.pct(kv.usage_pct, 1), fmt.pct(kv.evictable_pct, 1)
        parts.append(_text(f"KV pool: used {used} · evictable {evictable}"))
    binding = binding_limit(snapshot, kv)
    if binding is not None:
        parts.append(_text(f"binding limit: {binding.text}"))
    if snapshot.gpus:
        parts += [Text(""), _gpu_table(snapshot)]
    if any(g.processes for g in snapshot.gpus):
        parts += [Text(""), _process_table(snapshot)]
    orphans = find_orphans(snapshot)
    if orphans:  # SGLang's processes no server runs: named, with the command that ends them
        named = "; ".join(orphan_words(o) for o in orphans)
        pids = sorted({o.pid for o in orphans})
        parts.append(_text(f"orphans: {named}; end them: {kill_command(pids)}"))
    shape_flags = set(deployment_shape(snapshot.analysis.startup).flags())  # said by render_title()
    for note in snapshot.notes:
        if note not in shape_flags:
            parts.append(_text(f"note: {note}"))
    if snapshot.host is not None and snapshot.host_kv_total_gb is not None and snapshot.log_here:
        host = snapshot.host
        parts.append(
            _text(
                f"host RAM: {host.used_gb:,.1f} / {host.total_gb:,.1f} GB used, "
                f"{HOST_KV} (HiCache) {snapshot.host_kv_total_gb:,.2f} GB (from the log)"
            )
        )
    refused = _scrape_rejected(snapshot)
    if refused:
        parts.append(_text("rejected from the server (not used): " + "; ".join(refused)))
    refused_gpu = _nvml_rejected(snapshot)
    if refused_gpu:
        parts.append(_text("rejected from NVML (not used, shown blank): " + refused_gpu))
    parts += render_body(snapshot.analysis)
    return Group(*(hang(part) for part in parts))


def _scrape_rejected(snapshot: Snapshot) -> list[str]:
    """Values /metrics and /server_info carried that were refused, first few of each."""
    found: list[str] = []
    if snapshot.metrics is not None and snapshot.metrics.rejected_count:
        m = snapshot.metrics
        found.append(f"/metrics {m.rejected_count:,}: " + ", ".join(m.rejected[:3]))
    if snapshot.server_info is not None and snapshot.server_info.rejected:
        info = snapshot.server_info
        found.append(f"/server_info {len(info.rejected)}: " + ", ".join(info.rejected[:3]))
    return found


def _nvml_rejected(snapshot: Snapshot) -> str | None:
    """NVML's impossible numbers (utilization 4294967295, used above total), first few."""
    refused = [(g.sample.index, r) for g in snapshot.gpus for r in g.sample.rejected]
    if not refused:
        return None
    shown = ", ".join(f"GPU {i} {r.field} {r.value} ({r.reason})" for i, r in refused[:4])
    more = len(refused) - 4
    return shown + (f" and {more:,} more" if more > 0 else "")


def print_snapshot(snapshot: Snapshot, console: Console | None = None) -> None:
    console = console or Console(highlight=False, soft_wrap=False)
    console.print(render_snapshot(snapshot), crop=False)  # a long path stays whole
