"""Hostile inputs of any size for every parser, for the linearity test and its benchmark.

Each case builds an input of about N characters (log lines) or N bytes (HTTP bodies) in the
shape that made a parser quadratic or could: long runs with no separator, a separator repeated
thousands of times, one series with many labels, deep nesting. `tests/unit/test_parsers_linear.py`
checks that time per byte stays flat from a small to a large size;
`bench/bench_parsers_linear.py` prints the figures (docs/reliability.md).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from kvtop.sglang.log_line import parse_line
from kvtop.sglang.raw_lines import RawLines
from kvtop.sglang.startup import StartupTracker
from kvtop.sglang.story import fold_lines
from kvtop.sources.log_stream import LineSplitter
from kvtop.sources.metrics import parse_metrics_body, parse_server_info_body
from tests.support.sglang_http import Deployment, build_exposition, build_server_info

PREFIX = "[2026-01-10 10:00:00 TP0] "
BATCH = (
    "Decode batch. #running-req: 12, #token: 5000, token usage: 0.03, cuda graph: True, "
    "gen throughput (token/s): 1234.5, #queue-req: 0, "
)


def _fill(head: str, unit: str, size: int, tail: str = "") -> str:
    count = max(1, (size - len(head) - len(tail)) // len(unit))
    return head + unit * count + tail


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # "line" (characters) or "body" (bytes)
    build: Callable[[int], object]
    run: Callable[[object], object]


def _line(name: str, build: Callable[[int], str]) -> Case:
    return Case(name, "line", build, parse_line)  # type: ignore[arg-type]


def _metrics(name: str, build: Callable[[int], str]) -> Case:
    return Case(name, "body", lambda n: build(n).encode(), parse_metrics_body)  # type: ignore[arg-type]


def _info(name: str, build: Callable[[int], object]) -> Case:
    return Case(name, "body", lambda n: json.dumps(build(n)).encode(), parse_server_info_body)  # type: ignore[arg-type]


def _split_in_reads(data: bytes, read_bytes: int = 8 << 10) -> list[str]:
    """The follower's line splitter fed DATA as reads of READ_BYTES (a slow writer's line)."""
    splitter = LineSplitter()
    lines = [
        line
        for i in range(0, len(data), read_bytes)
        for line in splitter.feed(data[i : i + read_bytes])
    ]
    return lines + splitter.flush()


def _stream(name: str, build: Callable[[int], bytes]) -> Case:
    return Case(name, "body", build, _split_in_reads)  # type: ignore[arg-type]


_SCRAPE = build_exposition(Deployment(version="0.5.12"))
_SERIES = "sglang:token_usage"


def _states(size: int) -> dict[str, object]:
    info = build_server_info(Deployment(version="0.5.12"))
    state = info["internal_states"][0]  # type: ignore[index]
    one = len(json.dumps(state))
    info["internal_states"] = [state] * max(1, size // one)
    return info


LINE_CASES = [
    _line("decode batch, long tail", lambda n: _fill(PREFIX + BATCH, "abc1", n)),
    _line("decode batch, words and blanks", lambda n: _fill(PREFIX + BATCH, "x1 ", n)),
    _line("prefill batch, many pairs", lambda n: _fill(PREFIX + "Prefill batch. ", "#a: 1, ", n)),
    _line("batch, colons without keys", lambda n: _fill(PREFIX + "Decode batch. ", "1: ", n)),
    _line(
        "load weight, quant= repeated", lambda n: _fill(PREFIX + "Load weight end. ", "quant=", n)
    ),
    _line("KV cache, long tail", lambda n: _fill(PREFIX + "KV Cache is allocated. ", "K size", n)),
    _line("summary, many pairs", lambda n: _fill(PREFIX + "max_total_num_tokens=1, ", "a=1, ", n)),
    _line("server_args, many pairs", lambda n: _fill("server_args=ServerArgs(", "a_b=1, ", n, ")")),
    _line("server_args, nesting", lambda n: _fill("server_args=ServerArgs(a=", "[(", n)),
    _line("server_args, escapes", lambda n: _fill("server_args=ServerArgs(a='", "\\'", n, "')")),
    _line(
        "failure, repeated needle",
        lambda n: _fill(
            "RuntimeError: Not enough memory. Please try to increase ", "minimum viable = ", n
        ),
    ),
    _line("escape sequences", lambda n: _fill(PREFIX + "Decode batch. ", "\x1b[2J", n)),
    _line("nested prefixes", lambda n: _fill("", PREFIX, n, "Decode batch. #token: 1")),
    _line("tqdm redraws", lambda n: _fill("", "\rCapturing batches (bs=1 avail_mem=1.0 GB)", n)),
    _line("access log (not an event)", lambda n: _fill('INFO: 127.0.0.1 - "GET /', "x", n)),
]


def _log(name: str, build: Callable[[int], str]) -> Case:
    """A whole log (lines joined by newlines) folded line by line, as a followed log is."""
    return Case(name, "line", build, lambda text: fold_lines(text.splitlines()))  # type: ignore[arg-type, union-attr]


_FAILED = (
    "[2026-01-10 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
)
_FRAME = '  File "/sgl/srt/model_executor/model_runner.py", line 207, in initialize\n    self.x()\n'
_OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which 1.06 GiB is free.\n"
_CHAIN = "\nDuring handling of the above exception, another exception occurred:\n\nTraceback (most recent call last):\n"

LOG_CASES = [
    _log("huge traceback, many frames", lambda n: _fill(_FAILED, _FRAME, n, _OOM)),
    _log("huge traceback, long chain", lambda n: _fill(_FAILED, _FRAME + _OOM + _CHAIN, n, _OOM)),
    _log("huge traceback, many failures", lambda n: _fill("", _FAILED + _FRAME + _OOM, n)),
]

BODY_CASES = [
    _metrics("/metrics, a real scrape repeated", lambda n: _SCRAPE * max(1, n // len(_SCRAPE))),
    _metrics(
        "/metrics, one series, many labels",
        lambda n: _fill(_SERIES + "{", 'tp_rank="0",', n, 'z="\\\\"} 0.5\n'),
    ),
    _metrics("/metrics, unterminated labels", lambda n: _fill(_SERIES + "{", 'a="b', n, "\n")),
    _metrics(
        "/metrics, escaped label value", lambda n: _fill(_SERIES + '{a="', '\\"', n, '"} 1\n')
    ),
    _metrics(
        "/metrics, many ranks",
        lambda n: "".join(f'{_SERIES}{{tp_rank="{i}"}} 0.5\n' for i in range(max(1, n // 36))),
    ),
    _info("/server_info, many DP states", _states),
    _info("/server_info, long strings", lambda n: {"version": "x" * (n // 2), "model_path": "y"}),
    _stream("log stream, one long line in 8 KiB reads", lambda n: b"x" * n + b"\n"),
    _stream("log stream, bare CR every read", lambda n: (b"y" * 8191 + b"\r") * max(1, n >> 13)),
]

CASES = LINE_CASES + LOG_CASES + BODY_CASES


def seconds_per_byte(case: Case, size: int, repeats: int = 3, min_batch_s: float = 0.01) -> float:
    """The best of REPEATS timings (each at least MIN_BATCH_S of runs) divided by the size.

    CPU time of this thread, not wall time: on a machine shared with other work the time the
    thread waits for a core is noise of several times, and this measures the parser alone.
    """
    data = case.build(size)
    length = len(data)  # type: ignore[arg-type]
    started = time.thread_time()
    case.run(data)
    once = time.thread_time() - started
    runs = max(1, int(min_batch_s / max(once, 1e-7)))
    best = float("inf")
    for _ in range(repeats):
        started = time.thread_time()
        for _ in range(runs):
            case.run(data)
        best = min(best, (time.thread_time() - started) / runs)
    return best / length


# --------------------------------------------------------------------------- long lines, read whole
#
# One long line of each shape that made a pass over a line quadratic or could, read the whole
# way a log line goes (`read_like_a_log`): the parser, the tracker and the raw-lines ring with
# its redaction of secrets. tests/unit/test_parsers_linear.py reads a 2 MB one of each;
# bench/bench_long_lines.py times them at 20 KB, 200 KB and 2 MB.


def _echo(n: int) -> str:
    head = PREFIX.replace(" TP0", "") + "Receive: obj=GenerateReqInput(rid='a1', text='"
    return _fill(head, "why CUDA out of memory? ", n, "', sampling_params={})")


LONG_LINE_SHAPES: list[tuple[str, Callable[[int], str]]] = [
    ("decode batch with 'token', long word", lambda n: _fill(PREFIX + BATCH, "a", n)),
    ("word run ending _api_key", lambda n: _fill("", "a", n, "_api_key=sk-1")),
    ("'x_' repeated, then 'token'", lambda n: _fill("", "x_", n, " token")),
    (
        "server_args, long model path",
        lambda n: _fill("server_args=ServerArgs(api_key='sk-1', model_path='", "m", n, "')"),
    ),
    ("traceback, long exception line", lambda n: _fill("RuntimeError: token ", "a", n)),
    (
        "traceback, OOM with a run of digits",
        lambda n: _fill("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ", "1", n),
    ),
    ("request echo (--log-requests)", _echo),
]


def read_like_a_log(line: str) -> tuple[StartupTracker, RawLines]:
    """LINE read as one line of a log: folded into a tracker, kept in the raw-lines ring."""
    raw = RawLines()
    return fold_lines([line], StartupTracker(), raw), raw


# The long shapes read whole for the ratio test too: the redaction runs outside parse_line.
CASES += [
    Case(f"read whole: {name}", "line", build, read_like_a_log)  # type: ignore[arg-type]
    for name, build in LONG_LINE_SHAPES
]
