"""One server start as data: its ranks, their phases and pools, failures, lifecycle times.

The tracker (kvtop.sglang.startup) fills these in from the log's events; failures.py and
lifecycle.py read them. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from kvtop.sglang import events as ev
from kvtop.sglang.retraction_record import RetractionRecord
from kvtop.sglang.server_args import ServerArgs
from kvtop.sglang.version_hint import UNKNOWN, VersionRange

MAX_EARLIER_STARTS = 50  # earlier starts remembered (the count in `restarts` goes on)

STARTING, READY, FAILED = "starting", "ready", "failed"
STOPPED = "stopped"  # shut down on purpose (SIGTERM, Ctrl-C, uvicorn's "Shutting down")
TARGET, DRAFT = "target", "draft"

MAX_REJECTED = 100  # refused numbers kept per startup (the count goes on)
# A real startup has tens of phases and captures per rank; a hostile or looping log must not make
# memory (or the open-capture lookup) grow without bound.
MAX_PHASES_PER_RANK = 500
MAX_GRAPHS_PER_MODEL = 128


@dataclass(slots=True)
class GraphCapture:
    """One CUDA-graph capture (begin/end pair) of the target or the draft."""

    graph: str
    began_at: str | None = None
    ended_at: str | None = None
    avail_before_gib: float | None = None
    avail_after_gib: float | None = None
    mem_usage_gib: float | None = None
    elapsed_s: float | None = None
    progress_avail_gib: float | None = None  # latest tqdm reading while capturing
    # Fields kvtop computed from the other line's numbers, each with how (no begin line: the
    # free memory before is after + usage), never shown as read.
    derived: dict[str, str] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.ended_at is not None or self.avail_after_gib is not None


@dataclass(frozen=True, slots=True)
class RejectedValue:
    """A number a log line carried that kvtop refused: `value` is the logged text and the reason."""

    rank: str
    time_text: str | None
    value: str  # e.g. "avail mem=nan (not a finite number)"
    line: str  # the start of the message, to find the line in the log


@dataclass(slots=True)
class Phase:
    """One step of a rank's startup as the log showed it, for the timeline and waterfall."""

    name: str
    model: str
    time_text: str | None
    timestamp: datetime | None
    avail_gib: float | None = None
    delta_gib: float | None = None  # memory the phase took (positive) as logged
    duration_s: float | None = None
    message: str = ""
    derived: dict[str, str] = field(default_factory=dict)  # computed fields, with how


@dataclass(slots=True)
class KvPart:
    """One `KV Cache is allocated` line of a model, as logged; pools() decides its sub-pool."""

    name: str  # "KV Cache", or a label's pool ("Full KV Cache", "SWA KV Cache", 0.5.19+)
    tokens: int | None
    gib: float | None
    gib_derived: str | None = None  # how the GiB was computed (K size + V size), None: logged


@dataclass(frozen=True, slots=True)
class Pool:
    """One memory pool of a model: a KV sub-pool (full, swa, ...) or a state cache (mamba).

    `tokens` is None for state caches (they hold request slots, not tokens). `inferred`: no
    line of this sub-pool was seen; its GiB is SWAKVPool's total minus the other sub-pool.
    """

    kind: str
    tokens: int | None
    gib: float | None
    inferred: bool = False
    gib_derived: str | None = None  # how kvtop computed the GiB; None: one line logged it


# ModelMemory's fields that may be derived, in the JSON's order.
DERIVED_ORDER = (
    "load_s",
    "kv_gib",
    "mamba_gib",
    "avail_before_graph_gib",
    "graph_gib",
)

FULL, SWA, MAMBA, MAMBA_INTERMEDIATE = "full", "swa", "mamba", "mamba_intermediate"
KV_POOL_KINDS = (FULL, SWA)
C4, C128 = "c4", "c128"  # DeepSeek-V4's compressed sub-pools, named as SGLang names them


@dataclass(slots=True)
class Dsv4Pools:
    """DeepSeek-V4's compressed-attention pools as its `DSV4 …` lines gave them: entries per
    sub-pool (full, swa, c4, c128; the latest line of the rank wins, as SGLang re-sizes them
    under --max-total-tokens) and the budget they share. SGLang logs no size per sub-pool."""

    full_tokens: int | None = None
    swa_tokens: int | None = None
    c4_tokens: int | None = None
    c128_tokens: int | None = None
    c4_state_rows: int | None = None
    c128_state_rows: int | None = None
    bytes_per_full_token: float | None = None
    budget_gib: float | None = None  # `available_bytes`: every DSV4 pool together
    fixed_gib: tuple[tuple[str, float], ...] = ()  # parts set aside before the per-token share

    def sub_pools(self) -> list[tuple[str, int]]:
        sizes = (
            (FULL, self.full_tokens),
            (SWA, self.swa_tokens),
            (C4, self.c4_tokens),
            (C128, self.c128_tokens),
        )
        return [(kind, tokens) for kind, tokens in sizes if tokens is not None]


