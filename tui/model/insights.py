"""Findings in plain words, and the next step for each kind of startup failure."""

from __future__ import annotations

from tui import fmt
from tui.model.sizing import SAFE_HEADROOM_GIB, SizingExplanation
from tui.sglang.events import Failure
from tui.sglang.lifecycle import crash_loop
from tui.sglang.startup import Startup

# Ranks whose pre-load free memory is this much below the best rank are worth a sentence:
# SGLang sizes every rank's pool from the minimum, so one busy GPU shrinks all of them.
IMBALANCE_GIB = 1.0


def next_step(failure: Failure, startup: Startup) -> str:
    """What the operator should do about a failure, as one sentence."""
    args = startup.server_args
    mfs = failure.mem_fraction_static or (args.mem_fraction_static if args else None)
    mfs_text = f" (now {mfs:g})" if mfs is not None else ""
    kind = failure.kind
    if kind == "no_memory_for_kv":
        above = f" above {failure.raise_above:.3f}" if failure.raise_above is not None else ""
        return (
            f"Raise --mem-fraction-static{above}{mfs_text}, or give the model more GPUs or a "
            "smaller quantization; from 0.5.14 speculative draft weights count against it too."
        )
    if kind == "not_enough_memory":
        return (
            f"Raise --mem-fraction-static{mfs_text}: after the weights nothing was left for the KV "
            "cache at this value. Check `kvtop --once` for the minimum viable value."
        )
    if kind == "cuda_oom":
        return (
            f"Lower --mem-fraction-static{mfs_text} to leave more room for activations and CUDA "
            "graphs, or lower --cuda-graph-max-bs / --chunked-prefill-size; check that no other "
            "process uses the GPU."
        )
    if kind == "host_memory":
        return (
            "Lower --hicache-ratio or --hicache-size (the host KV cache is allocated once per rank), "
            "or free host memory."
        )
    if kind == "graph_capture":
        return (
            "Lower --cuda-graph-max-bs or --mem-fraction-static; start once with "
            "--disable-cuda-graph to confirm the capture is the problem."
        )
    if kind == "warmup":
        return "The model loaded but the warmup request failed: read the error lines above it."
    return "Read the traceback that follows this line in the log (journalctl -u UNIT -n 200)."


def _imbalance_findings(startup: Startup) -> list[str]:
    """Ranks that had much less free memory before loading than the best one."""
    ranks = [r for r in startup.sorted_ranks() if r.target.avail_before_load_gib is not None]
    if len(ranks) <= 1:
        return []
    best = max(r.target.avail_before_load_gib or 0.0 for r in ranks)
    found = []
    for rank in ranks:
        gap = best - (rank.target.avail_before_load_gib or 0.0)
        if gap >= IMBALANCE_GIB:
            found.append(
                f"{rank.rank or 'this rank'} had {gap:.1f} GiB less free than the others before "
                "loading (another process on that GPU?); SGLang sizes every rank's KV cache "
                "from the minimum."
            )
    return found


def _reserve_finding(explanation: SizingExplanation) -> str | None:
    """Why memory stays free after the KV cache: it is the reserve, on purpose (not said when
    the pool is larger than SGLang's formula allows: then the rest is not the reserve)."""
    if explanation.over_budget is not None:
        return None
    reserve = next((s for s in explanation.steps if s.label == "reserve"), None)
    after_pool = explanation.free_after_pool_gib
    if reserve is None or after_pool is None or explanation.mem_fraction_static is None:
        return None
    return (
        f"{after_pool:.2f} GiB free after the KV cache is SGLang's reserve: "
        f"{reserve.arithmetic} = {reserve.result}, kept for activations, "
        "CUDA graphs and anything loaded after the KV cache."
    )


def _over_budget_finding(explanation: SizingExplanation) -> str | None:
    """A KV pool larger than SGLang's own formula allows, with both numbers."""
    over = explanation.over_budget
    return None if over is None else over.sentence()


def _state_slots_finding(explanation: SizingExplanation) -> str | None:
    """A Mamba model whose state slots, not its KV cache, limit requests at the context length."""
    rule, inputs = explanation.hybrid, explanation.inputs
    if rule is None or rule.request_slots is None or inputs is None or not inputs.context_len:
        return None
    by_kv = inputs.tokens / inputs.context_len
    if rule.request_slots >= by_kv:
        return None
    return (
        f"the {rule.request_slots:,} Mamba state slots, not the KV cache, limit concurrent "
        f"requests: the KV cache holds {by_kv:,.1f} requests of {inputs.context_len:,} tokens. "
        "More slots: --max-mamba-cache-size or a higher --mamba-full-memory-ratio (both take "
        "memory from the KV cache)."
    )


def _higher_mfs_finding(explanation: SizingExplanation) -> str | None:
    """What the next higher mem_fraction_static would add, and what it would leave free; not
    shown before startup finished (free_after_startup_gib is None then: sizing.explain)."""
    mfs, still_free = explanation.mem_fraction_static, explanation.free_after_startup_gib
    if mfs is None or still_free is None:
        return None
    better = next((w for w in explanation.what_ifs if w.mem_fraction_static > mfs + 1e-9), None)
    if better is None or better.headroom_after_graphs_gib is None:
        return None
    pct = f" ({fmt.change_pct(better.delta_pct, 0)})" if better.delta_pct is not None else ""
    warn = ""
    if better.headroom_after_graphs_gib < SAFE_HEADROOM_GIB:
        warn = f", under the {SAFE_HEADROOM_GIB:g} GiB safe margin"
    return (
        f"free after startup is {still_free:.2f} GiB; mem_fraction_static "
        f"{better.mem_fraction_static:g} would add about {better.delta_tokens:,} tokens{pct} and "
        f"leave about {better.headroom_after_graphs_gib:.2f} GiB free after startup{warn}."
    )


def insights(startup: Startup, explanation: SizingExplanation | None) -> list[str]:
    """The top findings, most important first."""
    found: list[str] = []
    if startup.state == "stopped":
        # Issue 14 §2: a stop is no failure; the report says when and by what line.
        found.append(f"the server was stopped: {(startup.stopped_by or 'a shutdown line')[:200]}")
    if startup.failure is not None:
        found.append(
            f"startup failed: {startup.failure.message[:200]} — {next_step(startup.failure, startup)}"
        )
    loop = crash_loop(startup)
    if loop is not None:
        found.append(f"crash loop: {loop.text}; figures are from the latest start.")
    elif startup.restarts:
        found.append(
            f"the server restarted {startup.restarts} time(s) in this log (with --unit: or "
            "in its unit's journal); figures are from the latest start."
        )
    found += _imbalance_findings(startup)
    if explanation is None:
        return found
    found += [
        finding
        for finding in (
            _over_budget_finding(explanation),
            _state_slots_finding(explanation),
            _reserve_finding(explanation),
            _higher_mfs_finding(explanation),
        )
        if finding is not None
    ]
    if explanation.draft_rule is not None:
        found.append(explanation.draft_rule.text)
    return found
