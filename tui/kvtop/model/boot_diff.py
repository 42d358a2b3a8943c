"""Two boots of a server side by side: per rank what changed, and which change explains the
change in KV tokens (after an upgrade, a new flag, another driver).

SGLang gives the KV pool what is left of the memory free after the weights once its reserve
is set aside: rest = post-load free − pre-load free × (1 − mem_fraction_static), and the pool
holds rest / (bytes per token) tokens. With post-load free = pre-load free − weights − the
rest of what loading took, a change in tokens splits into parts, each the other boot's value
put in one at a time (A's values first, B's after):

- free memory at start: Δ pre-load free × A's mfs (through both the free memory after loading
  and the reserve);
- weights: − Δ weights;
- what else loading took (the CUDA context, NCCL, the allocator): − Δ (pre − weights − post);
- mem_fraction_static: B's pre-load free × Δ mfs;
- the rest of the pool's change (a draft's pool, a hybrid model's split, the version's rules,
  a --max-total-tokens cap): the pool's logged change less the four above;
- the pool's bytes per token (pool ÷ tokens: the KV cell, with a hybrid's other pools and a
  draft's in it): B's pool at B's bytes per token against A's.

Each part is in A's tokens (GiB × 2^30 / A's bytes per token) except the cell's, and their sum
is the logged change up to SGLang's rounding of its GiB figures. The part with the largest size
is named as what explains the change.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kvtop import fmt
from kvtop.model.memory.rank_memory import MemoryBreakdown
from kvtop.model.sizing.replay import mem_fraction_static, pre_load_free
from kvtop.model.startup_analysis import Analysis
from kvtop.sglang.start_state import RankStartup

GIB = 1 << 30

# The quantities compared per rank: (key, label, unit). GiB figures to 2 decimals, counts whole.
RANK_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("pre_load_free_gib", "free at start", "GiB"),
    ("weights_gib", "weights", "GiB"),
    ("post_load_free_gib", "free after weights", "GiB"),
    ("kv_pool_gib", "KV pool", "GiB"),
    ("kv_cell_bytes", "KV pool per token", "B/token"),
    ("kv_tokens", "KV tokens", "tokens"),
    ("draft_weights_gib", "draft weights", "GiB"),
    ("draft_kv_gib", "draft KV", "GiB"),
    ("graphs_gib", "CUDA graphs", "GiB"),
    ("free_after_startup_gib", "free after startup", "GiB"),
    ("host_kv_gb", "host KV cache", "GB"),
)
# The boot-wide quantities: (key, label).
BOOT_FIELDS: tuple[tuple[str, str], ...] = (
    ("version", "SGLang version"),
    ("mem_fraction_static", "mem_fraction_static"),
    ("max_total_num_tokens", "max_total_num_tokens"),
    ("max_running_requests", "max_running_requests"),
    ("context_len", "context_len"),
    ("chunked_prefill_size", "chunked_prefill_size"),
    ("kv_cache_dtype", "KV cache dtype"),
)
# Arguments that change nothing about memory: left out of the changed-arguments list.
_NOISE_ARGS = frozenset({"random_seed", "port", "host", "api_key", "admin_api_key", "log_level"})

FREE_AT_START = "free memory at start"
WEIGHTS = "weights"
LOADING = "what else loading took"
MFS = "mem_fraction_static"
POOL_REST = "the rest of the pool's change"
POOL = "the KV pool"
CELL = "the pool's bytes per token"


@dataclass(frozen=True, slots=True)
class BootFacts:
    """One boot as compared: where it was read, when it started, and its numbers."""

    where: str
    started_at: str | None
    state: str
    boot: dict[str, object]
    ranks: dict[str, dict[str, float | None]]
    args: dict[str, str]  # every logged launch argument, as logged (secrets never kept)


@dataclass(frozen=True, slots=True)
class Part:
    """One factor's share of the change in KV tokens."""

    factor: str
    tokens: int
    text: str  # the change behind it, in words ("free memory at start 93.17 → 71.50 GiB")


@dataclass(frozen=True, slots=True)
class RankDiff:
    ranks: tuple[str, ...]  # the ranks that changed alike (docs: _alike); rows are the first's
    rows: tuple[tuple[str, float | None, float | None], ...]  # (key, A, B)
    tokens_a: int | None
    tokens_b: int | None
    parts: tuple[Part, ...]
    explained_by: Part | None
    unexplained: str | None  # why no split was made (a figure missing on one side)


