"""The JSON form of an analysed startup (schema kvtop/1)."""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime

from kvtop.model.analysis import Analysis
from kvtop.model.binding_limit import BindingLimit, binding_limit
from kvtop.model.deployment_shape import deployment_shape
from kvtop.model.kv_usage import kv_now
from kvtop.model.memory.gpu_reading import GpuStatus, slowdown_reasons
from kvtop.model.memory.rank_memory import MemoryBreakdown
from kvtop.model.processes.table import ProcessRow, process_rows
from kvtop.model.sizing.formula import DraftBudgetRule, WhatIf
from kvtop.model.sizing.model_config import CellSize
from kvtop.model.sizing.replay import RankSizing
from kvtop.model.snapshot import GpuView, Snapshot
from kvtop.model.status.orphans import Orphan, find_orphans
from kvtop.model.verdict import Seen, Verdict, local_time
from kvtop.report.growth_json import growth_json
from kvtop.sglang.events import (
    RANK_TAGS,
    BatchStats,
    Failure,
    MaxRunningRequestsReduced,
    OomSizes,
    Summary,
)
from kvtop.sglang.lifecycle import crash_loop, phase_in_progress
from kvtop.sglang.start_state import ModelMemory, RankStartup

SCHEMA = "kvtop/1"


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def _model_json(model: ModelMemory) -> dict[str, object]:
    return {
        "model_type": model.model_type,
        "dtype": model.dtype,
        "quant": model.quant,
        "init_dist_gib": model.init_dist_gib,
        "avail_before_load_gib": model.avail_before_load_gib,
        "avail_after_load_gib": model.avail_after_load_gib,
        "weights_gib": model.weights_gib,
        "load_s": _r(model.load_s, 3),
        "kv_tokens": model.kv_tokens,
        "kv_dtype": model.kv_dtype,
        "k_gib": model.k_gib,
        "v_gib": model.v_gib,
        "kv_gib": model.kv_gib,
        # Every pool of the model (a plain one: one "full"); Mamba state in GiB, null if none.
        "pools": [
            {
                "kind": pool.kind,
                "tokens": pool.tokens,
                "gib": pool.gib,
                "derived": ["gib"] if pool.gib_derived is not None else [],
            }
            for pool in model.pools()
        ],
        "mamba_gib": model.mamba_gib,
        "dsv4": _dsv4_json(model),
        "avail_after_pool_gib": model.avail_after_pool_gib,
        "avail_before_graph_gib": model.avail_before_graph_gib,
        "avail_after_graph_gib": model.avail_after_graph_gib,
        "graph_gib": model.graph_gib,
        "graph_s": model.graph_s,
        "graphs": [
            {
                "graph": g.graph,
                "began_at": g.began_at,
                "ended_at": g.ended_at,
                "avail_before_gib": g.avail_before_gib,
                "avail_after_gib": g.avail_after_gib,
                "mem_usage_gib": g.mem_usage_gib,
                "elapsed_s": g.elapsed_s,
                "derived": list(g.derived),
            }
            for g in model.graphs
        ],
        # The fields above kvtop computed from other logged numbers (not read from one line).
        "derived": list(model.derived),
    }


def _dsv4_json(model: ModelMemory) -> dict[str, object] | None:
    """DeepSeek-V4's pool lines beyond `pools` (null for any other model): the budget all its
    pools share, SGLang's bytes per full-pool token, what it set aside first, the state rows."""
    pools = model.dsv4
    if pools is None:
        return None
    return {
        "budget_gib": pools.budget_gib,
        "bytes_per_full_token": pools.bytes_per_full_token,
        "fixed_gib": dict(pools.fixed_gib),
        "c4_state_rows": pools.c4_state_rows,
        "c128_state_rows": pools.c128_state_rows,
    }


def _rank_json(rank: RankStartup) -> dict[str, object]:
    draft = rank.draft if rank.draft is not None and rank.draft.seen else None
    return {
        "rank": rank.rank,
        **dict(zip(RANK_TAGS, rank.tags.values(), strict=True)),
        "target": _model_json(rank.target),
        "draft": None if draft is None else _model_json(draft),
        "host_kv_gb": rank.host_kv_gb,
        "host_kv_tokens": rank.host_kv_tokens,
        "failure": rank.failure.shown if rank.failure else None,
        "phases": [
            {
                "time": p.time_text,
                "model": p.model,
                "phase": p.name,
                "avail_gib": p.avail_gib,
                "delta_gib": p.delta_gib,
                "duration_s": _r(p.duration_s, 3),
                "derived": list(p.derived),
            }
            for p in rank.phases
        ],
    }


