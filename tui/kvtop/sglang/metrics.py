"""Read SGLang's Prometheus ``/metrics`` text and ``/server_info`` JSON into typed samples."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from kvtop.sglang.bounds import MAX_COUNT, MAX_GIB, refusal
from kvtop.sglang.control_chars import make_visible
from kvtop.sglang.server_args import ServerArgs, server_args_from_mapping

__all__ = [
    "MemoryUsage",
    "MetricsSample",
    "ServerInfo",
    "parse_exposition",
    "parse_server_info",
]

# Why a hand-written scanner: prometheus_client's text_string_to_metric_families builds an
# object per sample and costs tens of ms on a real 115 KB SGLang scrape (mostly histogram
# buckets kvtop never looks at). kvtop scrapes every second, so this parser looks only at the
# families below, skipping every other line after a prefix check and one ``find``, before any
# label parsing. Budget: under 5 ms per scrape (bench/bench_metrics_parse.py measures it).

_PREFIX: Final = "sglang:"
_PREFIX_LEN: Final = len(_PREFIX)

# How the deployment-level value is formed from the DP groups (one publisher per DP group:
# only attn_tp_rank 0 publishes, unless --enable-metrics-for-all-schedulers; then the other
# TP ranks of a DP group repeat the same pool and are never added up).
_SUM: Final = "sum"  # counts and pools: one per DP group, added across DP groups
_MEAN: Final = "mean"  # ratios: averaged across DP groups
_MAX: Final = "max"  # per-GPU sizes and durations: the largest rank
_MIN: Final = "min"  # free memory at startup: SGLang sizes from the minimum over ranks
_FIRST: Final = "first"  # configuration constants: the same on every rank

_SCALAR_RULES: Final[Mapping[str, str]] = {
    "token_usage": _MEAN,
    "full_token_usage": _MEAN,
    "swa_token_usage": _MEAN,
    # Hybrid models' recurrent-state pool (0.5.6+; 0 on a plain model): its share in use, and
    # (0.5.14+, named "tokens" but counting state slots) its slots used, free and cached.
    "mamba_usage": _MEAN,
    "mamba_used_tokens": _SUM,
    "mamba_available_tokens": _SUM,
    "mamba_evictable_tokens": _SUM,
    "num_used_tokens": _SUM,
    "max_total_num_tokens": _SUM,
    "num_running_reqs": _SUM,
    "num_queue_reqs": _SUM,
    "gen_throughput": _SUM,
    "cache_hit_rate": _MEAN,
    "spec_accept_length": _MEAN,
    "spec_accept_rate": _MEAN,
    "hicache_host_used_tokens": _SUM,
    "hicache_host_total_tokens": _SUM,
    "page_size": _FIRST,
    "num_pages": _SUM,
    "context_len": _FIRST,
    "kv_used_tokens": _SUM,
    "kv_available_tokens": _SUM,
    "kv_evictable_tokens": _SUM,
    # Tokens streaming sessions hold between their turns (0.5.14+): held, and no leak.
    "streaming_session_held_tokens": _SUM,
    "weight_memory_usage_gb": _MAX,
    "kv_cache_memory_usage_gb": _MAX,
    "startup_available_gpu_memory_gb": _MIN,
    "engine_startup_time": _MAX,
    "engine_load_weights_time": _MAX,
    # Retractions (0.5.8+): the latest batch's retracted requests (a gauge, there from the
    # first batch), and counters since the server started, which appear at its first one.
    "num_retracted_reqs": _SUM,
    "num_retracted_requests_total": _SUM,
    "num_retracted_input_tokens_total": _SUM,
    "num_retracted_output_tokens_total": _SUM,
}
# Families with a label that splits them into parts (not ranks).
_CACHE_CONFIG: Final = "cache_config_info"  # 0.5.10 only: {page_size, num_pages} labels, value 1
_GRAPH_MEMORY: Final = "graph_memory_usage_gb"  # 0.5.19+: {phase}
_STARTUP_PHASES: Final = "startup_time_seconds"  # 0.5.19+: {phase}
_WANTED: Final = frozenset({*_SCALAR_RULES, _CACHE_CONFIG, _GRAPH_MEMORY, _STARTUP_PHASES})

_ESCAPES: Final = {"\\": "\\", '"': '"', "n": "\n"}

# Every family read here is a count, a size, a ratio or a duration: never negative, and within
# the bounds of bounds.py (the log parser's too).
MAX_VALUE: Final = MAX_COUNT
MAX_REJECTED: Final = 20
MAX_MODEL_NAMES: Final = 8  # distinct model_name labels kept (a real server has one)
MAX_NAME_CHARS: Final = 300
_RATIOS: Final = frozenset(
    {
        "token_usage",
        "full_token_usage",
        "swa_token_usage",
        "mamba_usage",
        "cache_hit_rate",
        "spec_accept_rate",
    }
)


@dataclass(frozen=True, slots=True)
class MetricsSample:
    """One scrape: deployment-level values (name without ``sglang:``) plus per-rank detail."""

    values: Mapping[str, float]
    per_rank: Mapping[str, Mapping[str, float]]
    graph_memory_gib_by_phase: Mapping[str, float] = field(default_factory=dict)
    startup_seconds_by_phase: Mapping[str, float] = field(default_factory=dict)
    # Distinct ``sglang:`` families in the text (all of them, not only the ones read here).
    families_seen: int = 0
    # Series of the families read here whose value was refused (the line as scraped and why);
    # at most MAX_REJECTED are kept, ``rejected_count`` counts them all.
    rejected: tuple[str, ...] = ()
    rejected_count: int = 0
    # Who the server says it is (tui/kvtop/model/status/identity.py compares it with the log): the distinct
    # ``model_name`` labels (--served-model-name, default the model path) of the families read
    # here, the pool of each DP group (lowest rank of the group; DP0 first), and the highest
    # ``tp_rank`` / ``dp_rank`` / ``pp_rank`` label a series carried (None: no such label).
    model_names: tuple[str, ...] = ()
    max_total_num_tokens_by_dp: tuple[int, ...] = ()
    highest_tp_rank: int | None = None
    highest_dp_rank: int | None = None
    highest_pp_rank: int | None = None

    def _int(self, name: str) -> int | None:
        value = self.values.get(name)
        return None if value is None else round(value)

    @property
    def max_total_num_tokens(self) -> int | None:
        """KV pool size in tokens, summed over DP groups."""
        return self._int("max_total_num_tokens")

    @property
    def used_tokens(self) -> int | None:
        """Tokens held by running requests (radix-cached, evictable tokens not counted)."""
        used = self._int("num_used_tokens")
        return used if used is not None else self._int("kv_used_tokens")

    @property
    def token_usage(self) -> float | None:
        return self.values.get("token_usage")

    @property
    def evictable_tokens(self) -> int | None:
        """Pool tokens holding radix-cached prefixes no running request uses (0.5.12+): SGLang
        evicts them when a new request needs room, so they are neither used nor a limit."""
        return self._int("kv_evictable_tokens")

    @property
    def available_tokens(self) -> int | None:
        """Pool tokens free, neither used nor cached (0.5.12+)."""
        return self._int("kv_available_tokens")

    @property
    def mamba_usage(self) -> float | None:
        """The recurrent-state pool's share in use (0..1); SGLang sends 0 for a plain model."""
        return self.values.get("mamba_usage")

    @property
    def mamba_slots_used(self) -> int | None:
        """State slots held by running requests (`sglang:mamba_used_tokens`, 0.5.14+)."""
        return self._int("mamba_used_tokens")

    @property
    def mamba_slots(self) -> int | None:
        """The state pool's slots: used + free + cached (0.5.14+); None when any is missing."""
        parts = [
            self._int(name)
            for name in ("mamba_used_tokens", "mamba_available_tokens", "mamba_evictable_tokens")
        ]
        known = [p for p in parts if p is not None]
        return sum(known) if len(known) == len(parts) else None

    @property
    def running_requests(self) -> int | None:
        return self._int("num_running_reqs")

    @property
    def queued_requests(self) -> int | None:
        return self._int("num_queue_reqs")

    @property
    def gen_throughput(self) -> float | None:
        """Generated tokens per second, summed over DP groups."""
        return self.values.get("gen_throughput")

    @property
    def cache_hit_rate(self) -> float | None:
        return self.values.get("cache_hit_rate")

    @property
    def spec_accept_length(self) -> float | None:
        return self.values.get("spec_accept_length")

    @property
    def retracted_requests_total(self) -> int | None:
        """Requests retracted since the server started, over DP groups. SGLang's counter
        appears at the first retraction: with the gauge there and no counter, none yet. None:
        this server exports neither (before 0.5.8, or metrics off)."""
        total = self._int("num_retracted_requests_total")
        if total is None and "num_retracted_reqs" in self.values:
            return 0
        return total

    @property
    def page_size(self) -> int | None:
        return self._int("page_size")

    @property
    def num_pages(self) -> int | None:
        return self._int("num_pages")

    @property
    def context_len(self) -> int | None:
        return self._int("context_len")

    @property
    def hicache_host_used_tokens(self) -> int | None:
        return self._int("hicache_host_used_tokens")

    @property
    def hicache_host_total_tokens(self) -> int | None:
        return self._int("hicache_host_total_tokens")

    @property
    def weight_gib(self) -> float | None:
        """Model weights per GPU in GiB (SGLang's "GB" is GiB)."""
        return self.values.get("weight_memory_usage_gb")

    @property
    def kv_cache_gib(self) -> float | None:
        return self.values.get("kv_cache_memory_usage_gb")

    @property
    def graph_memory_gib(self) -> float | None:
        return self.values.get(_GRAPH_MEMORY)


