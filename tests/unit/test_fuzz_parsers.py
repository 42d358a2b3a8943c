"""Fuzz the three parsers that read text from outside: log lines, /metrics, /server_info.

Bounded for CI: a fixed number of examples per test, no deadline (a slow CI machine must not
fail a test), and derandomized so a run is repeatable; the whole file takes a few seconds.
Properties: never raises; every number is finite (or None); no raw control character survives
in any text field; every refusal is a non-empty, visible sentence.
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtop.sglang.log_line import parse_line
from kvtop.sglang.metrics import parse_exposition, parse_server_info
from tests.support.parser_checks import check_event, check_server_args, check_text

FUZZ = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Pieces of real lines (tests/corpus and the spec), recombined with hostile ones.
LINE_PIECES = [
    "[2026-02-27 09:05:51 TP0] ",
    "[2026-02-27 09:05:51.123 DP1 TP3 EP3] ",
    "[2026-13-45 99:99:99 ATTN_CP5 TP5] ",
    "Load weight begin. avail mem=",
    "Load weight end. type=X, dtype=torch.bfloat16, avail mem=",
    ", mem usage=",
    "KV Cache is allocated. #tokens: ",
    ", KV size: ",
    ", K size: ",
    ", V size: ",
    "Memory pool end. avail mem=",
    "Capture cuda graph end. Time elapsed: ",
    "Capture target verify CUDA graph end. bs=[1, 2], elapsed=",
    "max_total_num_tokens=",
    ", context_len=",
    ", available_gpu_mem=",
    "Allocating hierarchical KV host pool: ",
    " tokens, ",
    "Decode batch, #running-req: ",
    ", #token: ",
    ", token usage: ",
    ", gen throughput (token/s): ",
    ", cache hit rate: ",
    "Capturing batches (bs=",
    " avail_mem=",
    "server_args=ServerArgs(mem_fraction_static=",
    "server_args={'mem_fraction_static': ",
    "Scheduler hit an exception: ",
    "Not enough memory. Please try to increase --mem-fraction-static. mem_fraction_static=",
    " GB",
    " s",
    ")",
    "}",
    "\r",
    "\x1b[2J",
    "\x1b]0;t\x07",
    "\x9b",
    "[bold]",
    "\x00",
]
NUMBERS = [
    "nan",
    "NaN",
    "inf",
    "-inf",
    "1e309",
    "-3.00",
    "0",
    "11.18",
    "1" + "0" * 30,
    "9" * 40,
    "1e30",
    "-1",
    "",
    ".",
    "1e",
    "0x10",
    "1_000",
]

line_texts = st.lists(
    st.one_of(st.sampled_from(LINE_PIECES), st.sampled_from(NUMBERS), st.text(max_size=12)),
    max_size=14,
).map("".join)


@FUZZ
@given(line_texts)
def test_fuzz_parse_line_text(line: str) -> None:
    check_event(parse_line(line))


# Arbitrary bytes, alone and after a prefix: real ones, and test_hostile_input.py's plain TP0.
@FUZZ
@given(st.binary(max_size=400), st.sampled_from([*LINE_PIECES[:3], "[2026-01-01 00:00:00 TP0] "]))
def test_fuzz_parse_line_bytes(data: bytes, prefix: str) -> None:
    check_event(parse_line(data))
    check_event(parse_line(prefix.encode() + data))


# /metrics: lines in the exposition's shape with hostile names, labels and values.
FAMILIES = [
    "max_total_num_tokens",
    "num_used_tokens",
    "token_usage",
    "num_running_reqs",
    "gen_throughput",
    "cache_hit_rate",
    "kv_cache_memory_usage_gb",
    "graph_memory_usage_gb",
    "startup_time_seconds",
    "cache_config_info",
    "page_size",
    "unknown_family",
]
label_values = st.one_of(
    st.sampled_from(["0", "1", "7", "-1", "x", "\x1b[31m", "[red]", "99999999999999999999"]),
    st.text(max_size=10),
)
labels = st.dictionaries(
    st.sampled_from(["tp_rank", "dp_rank", "pp_rank", "phase", "model_name", "page_size"]),
    label_values,
    max_size=4,
).map(lambda d: "{" + ",".join(f'{k}="{v}"' for k, v in d.items()) + "}" if d else "")
sample_values = st.one_of(
    st.sampled_from(["NaN", "+Inf", "-Inf", "-5", "1e30", "0.41", "159277", "twelve", ""]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)
exposition_lines = st.one_of(
    st.builds(
        lambda name, lab, value, tail: f"sglang:{name}{lab} {value}{tail}",
        st.sampled_from(FAMILIES),
        labels,
        sample_values,
        st.sampled_from(["", " 1700000000000", "\r", " # comment"]),
    ),
    st.sampled_from(["# TYPE sglang:token_usage gauge", "# HELP x", "sglang:", "sglang:x{", ""]),
    st.text(max_size=40),
)


@FUZZ
@given(st.lists(exposition_lines, max_size=25), st.sampled_from(["\n", "\r\n"]))
def test_fuzz_parse_exposition(lines: list[str], newline: str) -> None:
    sample = parse_exposition(newline.join(lines))
    for value in sample.values.values():
        assert math.isfinite(value) and value >= 0
    for rank, values in sample.per_rank.items():
        check_text(rank)
        for value in values.values():
            assert math.isfinite(value)
    for refusal in sample.rejected:
        check_text(refusal)
    assert sample.rejected_count >= len(sample.rejected)
    if sample.max_total_num_tokens is not None:
        assert 0 <= sample.max_total_num_tokens <= 10**15


# /server_info: any JSON value, with the real keys more likely than not.
json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["\x1b[2J", "[bold]x[/]", "0.88", "ready"]),
)
json_values = st.recursive(
    json_leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.one_of(
                st.sampled_from(
                    [
                        "memory_usage",
                        "weight",
                        "kvcache",
                        "graph",
                        "token_capacity",
                        "max_total_num_tokens",
                        "status",
                        "version",
                        "internal_states",
                        "scheduler_info",
                        "mem_fraction_static",
                        "tp_size",
                        "model_path",
                    ]
                ),
                st.text(max_size=6),
            ),
            children,
            max_size=5,
        ),
    ),
    max_leaves=25,
)


@FUZZ
@given(json_values)
def test_fuzz_parse_server_info(data: object) -> None:
    info = parse_server_info(data)
    for text in (info.version, info.status):
        if text is not None:
            check_text(text)
    if info.max_total_num_tokens is not None:
        assert 0 <= info.max_total_num_tokens <= 10**15
    for usage in info.memory_by_dp:
        for value in (usage.weight_gib, usage.kv_cache_gib, usage.graph_gib):
            assert value is None or (math.isfinite(value) and value >= 0)
        for phase in usage.graph_gib_by_phase:
            check_text(phase)
    for refusal in info.rejected:
        check_text(refusal)
    if info.server_args is not None:
        check_server_args(info.server_args)