def _batch_json(batch: BatchStats) -> dict[str, object]:
    return {
        "kind": batch.kind,
        "time": batch.prefix.time_text,
        "running_reqs": batch.running_reqs,
        "queued_reqs": batch.queued_reqs,
        "tokens": batch.tokens,
        "token_usage": batch.token_usage,
        "gen_throughput": batch.gen_throughput,
        "accept_len": batch.accept_len,
        "cache_hit_rate": batch.cache_hit_rate,
        # Hybrid models only (null otherwise): `mamba usage` (0..1) and `mamba num` as logged.
        "mamba_usage": batch.mamba_usage,
        "mamba_slots_used": batch.mamba_slots_used,
    }


def _time(when: datetime | None) -> str | None:
    return when.isoformat(sep=" ") if when is not None else None


def _lifecycle_json(report: Analysis) -> dict[str, object]:
    """stopped_at, the phase in progress (while starting) and a crash loop."""
    startup = report.startup
    step = phase_in_progress(startup)
    loop = crash_loop(startup)
    return {
        "stopped_at": _time(startup.stopped_at),
        "stopped_by": startup.stopped_by,
        "phase_in_progress": (
            None if step is None else {"phase": step.phase, "since": _time(step.since)}
        ),
        "crash_loop": (
            None
            if loop is None
            else {
                "restarts": loop.restarts,
                "span_s": _r(loop.span_s, 1),
                "phases": list(loop.phases),
                "text": loop.text,
            }
        ),
    }


def _oom_json(failure: Failure | None) -> dict[str, object] | None:
    """`{"tried_gib", "free_gib", "total_gib"}` of an out-of-memory failure (null: not logged)."""
    if failure is None or failure.kind != "out_of_memory":
        return None
    oom = failure.oom or OomSizes()
    return {"tried_gib": oom.tried_gib, "free_gib": oom.free_gib, "total_gib": oom.total_gib}


def _reduced_json(event: MaxRunningRequestsReduced | None) -> dict[str, object] | None:
    if event is None:
        return None
    return {"requested": event.requested, "value": event.value, "reason": event.reason}


def _startup_json(report: Analysis) -> dict[str, object]:
    startup = report.startup
    failure = startup.failure
    return {
        "state": startup.state,
        # The cause a traceback named (its last exception line), else the failure line itself.
        "failure": failure.shown if failure else None,
        "failure_kind": failure.kind if failure else None,
        "failure_line": failure.message if failure else None,
        "failed_phase": failure.phase if failure else None,
        "oom": _oom_json(failure),
        "minimum_viable_mfs": report.minimum_viable_mfs,
        "next_step": report.next_step,
        "restarts": startup.restarts,
        "started_at": startup.first_time.isoformat(sep=" ") if startup.first_time else None,
        "ready_at": startup.ready_at.isoformat(sep=" ") if startup.ready_at else None,
        "listening_url": startup.listening_url,
        "speculative": startup.speculative,
        "draft_loaded_before_target_pool": startup.phased_draft_init,
        # False: the log began mid-run (rotated, --since): batch lines, no startup lines.
        "startup_in_log": not startup.mid_run,
        "note": startup.note,
        # systemd's result for the unit (`oom-kill`, `exit-code`, ...; journal only).
        "unit_result": startup.unit_result,
        # SGLang lowered max_running_requests at startup: from what (per DP worker), to what, why.
        "max_running_requests_reduced": _reduced_json(startup.max_running_requests_reduced),
        "max_running_requests_reset": startup.max_running_requests_reset,
        **_lifecycle_json(report),
    }


_SUMMARY_FIELDS = (
    "max_total_num_tokens",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "max_running_requests",
    "context_len",
    "available_gpu_mem_gib",
)


def _summary_json(summary: Summary | None) -> dict[str, object]:
    return {name: getattr(summary, name) if summary else None for name in _SUMMARY_FIELDS}


# RankSizing's fields as they are, but these rounded to so many digits.
_SIZING_DIGITS = {"reserve_gib": 4, "rest_gib": 4, "cell_size_bytes": 2}


def _sizing_json(sizing: RankSizing) -> dict[str, object]:
    data: dict[str, object] = {f.name: getattr(sizing, f.name) for f in fields(RankSizing)}
    for name, digits in _SIZING_DIGITS.items():
        data[name] = _r(getattr(sizing, name), digits)
    return data