# --------------------------------------------------------------------------------------------
# line scanning


def _parse_labels(line: str, start: int) -> tuple[dict[str, str], int] | None:
    """Labels from ``line[start] == "{"``; returns (labels, index after ``}``) or None if bad."""
    labels: dict[str, str] = {}
    pos = start + 1
    end = len(line)
    while True:
        while pos < end and line[pos] in " \t,":
            pos += 1
        if pos >= end:
            return None
        if line[pos] == "}":
            return labels, pos + 1
        eq = line.find("=", pos)
        if eq < 0:
            return None
        key = line[pos:eq].strip()
        pos = eq + 1
        while pos < end and line[pos] in " \t":
            pos += 1
        if pos >= end or line[pos] != '"':
            return None
        pos += 1
        quote = line.find('"', pos)
        if quote < 0:
            return None
        # Only up to the quote: a search to the end of the line from every label made a line
        # of many labels quadratic (400k labels: 32 s).
        if line.find("\\", pos, quote) < 0:
            value = line[pos:quote]
            pos = quote + 1
        else:  # escaped characters: walk the value one character at a time
            chars: list[str] = []
            while True:
                if pos >= end:
                    return None
                char = line[pos]
                if char == "\\" and pos + 1 < end:
                    nxt = line[pos + 1]
                    chars.append(_ESCAPES.get(nxt, "\\" + nxt))
                    pos += 2
                elif char == '"':
                    pos += 1
                    break
                else:
                    chars.append(char)
                    pos += 1
            value = "".join(chars)
        if key:
            labels[key] = value


