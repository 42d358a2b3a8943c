"""Typed events: what one line of SGLang output says, before any interpretation across lines."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvtop.sglang.server_args import ServerArgs


@dataclass(frozen=True, slots=True, kw_only=True)
class RankTags:
    """Which scheduler process wrote a line (`DP1 TP1 EP1`), each tag None when not logged.

    Declared in SGLang's own order: ranks sort by it (`order`) and the JSON lists them so.
    """

    dp: int | None = None
    pp: int | None = None
    attn_cp: int | None = None
    moe_dp: int | None = None
    tp: int | None = None
    ep: int | None = None

    @property
    def order(self) -> tuple[int, ...]:
        return tuple(-1 if v is None else v for v in self.values())

    def values(self) -> tuple[int | None, ...]:
        return tuple(getattr(self, name) for name in RANK_TAGS)

    def tags(self) -> RankTags:
        """Only the tags (of a LinePrefix, say), to keep without the rest of the line."""
        return RankTags(**{name: getattr(self, name) for name in RANK_TAGS})


RANK_TAGS: tuple[str, ...] = tuple(f.name for f in fields(RankTags))


@dataclass(frozen=True, slots=True)
class LinePrefix(RankTags):
    """The `[time TAGS]` prefix SGLang's logger writes; rank "" when the line has no rank tag."""

    time_text: str | None
    timestamp: datetime | None
    rank: str
    # The time was logged without a year or a date (`[22:24:31]`, the diffusion runtime's
    # `[12-11 17:47:40]`): `timestamp` stays None until the tracker dates it (line_dates.py).
    undated: bool = False

    @property
    def has_prefix(self) -> bool:
        return self.time_text is not None


NO_PREFIX = LinePrefix(time_text=None, timestamp=None, rank="")


@dataclass(frozen=True, slots=True)
class Event:
    """Base class: every event knows the prefix of the line it came from and its message text.

    `rejected` names each number the line carried that kvtop refused (nan, inf, a negative size,
    an impossible count), as `logged text (reason)`: its field is None, and the report says why.
    """

    prefix: LinePrefix
    message: str
    rejected: tuple[str, ...] = ()


# --- distributed init and baseline -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InitBegin(Event):
    step: str = "torch distributed"  # or "parallel" (0.5.20+)


@dataclass(frozen=True, slots=True)
class InitEnd(Event):
    step: str = "torch distributed"
    elapsed_s: float | None = None
    mem_usage_gib: float | None = None


@dataclass(frozen=True, slots=True)
class MemoryBaseline(Event):
    mem_usage_gib: float | None = None


@dataclass(frozen=True, slots=True)
class UnbalancedMemory(Event):
    """SGLang's warning that some GPU had less free memory than the others before loading."""


# --- weights -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoadWeightBegin(Event):
    avail_gib: float | None = None


@dataclass(frozen=True, slots=True)
class LoadWeightEnd(Event):
    model_type: str | None = None
    dtype: str | None = None
    quant: str | None = None
    elapsed_s: float | None = None
    avail_gib: float | None = None
    mem_usage_gib: float | None = None


# --- KV cache pools ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KvCacheDtype(Event):
    dtype: str = ""


@dataclass(frozen=True, slots=True)
class KvCacheAllocated(Event):
    cache_name: str = "KV Cache"
    dtype: str | None = None
    tokens: int | None = None
    k_gib: float | None = None
    v_gib: float | None = None
    kv_gib: float | None = None  # MLA latent size; None for MHA (K and V given instead)
    va_upper_bound: bool = False  # 0.5.19+ post-capture mode: a virtual upper bound, not memory
    post_capture: bool = False  # "Post-capture KV sizing: ..." (the real size in that mode)
    avail_gib: float | None = None  # only the post-capture line carries it

    @property
    def total_gib(self) -> float | None:
        if self.kv_gib is not None:
            return self.kv_gib
        if self.k_gib is not None and self.v_gib is not None:
            return self.k_gib + self.v_gib
        return None


