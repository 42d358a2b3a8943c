"""Hostile and malformed log input: parsing, folding and reporting never raise.

Whatever a log holds (bad bytes, NULs, megabyte lines, nan/inf, lines cut mid-number, tqdm
redraws, Rich markup), `parse_line` returns an event or None, `fold_lines` folds it, and the
report builds, serialises to strict JSON (no NaN/Infinity) and renders.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from kvtop.model.analysis import analyse
from kvtop.report.json_report import to_json
from kvtop.report.text import print_snapshot
from kvtop.sglang import events as ev
from kvtop.sglang.log_line import MAX_LINE_CHARS, parse_line
from kvtop.sglang.metrics import parse_exposition
from kvtop.sglang.story import fold_lines
from tests.support.logs import log_dated_now
from tests.support.parser_checks import check_event
from tests.support.paths import ROOT, STORY_LOG
from tests.support.tui_support import analysis_snapshot

HOSTILE = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
STORIES = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

P0 = "[2026-01-01 00:00:00 TP0] "


def _report_everything(lines: Iterable[str | bytes], **options: object) -> dict[str, object]:
    """fold -> build -> strict JSON -> text render; returns the JSON dict."""
    tracker = fold_lines(lines)
    report = analyse(tracker, "hostile.log", **options)  # type: ignore[arg-type]
    data = to_json(report)
    text = json.dumps(data, allow_nan=False)  # raises ValueError on NaN / Infinity
    assert json.loads(text)["schema"] == "kvtop/1"
    out = io.StringIO()
    console = Console(file=out, width=120, highlight=False, soft_wrap=False)
    print_snapshot(analysis_snapshot(report), console)
    assert "kvtop report" in out.getvalue()
    return data


# --------------------------------------------------------------------------- arbitrary input


@HOSTILE
@given(st.text(max_size=400))
def test_parse_line_arbitrary_text(text: str) -> None:
    check_event(parse_line(text))
    check_event(parse_line(P0 + text))
    check_event(parse_line(text + P0 + text))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=120), st.binary(max_size=120)), max_size=30))
def test_report_from_arbitrary_lines(lines: list[str | bytes]) -> None:
    _report_everything(lines)


# --------------------------------------------------------------------------- SGLang-like fragments

NUMBERS = st.one_of(
    st.sampled_from(
        [
            "nan",
            "NaN",
            "inf",
            "-inf",
            "+inf",
            "-3.0",
            "-3.00",
            "1e309",
            "-1e309",
            "1e-320",
            "",
            "0",
            "0.0",
            "-0",
            ".5",
            "11.",
            "11.18",
            "93.17",
            "21.60",
            "99999999999999999999999999999999",
            "1_000",
            "GB",
        ]
    ),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.floats(min_value=-200, max_value=200).map(lambda x: f"{x:.2f}"),
)
INTS = st.one_of(
    st.sampled_from(["0", "-1", "1", "", "159277", "9" * 40, "nan", "1e3", "12.5"]),
    st.integers(min_value=-(10**12), max_value=10**12).map(str),
)
PREFIXES = st.one_of(
    st.just(""),
    st.sampled_from(
        [
            "[2026-02-27 09:02:05] ",
            "[2026-02-27 09:02:05.123 DP0 TP0 EP0] ",
            "[2026-13-45 99:99:99 TP0] ",
            "[2026-02-27 09:02:05 DP1 PP0 ATTN_CP0 MOE_DP0 TP1 EP1] ",
            "host python3[123]: [2026-02-27 09:02:05 TP2] ",
            "Capturing batches (bs=4 avail_mem=9.50 GB):  50%|█████     | 2/4 [00:01<00:01]",
        ]
    ),
    st.builds(
        lambda tags, sec: f"[2026-02-27 09:02:{sec:02d} {tags}] ",
        st.lists(
            st.builds(
                "{}{}".format,
                st.sampled_from(["TP", "DP", "EP", "PP", "ATTN_CP", "MOE_DP"]),
                st.integers(0, 9),
            ),
            max_size=4,
        ).map(" ".join),
        st.integers(0, 99),
    ),
)
TEMPLATES = [
    "Init torch distributed begin.",
    "Init torch distributed ends. mem usage={n} GB",
    "Init parallel ends. elapsed={n} s, mem usage={n} GB",
    "Memory baseline taken. mem usage={n} GB",
    "Load weight begin. avail mem={n} GB",
    "Load weight end. type=KimiK25ForConditionalGeneration, dtype=torch.bfloat16, avail mem={n} GB, mem usage={n} GB.",
    "Load weight end. elapsed={n} s, type=LlamaForCausalLMEagle3, quant=fp8, avail mem={n} GB, mem usage={n} GB.",
    "Using KV cache dtype: torch.float8_e4m3fn",
    "KV Cache is allocated. #tokens: {i}, KV size: {n} GB",
    "KV Cache is allocated. #tokens: {i}, K size: {n} GB, V size: {n} GB",
    "SWA KV Cache is allocated. #tokens: {i}, K size: {n} GB, V size: {n} GB",
    "Post-capture KV sizing: #tokens: {i}, KV size: {n} GB, avail mem={n} GB",
    "Mamba Cache is allocated. max_mamba_cache_size: {i}, conv_state size: {n}GB, ssm_state size: {n}GB",
    "SWAKVPool mem usage: {n} GB, swa size: {i}, full size: {i}",
    "Use sliding window memory pool. full_layer_tokens={i}, swa_layer_tokens={i}",
    "Memory pool end. avail mem={n} GB",
    "Capture cuda graph begin. This can take up to several minutes. avail mem={n} GB",
    "Capture cuda graph end. Time elapsed: {n} s. mem usage={n} GB. avail mem={n} GB.",
    "Capture draft cuda graph begin. avail mem={n} GB",
    "Capture draft extend cuda graph end. Time elapsed: {n} s. mem usage={n} GB. avail mem={n} GB.",
    "Capture piecewise CUDA graph end. Time elapsed: {n} s. mem usage={n} GB. avail mem={n} GB.",
    "Capture cuda graph bs [1, 2, {i}, 8]",
    "Capture cuda graph failed: boom",
    "Capturing batches (bs={i} avail_mem={n} GB):  10%|",
    "max_total_num_tokens={i}, chunked_prefill_size={i}, max_prefill_tokens={i}, max_running_requests={i}, context_len={i}, available_gpu_mem={n} GB",
    "max_total_tokens={i} is larger than the profiled value {i}. The profiled value will be used.",
    "Max running requests is reset to {i}",
    "Allocating {n} GB host memory for hierarchical KV cache.",
    "Allocating hierarchical KV host pool: {i} tokens, {n} GB host memory",
    "HiCache memory headroom: host {n} GiB, cgroup {n} GiB",
    "server_args=ServerArgs(model_path='moonshotai/Kimi-K2.5', tp_size={i}, dp_size={i}, page_size={i}, mem_fraction_static={n}, context_length={i}, speculative_algorithm='EAGLE3', enable_hierarchical_cache=True, hicache_ratio={n}, enable_dp_attention=True, max_total_tokens={i})",
    "server_args={{'model_path': '/nonexistent/model', 'mem_fraction_static': {n}, 'tp_size': {i}}}",
    "Decode batch. #running-req: {i}, #token: {i}, token usage: {n}, accept len: {n}, cuda graph: True, gen throughput (token/s): {n}, #queue-req: {i}, ",
    "Prefill batch. #new-seq: {i}, #new-token: {i}, #cached-token: {i}, token usage: {n}, #running-req: {i}, #queue-req: {i}, ",
    "Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static={n}",
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static above {n}",
    "Not enough host memory available. Requesting {n} GB but only have {n} GB free.",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {n} GiB.",
    "Scheduler hit an exception: [bold]boom[/] [red]x",
    "The memory capacity is unbalanced. Some GPUs may be occupied by other processes. min_per_gpu_memory={n}",
    "The server is fired up and ready to roll!",
    "Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
]


@st.composite
def sglang_lines(draw: st.DrawFn) -> str:
    template = draw(st.sampled_from(TEMPLATES))
    numbers = iter(draw(st.lists(NUMBERS, min_size=8, max_size=8)))
    ints = iter(draw(st.lists(INTS, min_size=8, max_size=8)))
    # Each {n} / {i} gets its own value.
    parts = template.replace("{{", "\x01").replace("}}", "\x02").split("{")
    body = parts[0]
    for part in parts[1:]:
        key, rest = part[0], part[2:]
        body += (next(numbers) if key == "n" else next(ints)) + rest
    body = body.replace("\x01", "{").replace("\x02", "}")
    line = draw(PREFIXES) + body
    mode = draw(st.sampled_from(["whole", "whole", "whole", "cut", "glue", "redraw", "crlf"]))
    if mode == "cut":
        line = line[: draw(st.integers(0, len(line)))]
    elif mode == "glue":
        line += draw(st.text(max_size=20))
    elif mode == "redraw":
        line = "Capturing batches (bs=8 avail_mem=9.50 GB):  10%|\r" + line
    elif mode == "crlf":
        line += "\r\n"
    return line


@STORIES
@given(
    st.lists(sglang_lines(), max_size=60),
    st.lists(st.floats(min_value=0.01, max_value=0.99), max_size=3),
    st.one_of(st.none(), st.integers(min_value=1, max_value=10**9)),
)
def test_sglang_like_fragments_never_break_the_report(
    lines: list[str], what_if: list[float], request_len: int | None
) -> None:
    for line in lines:
        check_event(parse_line(line))
    _report_everything(lines, what_if_mfs=what_if, request_len=request_len)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(sglang_lines(), max_size=40))
def test_sglang_like_fragments_as_bytes(lines: list[str]) -> None:
    _report_everything([line.encode("utf-8", errors="surrogatepass") for line in lines])


def _story(**numbers: str) -> list[str]:
    """A one-rank startup whose numbers can be replaced by hostile ones."""
    n = {
        "mfs": "0.88",
        "pre": "93.17",
        "post": "21.60",
        "weights": "71.57",
        "tokens": "159277",
        "kv": "10.42",
        "pool": "11.18",
        "graph_before": "11.12",
        "graph_after": "9.41",
        "graph_usage": "1.71",
        "free": "7.40",
        "tp": "1",
        "page": "1",
        "context": "262144",
        **numbers,
    }
    return [
        "[2026-02-27 09:02:05] server_args=ServerArgs(model_path='/nonexistent/kimi', "
        f"tp_size={n['tp']}, page_size={n['page']}, mem_fraction_static={n['mfs']}, "
        f"context_length={n['context']})",
        f"[2026-02-27 09:02:10 TP0] Load weight begin. avail mem={n['pre']} GB",
        "[2026-02-27 09:05:49 TP0] Load weight end. type=KimiK25ForConditionalGeneration, "
        f"dtype=torch.bfloat16, avail mem={n['post']} GB, mem usage={n['weights']} GB.",
        f"[2026-02-27 09:05:50 TP0] KV Cache is allocated. #tokens: {n['tokens']}, "
        f"KV size: {n['kv']} GB",
        f"[2026-02-27 09:05:51 TP0] Memory pool end. avail mem={n['pool']} GB",
        "[2026-02-27 09:05:52 TP0] Capture cuda graph begin. This can take up to several "
        f"minutes. avail mem={n['graph_before']} GB",
        "[2026-02-27 09:05:59 TP0] Capture cuda graph end. Time elapsed: 6.83 s. "
        f"mem usage={n['graph_usage']} GB. avail mem={n['graph_after']} GB.",
        f"[2026-02-27 09:06:12 TP0] max_total_num_tokens={n['tokens']}, "
        "chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=48, "
        f"context_len={n['context']}, available_gpu_mem={n['free']} GB",
        "[2026-02-27 09:06:31] The server is fired up and ready to roll!",
    ]


@STORIES
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "mfs",
                "pre",
                "post",
                "weights",
                "tokens",
                "kv",
                "pool",
                "graph_before",
                "graph_after",
                "graph_usage",
                "free",
                "tp",
                "page",
                "context",
            ]
        ),
        st.one_of(NUMBERS, INTS),
        max_size=6,
    ),
    st.lists(st.floats(min_value=0.01, max_value=0.99), max_size=2),
    st.one_of(st.none(), st.integers(min_value=1, max_value=10**12)),
)
def test_complete_story_with_hostile_numbers(
    numbers: dict[str, str], what_if: list[float], request_len: int | None
) -> None:
    _report_everything(_story(**numbers), what_if_mfs=what_if, request_len=request_len)


@pytest.mark.parametrize(
    "numbers",
    [
        {},
        {"mfs": "0"},
        {"mfs": "1"},
        {"mfs": "1.5"},
        {"mfs": "-0.5"},
        {"mfs": "nan"},
        {"pre": "0", "post": "0"},
        {"pre": "0"},
        {"post": "0"},
        {"tokens": "0"},
        {"kv": "0"},
        {"tokens": "0", "kv": "0"},
        {"tokens": "-1", "kv": "-3.0"},
        {"pre": "1e309", "post": "inf", "kv": "nan"},
        {"pre": "-3.0", "post": "-3.0", "weights": "-3.0"},
        {"pre": "1e300", "post": "1e-300", "kv": "1e300", "tokens": "1"},
        {"tokens": "9" * 40},
    ],
)
@pytest.mark.parametrize("what_if", [(), (0.5, 0.9, 0.99)])
@pytest.mark.parametrize("request_len", [None, 1, 32768, 10**15])
def test_complete_story_edge_numbers(
    numbers: dict[str, str], what_if: tuple[float, ...], request_len: int | None
) -> None:
    _report_everything(_story(**numbers), what_if_mfs=what_if, request_len=request_len)


def test_unmodified_story_reports_the_logged_numbers() -> None:
    data = _report_everything(_story())
    assert data["summary"]["max_total_num_tokens"] == 159277  # type: ignore[index]
    assert data["ranks"][0]["target"]["avail_after_pool_gib"] == 11.18  # type: ignore[index]


# --------------------------------------------------------------------------- explicit cases


def test_invalid_utf8_bytes() -> None:
    event = parse_line(b"\xff\xfe[2026-01-01 00:00:00 TP0] Memory pool end. avail mem=11.18 GB\xc3")
    assert isinstance(event, ev.MemoryPoolEnd)
    assert event.avail_gib == 11.18
    assert event.prefix.rank == "TP0"
    assert parse_line(b"\xff\xfe\xfd\x80\x81") is None
    check_event(parse_line(b"\xc3\x28 Load weight \xa0\xa1"))


def test_nul_at_end_of_line() -> None:
    event = parse_line(b"[2026-01-01 00:00:00 TP0] Memory pool end. avail mem=11.18 GB\x00")
    assert isinstance(event, ev.MemoryPoolEnd)
    assert event.avail_gib == 11.18


def test_nul_inside_line() -> None:
    event = parse_line(b"[2026-01-01 00:00:00 TP0] Memory pool\x00 end. avail mem=11.\x0018 GB")
    assert isinstance(event, ev.MemoryPoolEnd)
    assert event.avail_gib == 11.18
    assert "\x00" not in event.message


def test_nul_only_lines() -> None:
    assert parse_line(b"\x00" * 1000) is None
    assert parse_line("\x00\r\n") is None


def test_megabyte_line_without_prefix() -> None:
    assert parse_line("x" * (1 << 20)) is None
    check_event(parse_line("Load weight end. " + "a" * (1 << 20)))


def test_megabyte_line_with_prefix() -> None:
    check_event(parse_line(P0 + "x" * (1 << 20)))
    check_event(parse_line(P0 + "Decode batch. " + "#token: 1, " * 100_000))
    check_event(parse_line(P0 + "server_args=ServerArgs(" + "a=1, " * 200_000))
    check_event(parse_line(P0 + "Memory pool end. avail mem=" + "1" * (1 << 20)))
    check_event(parse_line("[" * (1 << 20)))
    check_event(parse_line(P0 * 40_000))


def test_megabyte_line_keeps_a_leading_event() -> None:
    event = parse_line(P0 + "Memory pool end. avail mem=11.18 GB " + "x" * (1 << 20))
    assert isinstance(event, ev.MemoryPoolEnd)
    assert event.avail_gib == 11.18


def test_line_over_the_cap_is_cut_not_rejected() -> None:
    line = P0 + "Memory pool end. avail mem=11.18 GB" + " " * (MAX_LINE_CHARS * 2)
    event = parse_line(line)
    assert isinstance(event, ev.MemoryPoolEnd)
    assert len(event.message) <= MAX_LINE_CHARS


def test_megabyte_lines_through_the_report() -> None:
    lines = [P0 + "x" * (1 << 20), "y" * (1 << 20), *_story()]
    data = _report_everything(lines)
    assert data["summary"]["max_total_num_tokens"] == 159277  # type: ignore[index]


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e309"])
def test_non_finite_avail_is_none(value: str) -> None:
    event = parse_line(f"{P0}Memory pool end. avail mem={value} GB")
    assert isinstance(event, ev.MemoryPoolEnd)
    assert event.avail_gib is None


def test_negative_mem_usage_is_kept() -> None:
    event = parse_line(f"{P0}Init torch distributed ends. mem usage=-3.00 GB")
    assert isinstance(event, ev.InitEnd)
    assert event.mem_usage_gib == -3.0
    event = parse_line(
        f"{P0}Load weight end. type=X, dtype=torch.bfloat16, avail mem=21.60 GB, mem usage=-3.00 GB."
    )
    assert isinstance(event, ev.LoadWeightEnd)
    assert event.mem_usage_gib == -3.0
    assert event.avail_gib == 21.6


@pytest.mark.parametrize(
    "tail",
    ["avail mem=11.", "avail mem=11. GB", "avail mem=11", "avail mem=1", "avail mem=", "avail m"],
)
def test_line_cut_in_the_middle_of_a_number(tail: str) -> None:
    event = parse_line(f"{P0}Memory pool end. {tail}")
    assert isinstance(event, ev.MemoryPoolEnd)
    assert event.avail_gib in (None, 11.0, 1.0)


def test_every_truncation_of_real_lines() -> None:
    lines = [
        f"{P0}Load weight end. type=KimiK25ForConditionalGeneration, dtype=torch.bfloat16, "
        "avail mem=21.60 GB, mem usage=71.57 GB.",
        f"{P0}KV Cache is allocated. #tokens: 159277, K size: 5.21 GB, V size: 5.21 GB",
        f"{P0}Capture cuda graph end. Time elapsed: 6.83 s. mem usage=1.71 GB. avail mem=9.41 GB.",
        "[2026-02-27 09:06:12] max_total_num_tokens=159277, chunked_prefill_size=8192, "
        "max_prefill_tokens=16384, max_running_requests=48, context_len=262144, "
        "available_gpu_mem=7.40 GB",
        f"{P0}Allocating hierarchical KV host pool: 637109 tokens, 44.77 GB host memory",
        "[2026-02-27 09:02:05] server_args=ServerArgs(model_path='m', tp_size=8, "
        "mem_fraction_static=0.88, page_size=1)",
    ]
    for line in lines:
        for end in range(len(line) + 1):
            check_event(parse_line(line[:end]))
            check_event(parse_line(line[:end].encode()[: end + 3]))


def test_crlf_line_endings() -> None:
    event = parse_line(f"{P0}Memory pool end. avail mem=11.18 GB\r\n")
    assert isinstance(event, ev.MemoryPoolEnd)
    assert event.avail_gib == 11.18
    assert not event.message.endswith(("\r", "\n"))
    event = parse_line(f"{P0}Memory pool end. avail mem=11.18 GB\r\n".encode())
    assert isinstance(event, ev.MemoryPoolEnd)
    assert event.avail_gib == 11.18


def test_crlf_log_through_the_report() -> None:
    crlf = [line + "\r\n" for line in _story()]
    assert _report_everything(crlf) == _report_everything(_story())


def test_tqdm_redraws_give_the_last_values() -> None:
    event = parse_line(
        "Capturing batches (bs=8 avail_mem=9.50 GB):  10%|\r"
        "Capturing batches (bs=1 avail_mem=9.45 GB): 100%|"
    )
    assert isinstance(event, ev.GraphCaptureProgress)
    assert event.bs == 1
    assert event.avail_gib == 9.45


def test_tqdm_redraws_with_trailing_carriage_return() -> None:
    event = parse_line(
        "Capturing batches (bs=8 avail_mem=9.50 GB):  10%|\r"
        "Capturing batches (bs=1 avail_mem=9.45 GB): 100%|\r\r  \r"
    )
    assert isinstance(event, ev.GraphCaptureProgress)
    assert (event.bs, event.avail_gib) == (1, 9.45)


def test_only_carriage_returns() -> None:
    assert parse_line("\r\r\r") is None
    assert parse_line("\r \r\n") is None


def test_prefix_glued_after_tqdm_text() -> None:
    event = parse_line(
        "Capturing batches (bs=1 avail_mem=9.45 GB): 100%|██████████| 10/10 [00:03<00:00,  "
        "3.1it/s][2026-02-27 09:05:59 TP5] Capture cuda graph end. Time elapsed: 6.88 s. "
        "mem usage=1.71 GB. avail mem=9.45 GB."
    )
    assert isinstance(event, ev.GraphCaptureEnd)
    assert event.prefix.rank == "TP5"
    assert event.prefix.tp == 5
    assert event.avail_gib == 9.45
    assert event.mem_usage_gib == 1.71


def test_two_log_lines_glued_keep_the_first() -> None:
    event = parse_line(
        "[2026-01-01 00:00:00 TP0] Load weight begin. avail mem=93.17 GB"
        "[2026-01-01 00:00:01 TP1] Memory pool end. avail mem=11.18 GB"
    )
    assert isinstance(event, ev.LoadWeightBegin)
    assert event.prefix.rank == "TP0"
    assert event.avail_gib == 93.17


def test_two_prefixes_in_a_row_take_the_inner_one() -> None:
    # A line re-logged through a second logger: the inner prefix names the scheduler.
    event = parse_line(
        "[2026-01-01 00:00:00 TP0] [2026-01-01 00:00:01 TP1] Memory pool end. avail mem=11.18 GB"
    )
    assert isinstance(event, ev.MemoryPoolEnd)
    assert event.prefix.rank == "TP1" and event.avail_gib == 11.18


@pytest.mark.parametrize(
    "stamp",
    [
        "2026-13-45 99:99:99",
        "2026-02-30 00:00:00",
        "0000-00-00 00:00:00",
        "2026-01-01 24:00:00",
        "9999-12-31 23:59:60",
    ],
)
def test_invalid_timestamps_keep_the_message(stamp: str) -> None:
    event = parse_line(f"[{stamp} TP0] Memory pool end. avail mem=11.18 GB")
    assert isinstance(event, ev.MemoryPoolEnd)
    assert event.prefix.timestamp is None
    assert event.prefix.rank == "TP0"
    assert event.avail_gib == 11.18


def test_invalid_timestamp_with_milliseconds() -> None:
    event = parse_line("[2026-13-45 99:99:99.999999 DP1 TP3] Load weight begin. avail mem=93.17 GB")
    assert isinstance(event, ev.LoadWeightBegin)
    assert event.prefix.timestamp is None
    assert (event.prefix.dp, event.prefix.tp) == (1, 3)
    assert event.avail_gib == 93.17


def test_invalid_timestamps_through_the_report() -> None:
    lines = [line.replace("2026-02-27", "2026-13-45") for line in _story()]
    data = _report_everything(lines)
    assert data["summary"]["max_total_num_tokens"] == 159277  # type: ignore[index]


def test_rich_markup_is_kept_literally() -> None:
    line = "[2026-02-27 09:06:31] Scheduler hit an exception: [bold]boom[/] [red]x"
    event = parse_line(line)
    assert isinstance(event, ev.Failure)
    assert event.message == "Scheduler hit an exception: [bold]boom[/] [red]x"
    data = _report_everything([*_story(), line])
    startup = data["startup"]
    assert isinstance(startup, dict)
    assert "[bold]boom[/] [red]x" in startup["failure"]
    tracker = fold_lines([*_story(), line])
    out = io.StringIO()
    print_snapshot(analysis_snapshot(analyse(tracker, "[red]x[/]")), Console(file=out, width=200))
    text = out.getvalue()
    assert "[bold]boom[/] [red]x" in text
    assert "[red]x[/]" in text  # the source name is shown literally too


def test_unbalanced_markup_does_not_break_rendering() -> None:
    lines = [
        "[2026-02-27 09:06:31] Scheduler hit an exception: [/] [/bold] [link=x] [",
        "[2026-02-27 09:06:31] server_args=ServerArgs(model_path='[/red]', tp_size=1, "
        "mem_fraction_static=0.88)",
    ]
    _report_everything([*_story(), *lines])


def test_batch_lines_with_hostile_values() -> None:
    lines = [
        *_story(),
        *(
            f"{P0}Decode batch. #running-req: {i}, #token: nan, token usage: inf, "
            f"gen throughput (token/s): 1e309, accept len: -3.0, cache hit rate: nan%, "
            f"#queue-req: , cuda graph: maybe, "
            for i in range(300)
        ),
    ]
    data = _report_everything(lines)
    batch = data["runtime"]["latest_batch"]["TP0"]  # type: ignore[index]
    assert batch["running_reqs"] == 299
    assert batch["token_usage"] is None
    assert batch["gen_throughput"] is None
    assert batch["accept_len"] is None  # negative: refused, as /metrics refuses it


def test_negative_batch_value_is_refused_like_the_metrics_parser_does() -> None:
    """One rule (bounds.py) for both parsers: a negative rate is no reading, and says so."""
    event = parse_line(
        f"{P0}Decode batch. #running-req: 3, #token: 900, token usage: 0.10, "
        "gen throughput (token/s): -12.5, accept len: 2.50, #queue-req: 0, "
    )
    assert isinstance(event, ev.BatchStats)
    assert event.gen_throughput is None and event.accept_len == 2.5
    assert event.rejected == ("gen throughput (token/s): -12.5 (negative)",)
    scraped = parse_exposition('sglang:gen_throughput{tp_rank="0"} -12.5')
    assert "gen_throughput" not in scraped.values
    assert scraped.rejected == ('sglang:gen_throughput{tp_rank="0"} -12.5 (negative)',)
    data = _report_everything(
        [
            *_story(),
            f"{P0}Decode batch. #running-req: 3, #token: 900, "
            "gen throughput (token/s): -12.5, #queue-req: 0, ",
        ]
    )
    rejected = data["rejected_values"]
    assert isinstance(rejected, dict)
    assert [v["value"] for v in rejected["values"]] == [
        "gen throughput (token/s): -12.5 (negative)"
    ]


# --------------------------------------------------------------------------- inputs that once crashed the report


def test_regression_negative_kv_tokens() -> None:
    _report_everything(["KV Cache is allocated. #tokens: -2, KV size: 1.0 GB"])


def test_regression_negative_kv_size() -> None:
    _report_everything(_story(kv="-3.0"))


@pytest.mark.parametrize("pre", ["0", "-3.0"])
def test_regression_non_positive_pre_load_free(pre: str) -> None:
    _report_everything(_story(pre=pre))


def test_regression_negative_context_len() -> None:
    _report_everything(_story(context="-1"))


def test_regression_huge_page_size_overflows() -> None:
    _report_everything(_story(page="1e300", post="9" * 20))


def test_regression_huge_context_length_overflows() -> None:
    lines = [
        line.replace("context_length=262144", "context_length=1e308")
        if "server_args" in line
        else line.replace("context_len=262144, ", "")
        for line in _story()
    ]
    _report_everything(lines)


def test_regression_huge_request_len_overflows() -> None:
    _report_everything(_story(), request_len=10**400)


# --------------------------------------------------------------------------- request echoes

# `--log-requests` writes a client's prompt and the model's answer into the log; whatever they
# say, a ready server stays ready (the same lines are in tests/corpus, category "echo").
REQUEST_ECHOES = {
    "prompt names a CUDA OOM": (
        "[{stamp} TP0] Receive: obj=GenerateReqInput(rid='a1', text='why does torch say CUDA out"
        " of memory. Tried to allocate 20.00 GiB?', sampling_params={{'max_new_tokens': 64}})"
    ),
    "answer quotes SGLang's refusal": (
        "[{stamp}] Finish: obj=GenerateReqInput(rid='a1', text='how do I fix it?'), out={{'text':"
        " 'It says: Not enough memory. Please try to increase --mem-fraction-static. Current"
        " value: mem_fraction_static=0.88', 'meta_info': {{'id': 'a1'}}}}"
    ),
}


def _ready_log_with(line: str, folder: Path) -> Path:
    """The story log (a ready server) with LINE logged at its last line's time, dated now."""
    story = STORY_LOG.read_text(encoding="utf-8")
    stamp = story.rstrip("\n").rsplit("\n", 1)[-1][1:20]
    source = folder / "echo-source.log"
    source.write_text(story + line.format(stamp=stamp) + "\n", encoding="utf-8")
    return log_dated_now(source, folder / "echo.log")


def _kvtop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvtop", "--no-gpus", "--no-metrics", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


@pytest.mark.parametrize("line", REQUEST_ECHOES.values(), ids=REQUEST_ECHOES.keys())
def test_a_request_echo_of_a_failure_leaves_a_ready_server_ok(line: str, tmp_path: Path) -> None:
    log = str(_ready_log_with(line, tmp_path))
    check = _kvtop("--check", "--log-file", log)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.startswith("KVTOP OK - ready"), check.stdout

    as_json = _kvtop("--once", "--json", "--log-file", log)
    assert as_json.returncode == 0, as_json.stderr
    report = json.loads(as_json.stdout)
    assert report["verdict"]["level"] == "ok", report["verdict"]
    assert report["startup"]["state"] == "ready"
    assert report["startup"]["failure"] is None
    assert report["startup"]["failure_kind"] is None

    text = _kvtop("--once", "--width", "200", "--log-file", log)
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("verdict: OK - ready"), text.stdout[:300]
    assert "CRASHED" not in text.stdout and "crashed" not in text.stdout
    assert "next step:" not in text.stdout
    assert "GenerateReqInput" not in text.stdout  # the echo is nowhere in the report