def _rank_key(labels: Mapping[str, str]) -> tuple[str, tuple[int, int, int], str]:
    """(rank label like "DP0 TP0", numeric sort key, DP group)."""
    dp = labels.get("dp_rank")
    tp = labels.get("tp_rank")
    pp = labels.get("pp_rank")
    parts = []
    if dp is not None:
        parts.append(f"DP{dp}")
    if tp is not None:
        parts.append(f"TP{tp}")
    if pp is not None and pp != "0":
        parts.append(f"PP{pp}")
    name = make_visible(" ".join(parts)) or "all"
    return name, (_num(dp), _num(tp), _num(pp)), dp or ""


def _num(text: str | None) -> int:
    if text is None:
        return -1
    try:
        return int(text)
    except ValueError:
        return 1 << 30


@dataclass(slots=True)
class _Scrape:
    """What one scrape has read so far, and what it refused."""

    scalars: dict[str, dict[str, float]] = field(default_factory=dict)  # name -> rank -> value
    ranks: dict[str, tuple[tuple[int, int, int], str]] = field(default_factory=dict)  # sort key, DP
    cache_config: dict[str, tuple[str, str]] = field(default_factory=dict)  # rank -> labels
    graph: dict[str, dict[str, float]] = field(default_factory=dict)  # phase -> rank -> GiB
    startup: dict[str, float] = field(default_factory=dict)  # phase -> seconds
    families: set[str] = field(default_factory=set)
    typed_families: set[str] = field(default_factory=set)
    rejected: list[str] = field(default_factory=list)
    rejected_count: int = 0
    model_names: set[str] = field(default_factory=set)

    def refuse(self, line: str, why: str) -> None:
        self.rejected_count += 1
        if len(self.rejected) < MAX_REJECTED:
            shown = line if len(line) <= 120 else line[:117] + "..."
            self.rejected.append(f"{make_visible(shown)} ({why})")