@dataclass(frozen=True, slots=True)
class MambaCacheAllocated(Event):
    """`Mamba Cache is allocated. ...`: the SSM state slots, before the KV line of the same rank.

    The intermediate caches (speculative decoding) are separate buffers beside the slots.
    """

    max_mamba_cache_size: int | None = None
    conv_state_gib: float | None = None
    ssm_state_gib: float | None = None
    intermediate_ssm_gib: float | None = None
    intermediate_conv_gib: float | None = None

    @property
    def state_gib(self) -> float | None:
        """conv + ssm state (the slots), None when neither size was logged."""
        sizes = [v for v in (self.conv_state_gib, self.ssm_state_gib) if v is not None]
        return round(sum(sizes), 6) if sizes else None

    @property
    def intermediate_gib(self) -> float | None:
        sizes = [
            v for v in (self.intermediate_ssm_gib, self.intermediate_conv_gib) if v is not None
        ]
        return round(sum(sizes), 6) if sizes else None


@dataclass(frozen=True, slots=True)
class SwaPoolAllocated(Event):
    mem_usage_gib: float | None = None
    swa_tokens: int | None = None
    full_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class SlidingWindowPool(Event):
    full_layer_tokens: int | None = None
    swa_layer_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class MemoryPoolEnd(Event):
    avail_gib: float | None = None


# --- graphs ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GraphCaptureBegin(Event):
    role: str | None = None  # "target" / "draft"; None when the line does not say (target)
    graph: str = "decode"  # decode / verify / prefill / extend / piecewise
    avail_gib: float | None = None


@dataclass(frozen=True, slots=True)
class GraphCaptureEnd(Event):
    role: str | None = None
    graph: str = "decode"
    elapsed_s: float | None = None
    mem_usage_gib: float | None = None
    avail_gib: float | None = None


@dataclass(frozen=True, slots=True)
class GraphCaptureProgress(Event):
    """tqdm `Capturing batches (bs=.. avail_mem=.. GB)` (rank 0 only, usually without a prefix)."""

    bs: int | None = None
    avail_gib: float | None = None


@dataclass(frozen=True, slots=True)
class GraphBatchSizes(Event):
    batch_sizes: tuple[int, ...] = ()


# --- summary, host pool, arguments, readiness -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Summary(Event):
    max_total_num_tokens: int | None = None
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int | None = None
    max_running_requests: int | None = None
    context_len: int | None = None
    available_gpu_mem_gib: float | None = None


@dataclass(frozen=True, slots=True)
class HostKvAllocated(Event):
    """Hierarchical-cache host pool; `gb` is decimal GB (1e9) as SGLang logs it."""

    gb: float | None = None
    tokens: int | None = None
    label: str | None = None


@dataclass(frozen=True, slots=True)
class HostMemoryHeadroom(Event):
    host_gib: float | None = None
    cgroup_gib: float | None = None


@dataclass(frozen=True, slots=True)
class ServerArgsLogged(Event):
    args: ServerArgs | None = None


@dataclass(frozen=True, slots=True)
class MaxRunningRequestsReset(Event):
    value: int | None = None


@dataclass(frozen=True, slots=True)
class MaxRunningRequestsReduced(Event):
    """SGLang lowered max_running_requests (per DP worker) while sizing its pools: from what
    was asked (None: the line does not say) to `value`, and why in its words."""

    requested: int | None = None
    value: int | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class MaxTotalTokensCapped(Event):
    user_tokens: int | None = None
    profiled_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class ServerListening(Event):
    """Uvicorn's `Uvicorn running on URL`: the HTTP server is up (warmup may still be running)."""

    url: str | None = None


@dataclass(frozen=True, slots=True)
class ServerReady(Event):
    """`The server is fired up and ready to roll!`"""


@dataclass(frozen=True, slots=True)
class ShutdownBegun(Event):
    """The server was asked to stop: `SIGTERM received. ... Draining requests and shutting
    down...`, uvicorn's `Shutting down`, Ctrl-C's bare `KeyboardInterrupt`. `how` says which."""

    how: str = "sigterm"  # "sigterm", "uvicorn", "ctrl-c", "forced"