def _what_if_json(what_if: WhatIf) -> dict[str, object]:
    return {
        "mem_fraction_static": what_if.mem_fraction_static,
        "tokens": what_if.tokens,
        "delta_tokens": what_if.delta_tokens,
        "delta_pct": _r(what_if.delta_pct, 2),
        "reserve_gib": _r(what_if.reserve_gib),
        "kv_pool_gib": _r(what_if.kv_pool_gib),
        "headroom_after_graphs_gib": _r(what_if.headroom_after_graphs_gib),
        "requests_at_context": _r(what_if.requests_at_context, 3),
        "would_start": what_if.would_start,
    }


def _cell_json(cell: CellSize | None) -> dict[str, object] | None:
    if cell is None:
        return None
    return {"bytes": _r(cell.bytes, 2), "source": cell.source, "explanation": cell.explanation}


def _draft_rule_json(rule: DraftBudgetRule | None) -> dict[str, object] | None:
    return None if rule is None else {"budgeted": rule.budgeted, "text": rule.text}


def _formula_json(report: Analysis) -> dict[str, object] | None:
    explanation = report.explanation
    if explanation is None:
        return None
    return {
        "rank": explanation.rank,
        "cell_size": _cell_json(report.cell.cell),
        "steps": [
            {
                "label": s.label,
                "arithmetic": s.arithmetic,
                "result": s.result,
                "derived": ["result"] if s.derived is not None else [],
            }
            for s in explanation.steps
        ],
        "reserve_spent_gib": [
            {
                "item": label,
                "gib": _r(value),
                "derived": ["gib"] if label in dict(explanation.reserve_derived) else [],
            }
            for label, value in explanation.reserve_spent
        ],
        "what_if": [
            {**_what_if_json(w), "warning": warning}
            for w, warning in zip(
                explanation.what_ifs,
                explanation.what_if_warnings or (None,) * len(explanation.what_ifs),
                strict=True,
            )
        ],
        "reverse": [
            {"question": s.label, "tokens": s.arithmetic, "answer": s.result, "warning": s.warning}
            for s in explanation.reverse
        ],
        "draft_rule": _draft_rule_json(explanation.draft_rule),
        "notes": list(explanation.notes),
    }


def _host_kv_json(report: Analysis) -> dict[str, object]:
    host = [r.host_kv_gb for r in report.ranks if r.host_kv_gb is not None]
    return {
        "per_rank_gb": host[0] if host and len(set(host)) == 1 else None,
        "total_gb": _r(sum(host), 2) if host else None,
        "ranks": len(host),
    }


def to_json(report: Analysis) -> dict[str, object]:
    startup = report.startup
    return {
        "schema": SCHEMA,
        "source": {
            "log": report.source,
            "lines": report.lines_seen,
            "batch_lines": startup.batch_lines,
            # Lines in SGLang's shape kvtop read nothing from (their values are left out).
            "not_understood": {
                "count": report.not_understood,
                "first": report.first_not_understood,
                "said": report.not_understood_said,
            },
            # Times logged without a date (`[22:24:31]`) and how they were dated; null if none.
            "undated_times": (
                {"count": report.undated_lines, "said": report.dates_said}
                if report.dates_said
                else None
            ),
        },
        "sglang_version": {
            "range": startup.version.text(),
            "basis": list(startup.version.basis),
            "used_for_rules": ".".join(map(str, report.version)) if report.version else None,
            # The version every view shows (the server's own when it says it).
            "shown": report.version_shown,
        },
        "startup": _startup_json(report),
        "server_args": startup.server_args.to_json() if startup.server_args else None,
        # nnodes, node_rank, disaggregation_mode, ranks_expected (this node), ranks_in_log.
        "deployment": deployment_shape(startup).to_json(),
        "summary": _summary_json(startup.summary),
        "ranks": [_rank_json(r) for r in report.ranks],
        "memory": [
            {key: getattr(b, key) for key in MemoryBreakdown.__slots__} | {"derived": [*b.derived]}
            for b in report.breakdowns
        ],
        "sizing": [_sizing_json(s) for s in report.sizings],
        "formula": _formula_json(report),
        "host_kv": _host_kv_json(report),
        "runtime": {
            "latest_batch": {
                rank: _batch_json(b) for rank, b in sorted(startup.latest_batch.items())
            }
        },
        "insights": list(report.insights),
        # Numbers the log carried that were refused (their fields above are null), as logged.
        "rejected_values": {
            "count": startup.rejected_count,
            "values": [
                {"rank": r.rank, "time": r.time_text, "value": r.value, "line": r.line}
                for r in startup.rejected_values
            ],
        },
    }