def parse_exposition(text: str) -> MetricsSample:
    """Parse Prometheus text; unknown, garbage and non-finite lines are skipped, never raised."""
    scrape = _Scrape()
    for raw in text.splitlines():
        if not raw.startswith(_PREFIX):
            if raw.startswith("# TYPE sglang:"):
                scrape.typed_families.add(raw[7:].split(" ", 1)[0])
            continue
        line = raw.rstrip()
        sample = _read_sample(scrape, line)
        if sample is not None:
            _store(scrape, line, *sample)
    _add_cache_config(scrape)
    graph_by_phase = {phase: max(by_rank.values()) for phase, by_rank in scrape.graph.items()}
    return MetricsSample(
        values=MappingProxyType(_deployment_values(scrape, graph_by_phase)),
        per_rank=MappingProxyType({r: MappingProxyType(v) for r, v in _per_rank(scrape).items()}),
        graph_memory_gib_by_phase=MappingProxyType(graph_by_phase),
        startup_seconds_by_phase=MappingProxyType(scrape.startup),
        families_seen=len(scrape.typed_families) or len(scrape.families),
        rejected=tuple(scrape.rejected),
        rejected_count=scrape.rejected_count,
        model_names=tuple(sorted(_shown_name(n) for n in scrape.model_names)),
        max_total_num_tokens_by_dp=_pool_by_dp(scrape),
        highest_tp_rank=_highest(scrape, 1),
        highest_dp_rank=_highest(scrape, 0),
        highest_pp_rank=_highest(scrape, 2),
    )


def _shown_name(name: str) -> str:
    visible = make_visible(name)
    return visible if len(visible) <= MAX_NAME_CHARS else visible[: MAX_NAME_CHARS - 3] + "..."


def _pool_by_dp(scrape: _Scrape) -> tuple[int, ...]:
    """max_total_num_tokens of each DP group, as its lowest rank publishes it; DP0 first."""
    by_rank = scrape.scalars.get("max_total_num_tokens", {})
    per_group: dict[str, tuple[tuple[int, int, int], float]] = {}
    for rank, value in by_rank.items():
        sort_key, group = scrape.ranks[rank]
        held = per_group.get(group)
        if held is None or sort_key < held[0]:
            per_group[group] = (sort_key, value)
    return tuple(round(value) for _, value in sorted(per_group.values()))