@dataclass(slots=True)
class ModelMemory:
    """What one model (target or draft) of one rank took, from its own log lines."""

    init_dist_gib: float | None = None
    avail_before_load_gib: float | None = None
    avail_after_load_gib: float | None = None
    weights_gib: float | None = None
    load_s: float | None = None
    model_type: str | None = None
    dtype: str | None = None
    quant: str | None = None
    kv_tokens: int | None = None
    k_gib: float | None = None
    v_gib: float | None = None
    kv_gib: float | None = None  # MLA latent size, or K + V
    kv_dtype: str | None = None
    kv_pool_names: list[str] = field(default_factory=list)
    kv_va_tokens: int | None = None
    avail_after_pool_gib: float | None = None
    graphs: list[GraphCapture] = field(default_factory=list)
    load_begun: bool = False
    load_ended: bool = False
    load_began_at: datetime | None = None
    pool_began_at: datetime | None = None  # time of the load end / KV line preceding the pool
    # Hybrid pools: every KV line, the SWA summary lines, the Mamba state.
    kv_parts: list[KvPart] = field(default_factory=list)
    swa_tokens_logged: int | None = None  # `swa size:` / `swa_layer_tokens=`
    full_tokens_logged: int | None = None  # `full size:` / `full_layer_tokens=`
    swa_pool_total_gib: float | None = None  # `SWAKVPool mem usage:` (both sub-pools)
    mamba_gib: float | None = None  # conv + ssm state of the Mamba slots
    mamba_slots: int | None = None  # max_mamba_cache_size
    mamba_intermediate_gib: float | None = None  # speculative intermediate state caches
    dsv4: Dsv4Pools | None = None  # DeepSeek-V4's compressed-attention pools
    # Values the tracker computed from other logged numbers (kv_gib = K + V, load_s from the
    # lines' times, mamba_gib = conv + ssm), each with how; `derived` adds the graphs'.
    derived_how: dict[str, str] = field(default_factory=dict)

    @property
    def sliding_window(self) -> bool:
        """An SWA hybrid: a sliding-window line, a SWAKVPool line or an `SWA KV Cache` pool."""
        return (
            self.swa_tokens_logged is not None
            or self.swa_pool_total_gib is not None
            or any(part.name.upper().startswith("SWA ") for part in self.kv_parts)
            # two unlabelled pools before `Memory pool end`: SWA then full (0.5.2–0.5.14)
            or sum(part.name == "KV Cache" for part in self.kv_parts) >= 2
        )

    @property
    def hybrid(self) -> bool:
        return self.sliding_window or self.mamba_gib is not None or self.dsv4 is not None

    def pools(self) -> list[Pool]:
        """Every pool of this model in a fixed order: full, swa, other KV labels, mamba."""
        return pools_of(self)

    @property
    def avail_before_graph_gib(self) -> float | None:
        return self.graphs[0].avail_before_gib if self.graphs else None

    @property
    def derived(self) -> dict[str, str]:
        """Every field of this model kvtop computed rather than read, with how, in field order."""
        found = dict(self.derived_how)
        first = self.graphs[0] if self.graphs else None
        if first is not None and "avail_before_gib" in first.derived:
            found["avail_before_graph_gib"] = first.derived["avail_before_gib"]
        usages = [g for g in self.graphs if g.mem_usage_gib is not None]
        if len(usages) > 1:
            parts = " + ".join(f"{g.mem_usage_gib:.2f}" for g in usages)
            found["graph_gib"] = f"the {len(usages)} captures' mem usage summed ({parts})"
        elif usages and "mem_usage_gib" in usages[0].derived:
            found["graph_gib"] = usages[0].derived["mem_usage_gib"]
        return {name: found[name] for name in DERIVED_ORDER if name in found}

    @property
    def avail_after_graph_gib(self) -> float | None:
        done = [g for g in self.graphs if g.avail_after_gib is not None]
        return done[-1].avail_after_gib if done else None

    @property
    def graph_gib(self) -> float | None:
        usages = [g.mem_usage_gib for g in self.graphs if g.mem_usage_gib is not None]
        return round(sum(usages), 6) if usages else None

    @property
    def graph_s(self) -> float | None:
        times = [g.elapsed_s for g in self.graphs if g.elapsed_s is not None]
        return round(sum(times), 6) if times else None

    @property
    def seen(self) -> bool:
        return (
            self.load_begun
            or self.load_ended
            or self.kv_tokens is not None
            or self.kv_gib is not None
            or self.avail_after_pool_gib is not None
            or bool(self.graphs)
            or self.mamba_gib is not None
            or self.dsv4 is not None
        )


