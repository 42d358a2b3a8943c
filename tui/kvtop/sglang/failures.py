"""Failures across lines: the cause a traceback names, and the phase in progress when it failed.

A failure line (`Scheduler hit an exception: Traceback (most recent call last):`, `Initialization
failed. warmup error: ...`, `Rank 0 scheduler is dead`) is one log record whose traceback follows
on unprefixed lines; its last line (`ExcType: message`) is the cause. The tracker reads them one
by one (a followed log), so the cause is updated as they arrive: `OpenTraceback` keeps only
counters and the failure it explains, never the traceback's lines (bounded memory, O(1) a line).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvtop.sglang import events as ev
from kvtop.sglang.start_state import RankStartup, Startup

SERVING = "serving"
WARMUP = "warmup"
LAUNCH = "launch"
MAX_CAUSE_CHARS = 2000
# Kinds a failure line gives before its traceback says more; a cause with a specific kind
# (out_of_memory, not_enough_memory, ...) replaces them.
GENERIC_KINDS = frozenset(
    {"error", "exception", "scheduler_exception", "warmup", "scheduler_died", "crash", "exited"}
)
# Exceptions of a process torn down because another failed (or an operator's Ctrl-C): never the
# cause of a failure reported before them, and never a failure of their own.
TEARDOWN = frozenset(
    {
        "KeyboardInterrupt",
        "SystemExit",
        "GeneratorExit",
        "BrokenPipeError",
        "ConnectionResetError",
        "EOFError",
        "CancelledError",
        "asyncio.CancelledError",
        "asyncio.exceptions.CancelledError",
    }
)


@dataclass(slots=True)
class OpenTraceback:
    """The traceback being read: which failure it explains and where in it the reader is."""

    startup: Startup
    failure: ev.Failure | None  # the failure it explains (its latest version); None: bare
    owned: bool  # the failure's own line began it (`... hit an exception: Traceback ...`)
    awaiting: bool = True  # a `Traceback` header was seen, its exception line not yet
    entry: bool | None = None  # its first frame is a process's outermost (uncaught: fatal)
    has_cause: bool = False
    chained: bool = False  # `During handling of the above exception` after its exception line
    hint: str | None = None  # the phase its frames name (frame_phase), the outermost that does
    settled: bool = (
        True  # the failure's phase came from the log's phase lines: frames can't move it
    )


def opens_traceback(failure: ev.Failure) -> bool:
    return "Traceback (most recent call last)" in failure.message


def _graph_phase(rank: RankStartup) -> str | None:
    """A capture that began and never ended: the graph phase's name, as the events panel's."""
    for model, draft in ((rank.draft, True), (rank.target, False)):
        if model is not None and model.graphs and not model.graphs[-1].done:
            return f"{'draft ' if draft else ''}{model.graphs[-1].graph} graph"
    return None


def rank_phase(rank: RankStartup) -> tuple[str | None, bool]:
    """The phase a rank was in, and whether it was open (began and never ended): a capture
    without its end, a `begin` without its end, weights loaded but the KV pool not yet
    allocated (reference f.1). Not open: the name of the last phase that ended."""
    graph = _graph_phase(rank)
    if graph is not None:
        return graph, True
    if not rank.phases:
        return None, False
    last = rank.phases[-1]
    name, is_open = last.name, True
    if name.endswith(" begin"):
        name = name[: -len(" begin")]
    elif name in ("load weights", "KV cache"):
        name = "memory pool"
    else:
        is_open = False
    if last.model == "draft" and not name.startswith("draft "):
        name += " (draft)"
    return name, is_open


def text_phase(text: str) -> str | None:
    """A phase a failure's own words name when no begin line was in the log (an excerpt)."""
    if "graph failed" in text and "Capture" in text:
        return "cuda graph"
    return None