def _highest(scrape: _Scrape, part: int) -> int | None:
    """The highest numeric rank label of one kind (0 dp, 1 tp, 2 pp) a read series carried."""
    seen = [key[part] for key, _ in scrape.ranks.values() if 0 <= key[part] < 1 << 30]
    return max(seen) if seen else None


def _read_sample(scrape: _Scrape, line: str) -> tuple[str, dict[str, str], float] | None:
    """Name, labels and value of a series kvtop reads; None for another family or a refusal."""
    brace = line.find("{")
    space = line.find(" ")
    cut = space if brace < 0 or 0 <= space < brace else brace
    if cut < 0:
        cut = line.find("\t")  # the format allows tabs too (prometheus_client writes blanks)
        if cut < 0:
            return None
    name = line[_PREFIX_LEN:cut]
    if "\t" in name:  # a tab before the first blank or brace
        cut = line.index("\t", _PREFIX_LEN)
        name = line[_PREFIX_LEN:cut]
    scrape.families.add(name)
    if name not in _WANTED:
        return None
    labels: dict[str, str]
    if cut != brace and brace >= 0 and not line[cut:brace].strip(" \t"):
        cut = brace  # `name {labels}`: blanks before the labels are allowed too
    if cut == brace:
        parsed = _parse_labels(line, brace)
        if parsed is None:
            scrape.refuse(line, "unreadable labels")
            return None
        labels, pos = parsed
    else:
        labels, pos = {}, cut
    fields = line[pos:].split()
    if not fields:
        scrape.refuse(line, "no value")
        return None
    try:
        value = float(fields[0])
    except ValueError:
        scrape.refuse(line, "not a number")
        return None
    why = _refusal(name, value)
    if why is not None:
        scrape.refuse(line, why)
        return None
    return name, labels, value


def _store(scrape: _Scrape, line: str, name: str, labels: dict[str, str], value: float) -> None:
    rank, sort_key, dp_group = _rank_key(labels)
    model = labels.get("model_name")
    if model and len(scrape.model_names) < MAX_MODEL_NAMES:
        scrape.model_names.add(model)
    if name == _STARTUP_PHASES:
        phase = labels.get("phase", "total")
        scrape.startup[phase] = max(value, scrape.startup.get(phase, value))
        return
    scrape.ranks[rank] = (sort_key, dp_group)
    if name == _CACHE_CONFIG:
        scrape.cache_config[rank] = (labels.get("page_size", ""), labels.get("num_pages", ""))
    elif name == _GRAPH_MEMORY:
        scrape.graph.setdefault(labels.get("phase", "total"), {})[rank] = value
    else:
        by_rank = scrape.scalars.setdefault(name, {})
        earlier = by_rank.get(rank)
        if earlier is not None and earlier != value:
            scrape.refuse(line, f"duplicate series: {earlier:g} replaced by this later value")
        by_rank[rank] = value


def _add_cache_config(scrape: _Scrape) -> None:
    """0.5.10's info gauge carries page size and page count as labels."""
    for rank, (page_size, num_pages) in scrape.cache_config.items():
        for name, label in (("page_size", page_size), ("num_pages", num_pages)):
            try:
                number = float(label)
            except ValueError:
                if label:
                    scrape.refuse(f'sglang:cache_config_info{{{name}="{label}"}}', "not a number")
                continue
            why = _refusal(name, number)
            if why is not None:
                scrape.refuse(f'sglang:cache_config_info{{{name}="{label}"}}', why)
                continue
            scrape.scalars.setdefault(name, {}).setdefault(rank, number)