@dataclass(frozen=True, slots=True)
class ShutdownProgress(Event):
    """A line of a shutdown under way: `Gracefully exiting... Remaining number of requests N`
    (`remaining`), uvicorn's `Finished server process [pid]` or `kill_process_tree called`
    (`finished`). Read only after a shutdown began (or as its first sign in an excerpt)."""

    remaining: int | None = None
    finished: bool = False


@dataclass(frozen=True, slots=True)
class ProcessExited(Event):
    """The process ended with only the interpreter's or the shell's words: `Killed`, a shell's
    job line (`./run.sh: line 31:  2467 Killed  python3 -m sglang.launch_server ...`),
    `resource_tracker: There appear to be N leaked semaphore objects ...`, a container's
    `exited with code N`. `code` is the exit status when the line gives one."""

    how: str = "exited"  # "killed", "resource_tracker", "exit_status"
    code: int | None = None


@dataclass(frozen=True, slots=True)
class RankSeen(Event):
    """Any other line with a rank tag: the rank exists, whatever it said."""


@dataclass(frozen=True, slots=True)
class NotUnderstood(Event):
    """A line in SGLang's shape that kvtop read nothing from: one of SGLang's own message starts
    (`KV Cache is allocated.`, `Load weight end.`) in a form no reader knows, or behind a
    prefix kvtop could not take apart. Counted and shown, never guessed at; its rank (when the
    prefix was read) still counts as seen. `message` is the line as it was logged (cut)."""


@dataclass(frozen=True, slots=True)
class UnitEvent(Event):
    """One of systemd's own lines about the server's unit (PID 1's `UNIT=` entries, what
    `journalctl -u UNIT` shows beside the server's output). `what` says which:
    "oom_kill" (`A process of this unit has been killed by the OOM killer.`), "main_exited"
    (`Main process exited, code=killed, status=9/KILL`), "failed" (`Failed with result
    'oom-kill'.`), "stopping", "stopped", "starting", "started", "restart_scheduled"
    (`Scheduled restart job, restart counter is at N.`), "consumed" (`Consumed ... CPU time,
    110.5G memory peak.`)."""

    what: str = ""
    code: str | None = None  # main_exited: exited / killed / dumped
    status: str | None = None  # main_exited: "9/KILL", "1/FAILURE"
    result: str | None = None  # failed: "oom-kill", "exit-code", "signal", ...
    counter: int | None = None  # restart_scheduled
    memory_peak: str | None = None  # consumed: "110.5G" as logged


@dataclass(frozen=True, slots=True)
class OomSizes:
    """An out-of-memory error's numbers in GiB, each None where the message does not give it."""

    tried_gib: float | None = None
    free_gib: float | None = None
    total_gib: float | None = None


# SGLang 0.5.14+'s refusal when the weights leave nothing for the KV cache (kind
# "not_enough_memory", like the older "Not enough memory" refusal; its words date the version).
NO_MEMORY_FOR_KV = "Loaded weights leave no GPU memory"


@dataclass(frozen=True, slots=True)
class Failure(Event):
    """A line that means the server failed (or is about to): kind says which family.

    `cause` is the final exception line of the traceback that followed (the tracker fills it in
    as the traceback's lines arrive), or the line itself when it is such an exception line;
    `phase` is the startup phase in progress when it failed ("serving" after ready), set by the
    tracker. `exception_line`: the line is a bare `ExcType: message` line of a traceback.
    """

    kind: str = "error"
    mem_fraction_static: float | None = None
    raise_above: float | None = None
    min_viable: float | None = None
    requested_gb: float | None = None
    free_gb: float | None = None
    oom: OomSizes | None = None
    profiled_tokens: int | None = None  # "larger than the profiled value -N": the profiled N
    exception_line: bool = False
    cause: str | None = None
    phase: str | None = None

    @property
    def shown(self) -> str:
        """What to show for it: the cause when a traceback named one, else the line."""
        return self.cause or self.message

    @property
    def reported(self) -> str:
        """The reporting line and its cause as one sentence (`Scheduler hit an exception: X`)."""
        if self.cause == self.message:
            return self.message
        head = self.message
        cut = head.find("Traceback (most recent call last)")
        if cut < 0:
            return self.message if self.cause is None else f"{head} {self.cause}"
        head = head[:cut].rstrip()
        if self.cause is None:
            head = head.removesuffix(":")  # the traceback's last line did not arrive (yet)
            return f"{head} (the traceback's last line is not in the log)"
        return f"{head} {self.cause}" if head else self.cause