def _gpu_json(view: GpuView) -> dict[str, object]:
    sample, memory = view.sample, view.memory
    # A lost GPU or memory NVML could not read (or gave impossibly): no number, not 0.
    known = sample.status == GpuStatus.OK
    return {
        "index": sample.index,
        "name": sample.name,
        "uuid": sample.uuid,
        "pci_bus_id": sample.pci_bus_id,
        "vendor": sample.vendor,
        "status": sample.status,
        "total_gib": _r(sample.total_gib) if known else None,
        "used_gib": _r(sample.used_gib) if known else None,
        "free_gib": _r(sample.free_gib) if known else None,
        "reserved_gib": _r(sample.reserved_gib) if known else None,
        "utilization_pct": sample.utilization_pct,
        "memory_utilization_pct": sample.memory_utilization_pct,
        "temperature_c": sample.temperature_c,
        "power_w": _r(sample.power_w, 1),
        "power_limit_w": _r(sample.power_limit_w, 1),
        # NVML's clocks event reasons that mean trouble (heat, a hardware slowdown, the power
        # brake), in words; [] none, null not read.
        "clocks_lowered_by": (
            None
            if sample.clock_event_reasons is None
            else list(slowdown_reasons(sample.clock_event_reasons))
        ),
        "field_errors": dict(sample.field_errors),
        "ranks": list(view.ranks),
        "processes": [
            {
                "pid": p.pid,
                "used_gib": _r(p.used_gib),
                "rank": p.rank,
                "user": p.user,
                "command": p.command,
                "other": p.other,
            }
            for p in view.processes
        ],
        # A lost GPU: every value null (GpuMemory has no numbers for it).
        "breakdown": {
            "total_gib": _r(memory.total_gib),
            "baseline_gib": _r(memory.baseline_gib),
            # Processes that are not the server's: 0.0 none, null unknown (or a lost GPU).
            "other_processes_gib": _r(memory.other_processes_gib),
            "weights_gib": memory.weights_gib,
            "kv_cache_gib": memory.kv_cache_gib,
            "draft_weights_gib": memory.draft_weights_gib,
            "draft_kv_gib": memory.draft_kv_gib,
            "graphs_gib": memory.graphs_gib,
            "mamba_gib": memory.mamba_gib,
            "other_caches_gib": memory.other_caches_gib,
            "runtime_gib": _r(memory.runtime_gib),
            "free_gib": _r(memory.free_gib),
            "reserve_gib": _r(memory.reserve_gib),
            "reserve_starts_at_gib": _r(memory.reserve_starts_at_gib),
        },
    }


def _process_json(row: ProcessRow) -> dict[str, object]:
    """One process on one GPU (the processes view's row). Null: unknown, or not readable here
    (`readable` false: another user's or a container's process)."""
    return {
        "gpu": row.gpu,
        "pid": row.pid,
        "user": row.user,
        "gpu_memory_gib": _r(row.gpu_memory_gib),
        # % of one core since the previous reading (over about 0.2 s in --once), as top's.
        "cpu_percent": row.cpu_percent,
        "rss_gib": _r(row.rss_gib),
        "elapsed_s": _r(row.elapsed_s, 1),
        "command": row.command,
        "rank": row.rank,
        "foreign": row.foreign,
        "readable": row.readable,
    }


def _orphan_json(orphan: Orphan) -> dict[str, object]:
    return {
        "pid": orphan.pid,
        "gpu": orphan.gpu,
        "gib": orphan.gib,
        "age_s": _r(orphan.age_s, 1),
        "title": orphan.title,
        "kill": orphan.kill,
    }


def verdict_json(verdict: Verdict) -> dict[str, object]:
    """The one judgement: `--check` exits with this level for the same inputs."""
    return {
        "level": verdict.level,
        "alerts": [
            {
                "name": a.kind,
                "severity": a.level,
                "subject": a.subject,
                "summary": a.text,
                "since": None if a.since is None else local_time(a.since),
            }
            for a in verdict.alerts
        ],
        "summary": verdict.summary,
    }


def timeline_json(timeline: tuple[Seen, ...]) -> list[dict[str, object]]:
    """What kvtop saw change, oldest first (bounded: tui/kvtop/model/status/watch.TIMELINE_MAX)."""
    return [
        {
            "time": s.time_text,
            "kind": s.kind,
            "subject": s.subject,
            "text": s.text,
            "level": s.level,
        }
        for s in timeline
    ]