def _per_rank(scrape: _Scrape) -> dict[str, dict[str, float]]:
    ranks = scrape.ranks
    per_rank: dict[str, dict[str, float]] = {
        rank: {} for rank in sorted(ranks, key=lambda r: ranks[r][0])
    }
    for name, by_rank in scrape.scalars.items():
        for rank, value in by_rank.items():
            per_rank[rank][name] = value
    for by_rank in scrape.graph.values():
        for rank, value in by_rank.items():
            row = per_rank[rank]
            row[_GRAPH_MEMORY] = row.get(_GRAPH_MEMORY, 0.0) + value
    return per_rank


def _deployment_values(scrape: _Scrape, graph_by_phase: dict[str, float]) -> dict[str, float]:
    values: dict[str, float] = {}
    for name, by_rank in scrape.scalars.items():
        aggregated = _aggregate(by_rank, scrape.ranks, _SCALAR_RULES[name])
        if aggregated is not None:
            values[name] = aggregated
    if graph_by_phase:
        values[_GRAPH_MEMORY] = sum(graph_by_phase.values())
    used, total = values.get("num_used_tokens"), values.get("max_total_num_tokens")
    if used is None:
        used = values.get("kv_used_tokens")
    if used is not None and total:
        values["token_usage"] = used / total
    return values


def _refusal(name: str, value: float) -> str | None:
    """Why a gauge value cannot be a real reading, or None when it can."""
    why = refusal(value, MAX_GIB if name.endswith("_gb") else MAX_VALUE)
    if why is None and name in _RATIOS and value > 1:
        return "a ratio above 1"
    return why


def _aggregate(
    by_rank: Mapping[str, float],
    ranks: Mapping[str, tuple[tuple[int, int, int], str]],
    rule: str,
) -> float | None:
    if not by_rank:
        return None
    if rule == _MAX:
        return max(by_rank.values())
    if rule == _MIN:
        return min(by_rank.values())
    # One value per DP group: its lowest (TP, PP) rank; other TP ranks repeat the same pool.
    per_group: dict[str, tuple[tuple[int, int, int], float]] = {}
    for rank, value in by_rank.items():
        sort_key, group = ranks[rank]
        held = per_group.get(group)
        if held is None or sort_key < held[0]:
            per_group[group] = (sort_key, value)
    group_values = [value for _, value in per_group.values()]
    if rule == _SUM:
        return sum(group_values)
    if rule == _MEAN:
        return sum(group_values) / len(group_values)
    return group_values[0]


# --------------------------------------------------------------------------------------------
# /server_info


