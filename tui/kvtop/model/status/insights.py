"""Findings in plain words, and the next step for each kind of startup failure."""

from __future__ import annotations

from kvtop import fmt
from kvtop.model.sizing.formula import reserve_gib
from kvtop.model.sizing.replay import SizingExplanation, pre_load_free
from kvtop.sglang.events import NO_MEMORY_FOR_KV, Failure, OomSizes
from kvtop.sglang.failures import SERVING
from kvtop.sglang.lifecycle import crash_loop
from kvtop.sglang.start_state import Startup

# Ranks whose pre-load free memory is this much below the best rank are worth a sentence:
# SGLang sizes every rank's pool from the minimum, so one busy GPU shrinks all of them.
IMBALANCE_GIB = 1.0


def failure_title(failure: Failure) -> str:
    """`startup failed in load weights`, or `crashed while serving` once the server was ready."""
    if failure.phase == SERVING:
        return "crashed while serving"
    return f"startup failed in {failure.phase}" if failure.phase else "startup failed"


def oom_text(oom: OomSizes | None) -> str | None:
    """`tried to allocate 0.44 GiB, 0.00 GiB free of 95.00 GiB`: the parts the error gave."""
    if oom is None or (oom.tried_gib is None and oom.free_gib is None):
        return None
    parts = []
    if oom.tried_gib is not None:
        parts.append(f"tried to allocate {_size(oom.tried_gib)}")
    if oom.free_gib is not None:
        total = f" of {_size(oom.total_gib)}" if oom.total_gib is not None else ""
        parts.append(f"{_size(oom.free_gib)} free{total}")
    return ", ".join(parts)


def _size(gib: float) -> str:
    """GiB to two decimals; under 1 GiB in MiB as PyTorch logs it (a few MiB free is not
    "0.00 GiB")."""
    return f"{gib * 1024:.2f} MiB" if gib < 1 else f"{gib:.2f} GiB"


def minimum_viable_mfs(failure: Failure, startup: Startup) -> float | None:
    """The mem_fraction_static at which the KV cache gets 0 GiB: SGLang's hint (0.5.14+) or
    1 − post-load free / pre-load free from the log (the minimum over ranks, as SGLang sizes)."""
    if failure.min_viable is not None:
        return failure.min_viable
    pres = [p for p in (pre_load_free(r) for r in startup.ranks.values()) if p is not None]
    posts = [
        r.post_load_free_gib for r in startup.ranks.values() if r.post_load_free_gib is not None
    ]
    if not pres or not posts or min(pres) <= 0:
        return None
    return round(1 - min(posts) / min(pres), 4)


def _oom_step(failure: Failure, mfs_text: str) -> str:
    """Out of memory: what to change depends on the phase it hit (reference f.1)."""
    phase = failure.phase or ""
    if phase.startswith("init "):
        return (
            "The GPU was already in use before SGLang loaded anything: find the other process "
            "(nvidia-smi) or choose free GPUs (CUDA_VISIBLE_DEVICES / --base-gpu-id)."
        )
    if phase.startswith("load weights"):
        return (
            "The weights do not fit: give the model more GPUs (--tp-size), use a quantized "
            "checkpoint or --quantization (fp8), or a smaller model; check that no other process "
            "holds the GPU."
        )
    if phase.startswith("memory pool"):
        return (
            f"The KV cache did not fit: lower --mem-fraction-static{mfs_text}, or set "
            "--max-total-tokens; check that no other process took memory since SGLang measured it."
        )
    if phase.endswith("graph"):
        return (
            f"CUDA-graph capture outgrew the reserve: lower --mem-fraction-static{mfs_text} or "
            "--cuda-graph-max-bs (or --disable-cuda-graph to confirm)."
        )
    if phase in (SERVING, "warmup"):
        return (
            "A batch's activations outgrew the reserve: lower --chunked-prefill-size or "
            f"--max-running-requests, or lower --mem-fraction-static{mfs_text} to leave more room."
        )
    return (
        f"Lower --mem-fraction-static{mfs_text} to leave more room for activations and CUDA "
        "graphs, or lower --cuda-graph-max-bs / --chunked-prefill-size; check that no other "
        "process uses the GPU."
    )


def _not_enough_step(failure: Failure, startup: Startup, mfs_text: str) -> str:
    viable = minimum_viable_mfs(failure, startup)
    target = (
        f" above {viable:.3f} (the minimum viable value, where the KV cache gets 0 GiB) plus what "
        "the KV cache needs"
        if viable is not None and viable < 1
        else ""
    )
    profiled = (
        f"the profiled KV capacity was {failure.profiled_tokens:,} tokens, so "
        if failure.profiled_tokens is not None
        else ""
    )
    return (
        f"Raise --mem-fraction-static{mfs_text}{target}: {profiled}nothing was left for the KV "
        "cache after the weights at this value; or give the model more GPUs or a smaller "
        "quantization."
    )


_FIXED_STEPS = {
    "host_memory": (
        "Lower --hicache-ratio or --hicache-size (the host KV cache is allocated once per rank), "
        "or free host memory."
    ),
    "graph_capture": (
        "Lower --cuda-graph-max-bs or --mem-fraction-static; start once with "
        "--disable-cuda-graph to confirm the capture is the problem."
    ),
    "scheduler_died": (
        "A scheduler process died without a Python error: exit code -9 is usually the host's OOM "
        "killer (`dmesg -T | grep -i oom`: lower --hicache-size or add host memory), -11 or -6 a "
        "crash in native code (NCCL, a kernel); see the lines before it."
    ),
}