# --- tracebacks: the lines after a failure line, unprefixed (one log record) ---------------------


@dataclass(frozen=True, slots=True)
class TracebackStart(Event):
    """`Traceback (most recent call last):` on a line of its own."""


@dataclass(frozen=True, slots=True)
class TracebackChained(Event):
    """`During handling of the above exception...` / `The above exception was the direct cause...`."""


@dataclass(frozen=True, slots=True)
class TracebackFrame(Event):
    """`  File "...", line N, in NAME`; `entry` when NAME is a process's outermost frame."""

    entry: bool = False


@dataclass(frozen=True, slots=True)
class ExceptionLine(Event):
    """A bare `ExcType: message` (or `ExcType`) line: a traceback's last line, if one is open."""

    exc_type: str = ""


# --- runtime batch lines ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchStats(Event):
    kind: str = "decode"  # "prefill" or "decode"
    running_reqs: int | None = None
    queued_reqs: int | None = None
    tokens: int | None = None  # `#token` (decode): tokens in use
    token_usage: float | None = None
    new_seqs: int | None = None
    new_tokens: int | None = None
    cached_tokens: int | None = None
    cache_hit_rate: float | None = None
    gen_throughput: float | None = None
    input_throughput: float | None = None
    accept_len: float | None = None
    accept_rate: float | None = None
    cuda_graph: bool | None = None
    # Hybrid (Mamba / linear-attention) models: the recurrent-state pool's share in use (0..1,
    # `mamba usage`) and its slots in use (`mamba num`, decode lines only); None for others.
    mamba_usage: float | None = None
    mamba_slots_used: int | None = None
    extra: dict[str, float | int | bool | str] = field(default_factory=dict)


# --- DeepSeek-V4 compressed-attention pools ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class Dsv4PoolSizes(Event):
    """`DSV4 pool sizes: full=…, swa=…, c4=…, c128=…, c4_state=…, c128_state=…`: the entries of
    each sub-pool as SGLang sized them. full and swa are tokens; c4 and c128 hold one entry per
    4 and per 128 tokens; the two state pools are compressor state rows (0 for c128_state until
    0.5.19 sizes it after max_running_requests, which this line does not show)."""

    full_tokens: int | None = None
    swa_tokens: int | None = None
    c4_tokens: int | None = None
    c128_tokens: int | None = None
    c4_state_rows: int | None = None
    c128_state_rows: int | None = None


@dataclass(frozen=True, slots=True)
class Dsv4MemoryCalculation(Event):
    """`DSV4 memory calculation: …`: SGLang's budget for all DeepSeek-V4 pools together
    (`available_bytes`, printed in GiB as "GB"), its bytes per full-pool token, the full pool's
    tokens and (0.5.19+) the parts it set aside before the per-token share, in GiB."""

    bytes_per_full_token: float | None = None
    available_gib: float | None = None
    full_tokens: int | None = None
    fixed_gib: tuple[tuple[str, float], ...] = ()  # ("c128_state", 0.04), ... as logged
    unified: bool | None = None  # 0.5.23+: the unified-KV layout


# --- retractions while serving --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Retraction(Event):
    """The scheduler took running requests back to the queue because the KV pool could not hold
    the next decode step: `KV cache pool is full. Retract requests. #retracted_reqs: N, ...`
    (0.4.7+, WARNING) or `Decode out of memory happened. #retracted_reqs: N, ...` (0.4.6 and
    before, INFO). Not a failure: the requests run again later, their KV computed again."""

    retracted_reqs: int | None = None
    new_tokens_gained: int | None = None  # 0.5.x: pool tokens the retraction freed
    mamba_num_gained: int | None = None  # 0.5.14+ hybrid models: state slots it freed
    ratio_before: float | None = None  # `#new_token_ratio: before -> after`
    ratio_after: float | None = None