@dataclass(frozen=True, slots=True)
class MemoryUsage:
    """``internal_states[i].memory_usage`` of one DP group's answering scheduler (GiB)."""

    weight_gib: float | None = None
    kv_cache_gib: float | None = None
    graph_gib: float | None = None
    graph_gib_by_phase: Mapping[str, float] = field(default_factory=dict)
    token_capacity: int | None = None


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What ``/server_info`` (``/get_server_info`` before 0.5) says; wrong types become None."""

    server_args: ServerArgs | None = None
    max_total_num_tokens: int | None = None
    version: str | None = None
    status: str | None = None
    memory_by_dp: tuple[MemoryUsage, ...] = ()
    # The max_running_requests each DP worker runs with (`effective_max_running_requests_per_dp`
    # of its internal state), after SGLang lowered it for the pool: not the argument asked for.
    max_running_requests_by_dp: tuple[int, ...] = ()
    # Values present but refused (wrong type, non-finite, negative, absurd): "key: value (why)".
    rejected: tuple[str, ...] = ()


class _Checker:
    """Reads numbers and strings from the JSON, noting each present value it has to refuse."""

    def __init__(self) -> None:
        self.rejected: list[str] = []

    def refuse(self, where: str, value: object, why: str) -> None:
        if len(self.rejected) < MAX_REJECTED:
            shown = repr(value)
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            self.rejected.append(make_visible(f"{where}: {shown} ({why})"))

    def number(self, where: str, value: object, limit: float = MAX_GIB) -> float | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.refuse(where, value, "not a number")
            return None
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        why = refusal(number, limit)
        if why is None:
            return number
        self.refuse(where, value, why)
        return None

    def count(self, where: str, value: object) -> int | None:
        number = self.number(where, value, MAX_VALUE)
        if number is not None and not number.is_integer():
            self.refuse(where, value, "not a whole number")
            return None
        return None if number is None else int(number)

    def text(self, where: str, value: object) -> str | None:
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            self.refuse(where, value, "not a string")
            return None
        return make_visible(value)


def _memory_usage(data: object, where: str, check: _Checker) -> MemoryUsage | None:
    if data is None:
        return None
    if not isinstance(data, Mapping):
        check.refuse(where, data, "not an object")
        return None
    graph = data.get("graph", data.get("cuda_graph"))
    by_phase: dict[str, float] = {}
    if isinstance(graph, Mapping):
        for phase, gib in graph.items():
            number = check.number(f"{where}.graph.{phase}", gib)
            if isinstance(phase, str) and number is not None:
                by_phase[make_visible(phase)] = number
        graph_gib = sum(by_phase.values()) if by_phase else None
    else:
        graph_gib = check.number(f"{where}.graph", graph)
    return MemoryUsage(
        weight_gib=check.number(f"{where}.weight", data.get("weight")),
        kv_cache_gib=check.number(f"{where}.kvcache", data.get("kvcache")),
        graph_gib=graph_gib,
        graph_gib_by_phase=MappingProxyType(by_phase),
        token_capacity=check.count(f"{where}.token_capacity", data.get("token_capacity")),
    )


_NOT_SERVER_ARGS: Final = frozenset({"internal_states", "scheduler_info"})


def parse_server_info(data: object) -> ServerInfo:
    """Typed view of the ``/server_info`` JSON; never raises on odd shapes or types."""
    if not isinstance(data, Mapping):
        return ServerInfo(rejected=() if data is None else ("body: not a JSON object",))
    check = _Checker()
    # internal_states repeats the server args per DP rank (api_key included): keep it out of
    # ServerArgs.raw, which only drops secrets at the top level.
    top_level = {k: v for k, v in data.items() if k not in _NOT_SERVER_ARGS}
    try:
        server_args = server_args_from_mapping(top_level)
    except Exception:  # a parser bug must not take the scrape down
        server_args = None
    scheduler_info = data.get("scheduler_info")
    max_total = check.count("max_total_num_tokens", data.get("max_total_num_tokens"))
    status = check.text("status", data.get("status"))
    if isinstance(scheduler_info, Mapping):
        if max_total is None:
            max_total = check.count(
                "scheduler_info.max_total_num_tokens", scheduler_info.get("max_total_num_tokens")
            )
        status = status or check.text("scheduler_info.status", scheduler_info.get("status"))
    elif scheduler_info is not None:
        check.refuse("scheduler_info", scheduler_info, "not an object")
    memory: list[MemoryUsage] = []
    running_caps: list[int] = []
    states = data.get("internal_states")
    if isinstance(states, (list, tuple)):
        for i, state in enumerate(states):
            if isinstance(state, Mapping):
                where = f"internal_states[{i}].memory_usage"
                usage = _memory_usage(state.get("memory_usage"), where, check)
                if usage is not None:
                    memory.append(usage)
                cap = check.count(
                    f"internal_states[{i}].effective_max_running_requests_per_dp",
                    state.get("effective_max_running_requests_per_dp"),
                )
                if cap is not None:
                    running_caps.append(cap)
            else:
                check.refuse(f"internal_states[{i}]", state, "not an object")
    elif states is not None:
        check.refuse("internal_states", states, "not a list")
    version = check.text("version", data.get("version"))
    return ServerInfo(
        server_args=server_args,
        max_total_num_tokens=max_total,
        version=version,
        status=status,
        memory_by_dp=tuple(memory),
        max_running_requests_by_dp=tuple(running_caps),
        rejected=tuple(check.rejected),
    )
