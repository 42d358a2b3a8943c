"""parse_exposition against prometheus_client's parser as the oracle, on generated expositions.

Hypothesis writes expositions in SGLang's shapes (gauges kvtop reads, per-phase gauges, counters
with `_total`, histograms with `le` buckets; labels model_name, engine_type, dp/tp/pp ranks and
phases, label values with escaped backslashes, quotes and newlines; integers, floats, exponents,
±Inf and NaN; optional timestamps; HELP and TYPE lines; blanks or tabs between tokens). Both
parsers read each one, and kvtop's result must be what prometheus_client's samples say: the
same number of families, the same label values (phases, ranks), the same numbers per series,
and a refusal for exactly the samples that cannot be a reading (NaN, ±Inf, negative).

Bounded like tests/unit/test_fuzz_parsers.py: derandomized, a fixed number of examples, no deadline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from kvtop.sglang.metrics import parse_exposition

ORACLE = settings(
    max_examples=250,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

RATIOS = ["token_usage", "cache_hit_rate"]
COUNTS = ["num_running_reqs", "num_queue_reqs", "max_total_num_tokens", "num_used_tokens"]
SIZES = ["weight_memory_usage_gb", "gen_throughput"]
PHASED = ["graph_memory_usage_gb", "startup_time_seconds"]  # one series per {phase}
IGNORED_GAUGES = ["num_grammar_queue_reqs", "is_cuda_graph"]  # gauges kvtop does not read
COUNTERS = ["prompt_tokens", "generation_tokens", "num_requests"]
HISTOGRAMS = ["e2e_request_latency_seconds", "time_to_first_token_seconds"]
BUCKETS = ["0.1", "0.25", "1.0", "2.5", "10.0", "+Inf"]

# Label values: what model names and phases look like, plus every escape the format has.
label_text = st.text(
    alphabet=st.sampled_from(list('abcXYZ019-_./:, {}="\\\n#')), min_size=0, max_size=12
)


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@st.composite
def number(draw: st.DrawFn, low: float, high: float) -> tuple[str, float]:
    """(text as a server could write it, its value)."""
    kind = draw(st.sampled_from(["int", "repr", "exp", "EXP", "special", "negative"]))
    if kind == "int":
        value = float(draw(st.integers(int(low), int(high))))
        return str(int(value)), value
    if kind == "special":
        text = draw(st.sampled_from(["+Inf", "-Inf", "NaN"]))
        return text, float(text)
    value = draw(st.floats(low, high, allow_nan=False, allow_infinity=False))
    if kind == "negative":
        value = -value - 1.0
    text = {"repr": repr(value), "exp": f"{value:e}", "EXP": f"{value:E}"}.get(kind, repr(value))
    return text, float(text)


@dataclass
class Series:
    name: str  # as written, "sglang:..."
    labels: dict[str, str]
    text: str  # the value as written


@st.composite
def rank_labels(draw: st.DrawFn, count: int) -> list[dict[str, str]]:
    """`count` distinct rank label sets in SGLang's style (dp_rank only with DP attention)."""
    with_dp = draw(st.booleans())
    ranks = draw(
        st.lists(
            st.tuples(st.integers(0, 3), st.integers(0, 7), st.integers(0, 1)),
            min_size=count,
            max_size=count,
            unique=True,
        )
    )
    model = draw(label_text)
    out = []
    for dp, tp, pp in ranks:
        labels = {"model_name": model, "engine_type": "unified", "tp_rank": str(tp)}
        labels["pp_rank"] = str(pp)
        if with_dp:
            labels["dp_rank"] = str(dp)
        out.append(labels)
    if not with_dp:  # without dp_rank two entries may now share (tp, pp): keep the first
        unique: dict[tuple[str, str], dict[str, str]] = {}
        for labels in out:
            unique.setdefault((labels["tp_rank"], labels["pp_rank"]), labels)
        out = list(unique.values())
    order = draw(st.permutations(out))
    return [dict(draw(st.permutations(list(labels.items())))) for labels in order]


@st.composite
def family(draw: st.DrawFn) -> tuple[str, str, list[Series], str]:
    """(kind of family, its name without sglang:, the series, HELP text)."""
    short = draw(
        st.sampled_from(RATIOS + COUNTS + SIZES + PHASED + IGNORED_GAUGES + COUNTERS + HISTOGRAMS)
    )
    ranks = draw(rank_labels(draw(st.integers(1, 4))))
    series: list[Series] = []
    if short in HISTOGRAMS:
        kind = "histogram"
        for labels in ranks:
            count = 0
            for le in BUCKETS:
                count += draw(st.integers(0, 5))
                series.append(Series(f"sglang:{short}_bucket", {**labels, "le": le}, str(count)))
            series.append(Series(f"sglang:{short}_sum", labels, repr(count * 0.37)))
            series.append(Series(f"sglang:{short}_count", labels, f"{count}.0"))
    elif short in COUNTERS:
        kind = "counter"
        for labels in ranks:
            text, _ = draw(number(0, 1e9))
            series.append(Series(f"sglang:{short}_total", labels, text))
    else:
        kind = "gauge"
        high = 1.0 if short in RATIOS else 1e5
        phases = draw(st.lists(label_text, min_size=1, max_size=3, unique=True))
        for labels in ranks:
            for phase in phases if short in PHASED else [None]:
                text, _ = draw(number(0, high))
                full = labels if phase is None else {**labels, "phase": phase}
                series.append(Series(f"sglang:{short}", full, text))
    return kind, short, series, draw(label_text)