def _part_kinds(model: ModelMemory) -> list[str]:
    """Which sub-pool each KV line is. Labelled lines (0.5.19+) say it; unlabelled ones of an
    SWA hybrid come SWA first, then full (0.5.2–0.5.14), or match the logged sizes."""
    kinds = [part.name.removesuffix("KV Cache").strip().lower() for part in model.kv_parts]
    unlabelled = [i for i, kind in enumerate(kinds) if not kind]
    for i in unlabelled:
        kinds[i] = FULL
    if not model.sliding_window or not unlabelled:
        return kinds
    swa, full = model.swa_tokens_logged, model.full_tokens_logged
    alone_is_swa = swa is not None and swa != full and model.kv_parts[unlabelled[0]].tokens == swa
    if len(unlabelled) >= 2 or alone_is_swa:
        kinds[unlabelled[0]] = SWA
    return kinds


def pools_of(model: ModelMemory) -> list[Pool]:
    by_kind: dict[str, Pool] = {}
    dsv4 = model.dsv4.sub_pools() if model.dsv4 is not None else []
    for kind, tokens in dsv4:  # tokens only: no DSV4 line gives a sub-pool's size
        by_kind[kind] = Pool(kind, tokens, None)
    how = model.derived_how
    for part, kind in zip(model.kv_parts, _part_kinds(model), strict=True):
        if dsv4:
            break  # the DSV4 lines name every sub-pool
        old = by_kind.get(kind)
        if old is None:
            by_kind[kind] = Pool(kind, part.tokens, part.gib, gib_derived=part.gib_derived)
        elif part.gib is not None:
            total = round((old.gib or 0.0) + part.gib, 6)
            summed = f"its KV lines summed ({old.gib or 0.0:.2f} + {part.gib:.2f})"
            by_kind[kind] = Pool(kind, old.tokens, total, gib_derived=summed)
    if model.sliding_window:
        _infer_missing_sub_pool(model, by_kind)
    if not by_kind and (model.kv_tokens is not None or model.kv_gib is not None):
        by_kind[FULL] = Pool(FULL, model.kv_tokens, model.kv_gib, gib_derived=how.get("kv_gib"))
    order = {FULL: 0, SWA: 1}
    pools = sorted(by_kind.values(), key=lambda pool: order.get(pool.kind, 2))
    if model.mamba_gib is not None:
        pools.append(Pool(MAMBA, None, model.mamba_gib, gib_derived=how.get("mamba_gib")))
    if model.mamba_intermediate_gib is not None:
        pools.append(
            Pool(
                MAMBA_INTERMEDIATE,
                None,
                model.mamba_intermediate_gib,
                gib_derived=how.get("mamba_intermediate_gib"),
            )
        )
    return pools


def _infer_missing_sub_pool(model: ModelMemory, by_kind: dict[str, Pool]) -> None:
    """An excerpt (or a rank) that shows one sub-pool and the SWAKVPool total: the other one is
    the difference, with its token count from the same line."""
    total = model.swa_pool_total_gib
    logged = {FULL: model.full_tokens_logged, SWA: model.swa_tokens_logged}
    for kind in KV_POOL_KINDS:
        if kind not in by_kind and logged[kind] is not None:
            other = [pool.gib for pool in by_kind.values() if pool.gib is not None]
            gib = round(total - sum(other), 2) if total is not None and other else None
            if gib is not None and gib < 0:
                gib = None
            how = None
            if gib is not None and total is not None:
                how = f"SWAKVPool total − the other sub-pool ({total:.2f} − {sum(other):.2f})"
            by_kind[kind] = Pool(kind, logged[kind], gib, inferred=True, gib_derived=how)


def refresh_pools(model: ModelMemory) -> None:
    """Keep kv_tokens the full pool's tokens (max_total_num_tokens) and kv_gib every KV pool."""
    pools = [pool for pool in pools_of(model) if pool.kind not in (MAMBA, MAMBA_INTERMEDIATE)]
    full = next((pool for pool in pools if pool.kind == FULL and pool.tokens), None)
    if full is not None:
        model.kv_tokens = full.tokens
    total = model.swa_pool_total_gib
    if total is not None and (model.kv_gib is None or total > model.kv_gib + 0.015):
        model.kv_gib = total
        model.derived_how.pop("kv_gib", None)  # the SWAKVPool line logs the total itself