def next_step(failure: Failure, startup: Startup) -> str:
    """What the operator should do about a failure, as one sentence."""
    args = startup.server_args
    mfs = failure.mem_fraction_static or (args.mem_fraction_static if args else None)
    mfs_text = f" (now {mfs:g})" if mfs is not None else ""
    kind = failure.kind
    if kind == "not_enough_memory" and NO_MEMORY_FOR_KV in failure.message:
        above = f" above {failure.raise_above:.3f}" if failure.raise_above is not None else ""
        return (
            f"Raise --mem-fraction-static{above}{mfs_text}, or give the model more GPUs or a "
            "smaller quantization; from 0.5.14 speculative draft weights count against it too."
        )
    if kind == "not_enough_memory":
        return _not_enough_step(failure, startup, mfs_text)
    if kind == "out_of_memory":
        return _oom_step(failure, mfs_text)
    if kind in _FIXED_STEPS:
        return _FIXED_STEPS[kind]
    where = f" ({failure.cause[:120]})" if failure.cause else ""
    if failure.phase is not None and failure.phase.endswith("graph"):
        return (
            f"The CUDA-graph capture raised an error{where}: start once with --disable-cuda-graph "
            "to confirm, then report it with the traceback."
        )
    if failure.phase == SERVING and failure.cause is None:
        return (
            "The server crashed while serving and the log does not name the cause (the "
            "traceback's last line): read it (journalctl -u UNIT -n 200) before changing settings."
        )
    if failure.phase == SERVING:
        return (
            f"The server crashed while serving{where}, not for a memory setting (no out-of-memory "
            "error): restart it, and report the error with its traceback and, if known, the "
            "request that triggered it."
        )
    if kind == "warmup" or failure.phase == "warmup":
        return (
            f"The model loaded but the warmup request failed{where}: check that the server's port "
            "is reachable (no proxy in between) and read the scheduler's lines above it."
        )
    if failure.cause is not None:
        return (
            f"Fix what the error names ({failure.cause[:160]}), then start again; the lines "
            "before it in the log say what SGLang was doing."
        )
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
    the pool is larger than SGLang's formula allows: then the rest is not the reserve). Both
    numbers are said as they are: what stayed free after the pool on this rank, and the reserve
    SGLang computed from the minimum over ranks; a difference is named, never hidden."""
    if explanation.over_budget is not None:
        return None
    reserve = next((s for s in explanation.steps if s.label == "reserve"), None)
    after_pool = explanation.free_after_pool_gib
    inputs = explanation.inputs
    if reserve is None or after_pool is None or explanation.mem_fraction_static is None:
        return None
    purpose = "kept for activations, CUDA graphs and anything loaded after the KV cache."
    exact = None
    if inputs is not None:
        exact = reserve_gib(inputs.pre_load_free_gib, inputs.mem_fraction_static)
    gap = None if exact is None else round(after_pool - exact, 2)
    if gap is None or abs(gap) < 0.01:
        return (
            f"{after_pool:.2f} GiB free after the KV cache is SGLang's reserve: "
            f"{reserve.arithmetic} = {reserve.result}, {purpose}"
        )
    on = f" on {explanation.rank}" if explanation.rank else ""
    if gap < 0:
        how = f"less {-gap:.2f} GiB taken before the pool{on} or left by the pool's rounding"
    else:
        how = (
            f"and {gap:.2f} GiB more that{on or ' this GPU'} had free than the rank SGLang sized by"
        )
    return (
        f"{after_pool:.2f} GiB free after the KV cache is SGLang's reserve "
        f"({reserve.arithmetic} = {reserve.result}) {how}; {purpose}"
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
    if better.headroom_after_graphs_gib < explanation.safe_margin_gib:
        warn = f", under the {explanation.safe_margin_gib:g} GiB safe margin"
    return (
        f"free after startup is {still_free:.2f} GiB; mem_fraction_static "
        f"{better.mem_fraction_static:g} would add about {better.delta_tokens:,} tokens{pct} and "
        f"leave about {better.headroom_after_graphs_gib:.2f} GiB free after startup{warn}."
    )


def insights(startup: Startup, explanation: SizingExplanation | None) -> list[str]:
    """The top findings, most important first."""
    found: list[str] = []
    if startup.state == "stopped":
        # A stop is no failure; the report says when and by what line.
        found.append(f"the server was stopped: {(startup.stopped_by or 'a shutdown line')[:200]}")
    failure = startup.failure
    if failure is not None:
        said = failure.reported[:300]
        oom = oom_text(failure.oom)
        found.append(
            f"{failure_title(failure)}: {said}{f' ({oom})' if oom else ''} — "
            f"{next_step(failure, startup)}"
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
    # A start that failed has no "free after startup" to speak of.
    started = failure is None or failure.phase == SERVING
    found += [
        finding
        for finding in (
            _over_budget_finding(explanation),
            _state_slots_finding(explanation),
            _reserve_finding(explanation),
            _higher_mfs_finding(explanation) if started else None,
        )
        if finding is not None
    ]
    if explanation.draft_rule is not None:
        found.append(explanation.draft_rule.text)
    return found