def snapshot_json(snapshot: Snapshot) -> dict[str, object]:
    """The verdict, the startup report, and the live parts: GPUs, metrics, host memory,
    source health, the timeline."""
    data: dict[str, object] = {"verdict": verdict_json(snapshot.verdict)}
    data.update(to_json(snapshot.analysis))
    metrics = snapshot.metrics
    data["gpus"] = [_gpu_json(g) for g in snapshot.gpus]
    data["rank_mapping"] = snapshot.rank_mapping
    data["metrics"] = None if metrics is None else {k: _r(v, 6) for k, v in metrics.values.items()}
    data["host"] = (
        None
        if snapshot.host is None
        else {
            "total_gb": snapshot.host.total_gb,
            "used_gb": snapshot.host.used_gb,
            "available_gb": snapshot.host.available_gb,
            "host_kv_total_gb": snapshot.host_kv_total_gb,
            # Busy since the previous reading, % of all cores (null: one reading only).
            "cpu_percent": snapshot.host.cpu_percent,
            "swap_total_gb": snapshot.host.swap_total_gb,
            "swap_used_gb": snapshot.host.swap_used_gb,
        }
    )
    data["processes"] = [_process_json(r) for r in process_rows(snapshot)]
    # SGLang's processes holding GPU memory with no server running them (orphans.py).
    data["orphans"] = [_orphan_json(o) for o in find_orphans(snapshot)]
    # age_s: seconds since the source's last good reading, null before the first.
    data["sources"] = [
        {"name": s.name, "state": s.state, "detail": s.detail, "age_s": _r(s.age_s, 1)}
        for s in snapshot.sources
    ]
    data["notes"] = list(snapshot.notes)
    # How fast the server's memory grows over a watched session (null rates before enough).
    data["growth"] = growth_json(snapshot.verdict.growth)
    # Facts on which /metrics or /server_info disagree with the log (tui/kvtop/model/status/identity.py).
    data["mismatches"] = [
        {"field": m.field, "log": m.log, "server": m.server, "source": m.source}
        for m in snapshot.mismatches
    ]
    server = snapshot.server
    data["server"] = (
        None
        if server is None
        else {
            "url": server.url,
            "url_source": server.url_source,
            "loopback": server.loopback,
            "contacted": server.contacted,
            "api_key_sent": server.api_key_sent,
        }
    )
    info = snapshot.server_info
    data["rejected_from_server"] = {
        "metrics_count": metrics.rejected_count if metrics is not None else 0,
        "metrics": list(metrics.rejected) if metrics is not None else [],
        "server_info": list(info.rejected) if info is not None else [],
    }
    # NVML's impossible numbers (their fields above are null), as the driver gave them.
    data["rejected_from_nvml"] = [
        {"gpu": g.sample.index, "field": r.field, "value": r.value, "reason": r.reason}
        for g in snapshot.gpus
        for r in g.sample.rejected
    ]
    data["timeline"] = timeline_json(snapshot.timeline)
    data["state_pool"] = state_pool_json(snapshot)
    data["retractions"] = retractions_json(snapshot)
    kv = kv_now(snapshot)
    # Cached prefixes SGLang evicts on demand, beside the used share (null: not read).
    data["kv_evictable_pct"] = _r(kv.evictable_pct, 2) if kv.current else None
    data["binding_limit"] = binding_limit_json(binding_limit(snapshot, kv))
    return data


def binding_limit_json(found: BindingLimit | None) -> dict[str, object] | None:
    """Which limit holds requests back now (`limit` null: none binds); null without a current
    reading of the load."""
    if found is None:
        return None
    return {"limit": found.limit, "text": found.text, "numbers": dict(found.numbers)}


def state_pool_json(snapshot: Snapshot) -> dict[str, object] | None:
    """A hybrid model's recurrent-state pool now, beside the KV usage (same reading); null for
    a model without one."""
    pool = kv_now(snapshot).state_pool
    if pool is None:
        return None
    return {
        "usage_pct": _r(pool.usage_pct, 2),
        "slots_used": pool.slots_used,
        "slots": pool.slots,
        "source": pool.source_kind,
    }


def retractions_json(snapshot: Snapshot) -> dict[str, object] | None:
    """Requests retracted while serving: since the start and per minute over the window (null
    when neither /metrics nor the log says; per_min null until a rate can be measured)."""
    found = snapshot.retractions
    if found is None:
        return None
    return {
        "count": found.count,
        "per_min": _r(found.per_min, 2),
        "window_s": _r(found.window_s, 1),
        "in_window": found.in_window,
        "latest_at": None if found.latest_at is None else local_time(found.latest_at),
        "source": found.source,
        "rate_source": found.rate_source,
        "new_token_ratio": found.new_token_ratio,
    }