@dataclass(slots=True)
class RankStartup:
    """The startup of one scheduler process (one GPU), keyed by its tags as logged."""

    rank: str
    tags: ev.RankTags = field(default_factory=ev.RankTags)
    target: ModelMemory = field(default_factory=ModelMemory)
    draft: ModelMemory | None = None
    host_kv_gb: float | None = None
    host_kv_tokens: int | None = None
    post_load_free_gib: float | None = None  # the last free reading before the target KV pool
    phases: list[Phase] = field(default_factory=list)
    failure: ev.Failure | None = None
    first_seen: datetime | None = None
    last_seen: datetime | None = None

    def __getattr__(self, name: str) -> int | None:
        # rank.tp and the other tags read through to `tags`, where they are declared once.
        if name in ev.RANK_TAGS:
            return getattr(self.tags, name)
        raise AttributeError(name)

    def model(self, which: str) -> ModelMemory:
        if which == TARGET:
            return self.target
        if self.draft is None:
            self.draft = ModelMemory()
        return self.draft


@dataclass(slots=True)
class Startup:
    """One server start (from `server_args=` or the first rank line) and everything it logged."""

    state: str = STARTING
    failure: ev.Failure | None = None
    failures: list[ev.Failure] = field(default_factory=list)
    restarts: int = 0
    server_args: ServerArgs | None = None
    summary: ev.Summary | None = None
    ranks: dict[str, RankStartup] = field(default_factory=dict)
    kv_cache_dtype: str | None = None
    started_at: datetime | None = None
    ready_at: datetime | None = None
    listening_url: str | None = None
    max_running_requests_reset: int | None = None
    # SGLang lowered max_running_requests as it sized its pools: from what, to what, why.
    max_running_requests_reduced: ev.MaxRunningRequestsReduced | None = None
    max_total_tokens_capped: ev.MaxTotalTokensCapped | None = None
    unbalanced_warnings: list[str] = field(default_factory=list)
    rejected_values: list[RejectedValue] = field(default_factory=list)
    rejected_count: int = 0  # all of them, also past MAX_REJECTED
    latest_batch: dict[str, ev.BatchStats] = field(default_factory=dict)
    batch_lines: int = 0
    # Running requests taken back to the queue while serving (retraction_record.py).
    retractions: RetractionRecord = field(default_factory=RetractionRecord)
    version: VersionRange = UNKNOWN
    phased_draft_init: bool | None = None  # True: draft loaded before the target pool (≥0.5.14)
    first_time: datetime | None = None
    last_time: datetime | None = None
    # Lifecycle: when uvicorn listened, when and how a shutdown began (the line's words), the
    # requests it still had to drain and whether its last line was logged; earlier starts of
    # the same log or unit (StartRecord, the latest MAX_EARLIER_STARTS of them).
    listening_at: datetime | None = None
    stopped_at: datetime | None = None
    stopped_by: str | None = None
    stop_how: str | None = None
    drain_remaining: int | None = None
    shutdown_finished: bool = False
    after_stop_failures: int = 0  # failure lines of children the shutdown ended (not failures)
    earlier: tuple[StartRecord, ...] = ()
    # The log began after this start's startup (rotated, `--since`, copytruncate): batch lines
    # of real traffic came before any startup line, so it was serving.
    mid_run: bool = False
    # systemd's words about the unit (journal): its result (`oom-kill`, `exit-code`, ...) and
    # the memory peak its `Consumed ...` line gave.
    unit_result: str | None = None
    unit_memory_peak: str | None = None

    @property
    def note(self) -> str | None:
        """What the log cannot show about this start, in words (None when it shows it all)."""
        if self.mid_run:
            return "the startup is not in this log"
        failure = self.failure
        if failure is not None and failure.kind == "exited" and failure.phase != "serving":
            return "the log does not say why it exited"
        return None

    @property
    def failed_phase(self) -> str | None:
        """The phase in progress when the start failed ("serving" after ready): failures.py."""
        return self.failure.phase if self.failure is not None else None

    @property
    def stopping(self) -> bool:
        """A shutdown began (its time may be unknown: a bare KeyboardInterrupt)."""
        return self.stop_how is not None

    @property
    def finished(self) -> bool:
        """Startup finished: the server was ready (it may have stopped or crashed since)."""
        return self.ready_at is not None or self.state == READY

    @property
    def has_rank_lines(self) -> bool:
        """Any scheduler output yet (startup phases or batch lines)."""
        return bool(self.ranks) or bool(self.latest_batch)

    @property
    def speculative(self) -> bool | None:
        if any(r.draft is not None and r.draft.seen for r in self.ranks.values()):
            return True
        if self.server_args is None:
            return None
        return bool(self.server_args.speculative_algorithm)

    def sorted_ranks(self) -> list[RankStartup]:
        return sorted(self.ranks.values(), key=lambda r: (r.tags.order, r.rank))


@dataclass(frozen=True, slots=True)
class StartRecord:
    """What one earlier start came to: its times, its state when the next start began and the
    step it was in then (the step it failed in, for a failed start)."""

    started_at: datetime | None
    last_time: datetime | None
    ready_at: datetime | None
    stopped_at: datetime | None
    state: str
    failure_kind: str | None
    phase: str | None