@dataclass(frozen=True, slots=True)
class BootDiff:
    a: BootFacts
    b: BootFacts
    boot_rows: tuple[tuple[str, object, object], ...]  # (key, A, B) of the boot-wide fields
    args_changed: tuple[tuple[str, str | None, str | None], ...]
    ranks: tuple[RankDiff, ...]
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def summary(self) -> str:
        """One sentence: the tokens' change and what explains it (the first rank group's)."""
        group = next((r for r in self.ranks if r.tokens_a and r.tokens_b), None)
        if group is None or group.tokens_a is None or group.tokens_b is None:
            return "no rank logged its KV tokens in both boots: nothing to explain."
        delta = group.tokens_b - group.tokens_a
        if delta == 0:
            return f"KV tokens per rank unchanged ({group.tokens_a:,})."
        pct = fmt.change_pct(100.0 * delta / group.tokens_a)
        text = f"KV tokens per rank {group.tokens_a:,} → {group.tokens_b:,} ({delta:+,}, {pct})"
        if group.explained_by is not None:
            return f"{text}: {group.explained_by.text} explains most of it."
        return f"{text}; {group.unexplained or 'not split'}."


def boot_facts(analysis: Analysis, where: str) -> BootFacts:
    """The numbers of one analysed boot that a comparison reads."""
    startup = analysis.startup
    breakdowns = {b.rank: b for b in analysis.breakdowns}
    ranks: dict[str, dict[str, float | None]] = {}
    for rank in analysis.ranks:
        ranks[rank.rank] = _rank_facts(rank, breakdowns.get(rank.rank))
    summary = startup.summary
    args = startup.server_args
    boot: dict[str, object] = {
        "version": analysis.version_shown,
        "mem_fraction_static": mem_fraction_static(startup),
        "max_total_num_tokens": summary.max_total_num_tokens if summary else None,
        "max_running_requests": summary.max_running_requests if summary else None,
        "context_len": summary.context_len if summary else None,
        "chunked_prefill_size": summary.chunked_prefill_size if summary else None,
        "kv_cache_dtype": startup.kv_cache_dtype,
    }
    logged = {str(k): str(v) for k, v in (args.raw.items() if args is not None else ())}
    started = startup.started_at or startup.first_time
    return BootFacts(
        where=where,
        started_at=started.isoformat(sep=" ") if started is not None else None,
        state=startup.state,
        boot=boot,
        ranks=ranks,
        args=logged,
    )


def _rank_facts(rank: RankStartup, breakdown: MemoryBreakdown | None) -> dict[str, float | None]:
    target = rank.target
    draft = rank.draft
    facts: dict[str, float | None] = {
        "pre_load_free_gib": pre_load_free(rank),
        "weights_gib": target.weights_gib,
        "post_load_free_gib": target.avail_after_load_gib,
        "kv_pool_gib": target.kv_gib,
        "kv_cell_bytes": None,
        "kv_tokens": float(target.kv_tokens) if target.kv_tokens is not None else None,
        "draft_weights_gib": draft.weights_gib if draft is not None else None,
        "draft_kv_gib": draft.kv_gib if draft is not None else None,
        "graphs_gib": breakdown.graphs_gib if breakdown is not None else None,
        "free_after_startup_gib": (
            breakdown.free_after_startup_gib if breakdown is not None else None
        ),
        "host_kv_gb": rank.host_kv_gb,
    }
    if target.kv_gib and target.kv_tokens:
        # The pool's bytes per token as logged (pool ÷ tokens), not the model's cell: for a
        # hybrid (an SWA pool beside the full one, a draft's pool) they differ, and only this
        # one makes tokens = pool ÷ bytes per token, which the split of a change rests on.
        facts["kv_cell_bytes"] = target.kv_gib * GIB / target.kv_tokens
    return facts


def compare(a: BootFacts, b: BootFacts) -> BootDiff:
    """Boot A against boot B, rank by rank; ranks whose comparison is the same are one group."""
    boot_rows = tuple((key, a.boot.get(key), b.boot.get(key)) for key, _ in BOOT_FIELDS)
    names = sorted(set(a.args) | set(b.args))
    args_changed = tuple(
        (name, a.args.get(name), b.args.get(name))
        for name in names
        if name not in _NOISE_ARGS and a.args.get(name) != b.args.get(name)
    )
    mfs = (_float(a.boot.get("mem_fraction_static")), _float(b.boot.get("mem_fraction_static")))
    groups: list[RankDiff] = []
    for name in [r for r in a.ranks if r in b.ranks]:
        diff = _rank_diff((name,), a.ranks[name], b.ranks[name], mfs)
        same = next((g for g in groups if _alike(g, diff)), None)
        if same is None:
            groups.append(diff)
        else:
            groups[groups.index(same)] = replace(same, ranks=(*same.ranks, name))
    notes = []
    if a.boot.get("version") != b.boot.get("version"):
        notes.append(
            f"SGLang {a.boot.get('version')} → {b.boot.get('version')}: its sizing rules may "
            "differ between versions (the rest of the pool's change holds what they moved)."
        )
    return BootDiff(
        a=a,
        b=b,
        boot_rows=boot_rows,
        args_changed=args_changed,
        ranks=tuple(groups),
        only_a=tuple(r for r in a.ranks if r not in b.ranks),
        only_b=tuple(r for r in b.ranks if r not in a.ranks),
        notes=tuple(notes),
    )