# What a traceback's frames say SGLang was doing (function names first, then file paths), for
# logs without the phase lines (excerpts, old versions). The outermost frame that names one wins.
_FRAME_FUNCTIONS = (
    ("event_loop", SERVING),
    ("run_event_loop", SERVING),
    ("forward_thread_func", SERVING),  # the overlap worker thread runs batches only
    ("init_attention_backend", "attention backend"),
    ("init_cuda_graphs", "cuda graph"),
    ("init_forward_metadata_capture_cuda_graph", "cuda graph"),
    ("capture_one_batch_size", "cuda graph"),
    ("init_memory_pool", "memory pool"),
    ("load_model", "load weights"),
    ("load_weights", "load weights"),
    ("_wait_and_warmup", WARMUP),
    ("_execute_server_warmup", WARMUP),
)
_FRAME_PATHS = (
    ("sglang/srt/server_args.py", LAUNCH),  # the arguments refused before any process began
    ("cuda_graph_runner", "cuda graph"),
    ("/mem_cache/", "memory pool"),
    ("memory_pool", "memory pool"),
    ("model_loader", "load weights"),
    ("weight_utils", "load weights"),
)


def frame_phase(frame: str) -> str | None:
    """`  File ".../model_runner.py", line 207, in init_cuda_graphs` -> "cuda graph" (also
    faulthandler's `  File "...", line 207 in init_cuda_graphs`, after a fatal error)."""
    function = frame.rsplit(" in ", 1)[-1] if " in " in frame.rsplit('"', 1)[-1] else ""
    for name, phase in _FRAME_FUNCTIONS:
        if function.startswith(name):
            return phase
    for part, phase in _FRAME_PATHS:
        if part in frame:
            return phase
    return None


def serving_batch(batch: ev.BatchStats) -> bool:
    """A batch line of real traffic: warmup logs one prefill of one request and nothing else."""
    return batch.kind == "decode" or (batch.running_reqs or 0) > 0 or (batch.new_seqs or 0) > 1


def _ranks_of(startup: Startup, event: ev.Failure) -> list[RankStartup]:
    """The failing rank (none when it logged nothing before: never another rank's step), or
    every rank for a line without a rank tag (the main process)."""
    if event.prefix.rank:
        rank = startup.ranks.get(event.prefix.rank)
        return [rank] if rank is not None else []
    return list(startup.ranks.values())


def inferred_open(startup: Startup, event: ev.Failure) -> bool:
    """The failing rank(s) are in a phase no line began: the pool after its weights loaded
    (`memory pool`), where the attention backend and the graphs also start. A traceback's
    frames name the step more exactly than that."""
    for rank in _ranks_of(startup, event):
        last = rank.phases[-1].name if rank.phases else None
        if _graph_phase(rank) is None and last in ("load weights", "KV cache"):
            return True
    return False


def nothing_started(startup: Startup) -> bool:
    """No rank logged a line, and nothing after the startup was logged: the launch failed
    (a `ServerArgs` ValueError, an import error)."""
    return (
        not startup.ranks
        and startup.summary is None
        and startup.listening_url is None
        and not startup.latest_batch
    )


def _open_phase(ranks: list[RankStartup]) -> str | None:
    """A phase that began and never ended: a capture first, else the one most ranks are in."""
    opened = [name for name, is_open in map(rank_phase, ranks) if is_open and name is not None]
    graphs = [name for name in opened if name.endswith(" graph")]
    if graphs:
        return graphs[-1]
    return max(sorted(set(opened)), key=opened.count) if opened else None


def failed_phase(startup: Startup, event: ev.Failure) -> str | None:
    """The phase in progress when `event` was logged ("serving" after ready); None when the
    log does not say (a traceback that follows may: `settle_phase`)."""
    if startup.mid_run and event.kind == WARMUP:
        return WARMUP  # the batch lines that looked like traffic were the warmup's
    if startup.ready_at is not None or startup.state == "ready":
        return SERVING
    if startup.failure is not None and startup.failure.phase is not None:
        return startup.failure.phase  # the other ranks' reports of the same failure
    if event.kind == WARMUP:
        return WARMUP
    opened = _open_phase(_ranks_of(startup, event))
    if opened is not None:
        return opened
    if any(serving_batch(b) for b in startup.latest_batch.values()):
        return SERVING
    if startup.listening_url is not None:
        return WARMUP
    return text_phase(event.message)