@st.composite
def exposition(draw: st.DrawFn) -> str:
    families = draw(st.lists(family(), min_size=1, max_size=6, unique_by=lambda f: f[1]))
    typed = draw(st.booleans())  # prometheus_client always writes HELP/TYPE; others may not
    lines: list[str] = []
    for kind, short, series, help_text in families:
        if typed:
            written = f"sglang:{short}_total" if kind == "counter" else f"sglang:{short}"
            help_line = help_text.replace("\\", "\\\\").replace("\n", "\\n")
            lines.append(f"# HELP {written} {help_line}")
            lines.append(f"# TYPE {written} {kind}")
        for s in series:
            blank = draw(st.sampled_from([" ", "\t", "  "]))
            before_labels = draw(st.sampled_from(["", "", " "]))
            pairs = ",".join(f'{k}="{escape(v)}"' for k, v in s.labels.items())
            trailing = draw(st.sampled_from(["", "", ","])) if pairs else ""
            line = f"{s.name}{before_labels}{{{pairs}{trailing}}}{blank}{s.text}"
            if draw(st.booleans()):
                line += f"{blank}{draw(st.integers(1_600_000_000_000, 1_900_000_000_000))}"
            lines.append(line)
    if not typed:
        # Without TYPE lines each distinct sample name is a family: histograms' _bucket, _sum
        # and _count lines are three. Keep one name per family so both parsers agree on counts.
        lines = [
            line
            for line in lines
            if not line.startswith(
                tuple(f"sglang:{h}_{end}" for h in HISTOGRAMS for end in ("sum", "count"))
            )
        ]
    return "\n".join(lines) + "\n"


def rank_of(labels: dict[str, str]) -> str:
    """SGLang's rank as kvtop names it (as SGLang's log prefix): DP, TP, then PP when not 0."""
    parts = []
    if "dp_rank" in labels:
        parts.append(f"DP{labels['dp_rank']}")
    if "tp_rank" in labels:
        parts.append(f"TP{labels['tp_rank']}")
    if labels.get("pp_rank", "0") != "0":
        parts.append(f"PP{labels['pp_rank']}")
    return " ".join(parts) or "all"


def readable(value: float) -> bool:
    return math.isfinite(value) and value >= 0


@ORACLE
@given(exposition())
def test_parse_exposition_agrees_with_prometheus_client(text: str) -> None:
    families = [f for f in text_string_to_metric_families(text) if f.name.startswith("sglang:")]
    ours = parse_exposition(text)

    # prometheus_client makes each untyped sample a family of its own: count names.
    assert ours.families_seen == len({f.name for f in families}), text
    samples: dict[str, list[Sample]] = {}
    for fam in families:
        samples.setdefault(fam.name, []).extend(fam.samples)
    read = {f"sglang:{n}" for n in RATIOS + COUNTS + SIZES + PHASED}
    expected_refusals = 0
    for name, series in samples.items():
        if name not in read:
            continue
        short = name.removeprefix("sglang:")
        expected_refusals += sum(not readable(s.value) for s in series)
        kept = [s for s in series if readable(s.value)]
        if short == "startup_time_seconds":
            want: dict[str, float] = {}
            for s in kept:
                phase = s.labels["phase"]
                want[phase] = max(want.get(phase, s.value), s.value)
            assert dict(ours.startup_seconds_by_phase) == want, text
        elif short == "graph_memory_usage_gb":
            by_phase: dict[str, float] = {}
            by_rank: dict[str, float] = {}
            for s in kept:
                phase = s.labels["phase"]
                by_phase[phase] = max(by_phase.get(phase, s.value), s.value)
                rank = rank_of(s.labels)
                by_rank[rank] = by_rank.get(rank, 0.0) + s.value
            assert dict(ours.graph_memory_gib_by_phase) == by_phase, text
            got = {r: v[short] for r, v in ours.per_rank.items() if short in v}
            assert got.keys() == by_rank.keys(), text
            for rank, value in by_rank.items():
                assert math.isclose(got[rank], value, rel_tol=1e-12), (rank, text)
        else:
            want = {rank_of(s.labels): float(s.value) for s in kept}
            got = {r: v[short] for r, v in ours.per_rank.items() if short in v}
            assert got == want, text
    for short in RATIOS + COUNTS + SIZES:
        if f"sglang:{short}" not in samples:
            assert all(short not in v for v in ours.per_rank.values()), text
    assert ours.rejected_count == expected_refusals, (ours.rejected, text)
    assert all(math.isfinite(v) for v in ours.values.values())