def _alike(one: RankDiff, other: RankDiff) -> bool:
    """Ranks that changed alike (each quantity by the same amount, the same split of the
    tokens' change) are one group, shown by the first one's values: eight TP ranks whose free
    memory differs by 0.02 GiB but changed the same way are one comparison, not eight."""
    return _changes(one) == _changes(other)


def _changes(diff: RankDiff) -> tuple[object, ...]:
    deltas = tuple(
        (key, None if a is None or b is None else round(b - a, 6), a is None, b is None)
        for key, a, b in diff.rows
    )
    return deltas, tuple((p.factor, p.tokens) for p in diff.parts), diff.tokens_a, diff.tokens_b


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _rank_diff(
    ranks: tuple[str, ...],
    a: dict[str, float | None],
    b: dict[str, float | None],
    mfs: tuple[float | None, float | None],
) -> RankDiff:
    rows = tuple((key, a.get(key), b.get(key)) for key, _, _ in RANK_FIELDS)
    tokens_a, tokens_b = _int(a.get("kv_tokens")), _int(b.get("kv_tokens"))
    parts, why = _split(a, b, mfs)
    explained = max(parts, key=lambda p: abs(p.tokens)) if parts else None
    if explained is not None and explained.tokens == 0:
        explained = None
    return RankDiff(ranks, rows, tokens_a, tokens_b, tuple(parts), explained, why)


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def _split(
    a: dict[str, float | None],
    b: dict[str, float | None],
    mfs: tuple[float | None, float | None],
) -> tuple[list[Part], str | None]:
    """The change in tokens, part by part (module doc); no parts and the reason when a figure
    is missing on one side."""
    ta, tb = a.get("kv_tokens"), b.get("kv_tokens")
    pa, pb = a.get("kv_pool_gib"), b.get("kv_pool_gib")
    ca, cb = a.get("kv_cell_bytes"), b.get("kv_cell_bytes")
    if None in (ta, tb, pa, pb, ca, cb) or not ca or not cb:
        return [], "a boot lacks its KV line (tokens, pool or bytes per token): not split"
    assert ta is not None and tb is not None and pa is not None and pb is not None
    assert ca is not None and cb is not None

    def tokens(gib: float) -> int:
        return round(gib * GIB / ca)

    parts: list[Part] = []
    pool_delta = pb - pa
    pre = (a.get("pre_load_free_gib"), b.get("pre_load_free_gib"))
    weights = (a.get("weights_gib"), b.get("weights_gib"))
    post = (a.get("post_load_free_gib"), b.get("post_load_free_gib"))
    mfs_a, mfs_b = mfs
    explained_gib = 0.0
    if None not in (*pre, *weights, *post) and mfs_a is not None and mfs_b is not None:
        pre_a, pre_b = pre[0] or 0.0, pre[1] or 0.0
        w_a, w_b = weights[0] or 0.0, weights[1] or 0.0
        post_a, post_b = post[0] or 0.0, post[1] or 0.0
        other_a, other_b = pre_a - w_a - post_a, pre_b - w_b - post_b
        shares = (
            (FREE_AT_START, (pre_b - pre_a) * mfs_a, f"{FREE_AT_START} {pre_a:,.2f} → {pre_b:,.2f} GiB"),
            (WEIGHTS, -(w_b - w_a), f"{WEIGHTS} {w_a:,.2f} → {w_b:,.2f} GiB"),
            (LOADING, -(other_b - other_a), f"{LOADING} {other_a:,.2f} → {other_b:,.2f} GiB"),
            (MFS, pre_b * (mfs_b - mfs_a), f"{MFS} {mfs_a:g} → {mfs_b:g}"),
        )  # fmt: skip
        for factor, gib, text in shares:
            parts.append(Part(factor, tokens(gib), text))
            explained_gib += gib
    rest = pool_delta - explained_gib
    if parts:
        text = f"{POOL_REST} {rest:+,.2f} GiB (pool {pa:,.2f} → {pb:,.2f} GiB)"
        parts.append(Part(POOL_REST, tokens(rest), text))
    else:  # free memory or mfs not logged on one side: the pool's change as one part
        parts.append(Part(POOL, tokens(rest), f"{POOL} {pa:,.2f} → {pb:,.2f} GiB"))
    cell_tokens = round(pb * GIB / cb) - round(pb * GIB / ca)
    parts.append(Part(CELL, cell_tokens, f"{CELL} {ca:,.0f} → {cb:,.0f} B/token"))
    return parts, None