def last_phase(startup: Startup, event: ev.Failure) -> str | None:
    """The phase that ended last (most ranks): the fallback when nothing was open; "launch"
    when no rank began any step."""
    names = [name for name, _ in map(rank_phase, _ranks_of(startup, event)) if name is not None]
    if names:
        return max(sorted(set(names)), key=names.count)
    if event.kind == "watchdog":
        return SERVING  # SGLang's and NCCL's watchdogs watch batches being run
    # Launched (its server_args line) and no rank logged: the launch failed. A line with a rank
    # tag was written by a scheduler: the launch was over.
    launched = startup.server_args is not None and not event.prefix.rank
    return LAUNCH if launched and nothing_started(startup) else None


def _merge_oom(old: ev.OomSizes | None, new: ev.OomSizes | None) -> ev.OomSizes | None:
    if new is None:
        return old
    if old is None:
        return new
    return ev.OomSizes(
        tried_gib=new.tried_gib if new.tried_gib is not None else old.tried_gib,
        free_gib=new.free_gib if new.free_gib is not None else old.free_gib,
        total_gib=new.total_gib if new.total_gib is not None else old.total_gib,
    )


def _first(new: float | None, old: float | None) -> float | None:
    return new if new is not None else old


def explained(tb: OpenTraceback, line: ev.Failure | ev.ExceptionLine) -> ev.Failure:
    """The failure `tb` explains, with `line` as its cause: its kind and numbers when the line
    names them, and its phase from the line's words or the frames when the log had none."""
    failure = tb.failure
    assert failure is not None
    cause = line.message[:MAX_CAUSE_CHARS]
    phase = failure.phase if tb.settled else text_phase(cause) or tb.hint or failure.phase
    if isinstance(line, ev.ExceptionLine):
        return replace(failure, cause=cause, phase=phase)
    specific = line.kind not in GENERIC_KINDS
    return replace(
        failure,
        cause=cause,
        kind=line.kind if specific else failure.kind,
        mem_fraction_static=_first(line.mem_fraction_static, failure.mem_fraction_static),
        raise_above=_first(line.raise_above, failure.raise_above),
        min_viable=_first(line.min_viable, failure.min_viable),
        requested_gb=_first(line.requested_gb, failure.requested_gb),
        free_gb=_first(line.free_gb, failure.free_gb),
        oom=_merge_oom(failure.oom, line.oom),
        phase=phase,
    )


def counts_as_cause(tb: OpenTraceback, exc_type: str) -> bool:
    """Whether an exception line of an explaining traceback becomes its failure's cause."""
    if exc_type not in TEARDOWN:
        return True
    # A teardown exception names the cause only of the failure line that printed it, and only
    # when nothing better came before (`Scheduler hit an exception: ... KeyboardInterrupt`).
    return tb.owned and not tb.has_cause


def exception_type(line: ev.Failure | ev.ExceptionLine) -> str:
    if isinstance(line, ev.ExceptionLine):
        return line.exc_type
    head = line.message.split(":", 1)[0]
    return head if " " not in head else ""


def launcher_failure(line: ev.ExceptionLine) -> ev.Failure:
    """An uncaught exception in a process's outermost frame (a `raise` in the launcher)."""
    message = line.message[:MAX_CAUSE_CHARS]
    return ev.Failure(line.prefix, message, kind="exception", exception_line=True, cause=message)


def capacity_failure(event: ev.MaxTotalTokensCapped) -> ev.Failure:
    """`max_total_tokens=N is larger than the profiled value -M`: SGLang will refuse to start."""
    return ev.Failure(
        event.prefix,
        event.message[:MAX_CAUSE_CHARS],
        kind="not_enough_memory",
        profiled_tokens=event.profiled_tokens,
    )
