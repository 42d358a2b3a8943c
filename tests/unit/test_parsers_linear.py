"""Every parser is linear in its input: time per byte stays flat from a small to a large input.

A complexity check, not a speed target: for each hostile shape (tests/support/parser_sizes.py) the
time per byte of a large input, measured in the same run as a small one, must stay within RATIO_MAX
of the small one's. A quadratic parser grows with the size ratio (256× for lines, 32× for
bodies); a linear one stays near 1 (cache effects and the collector reach ~2 on a loaded
2-core machine). The figures for 1 KB…1 MB lines and 100 KB…20 MiB bodies are in
docs/reliability.md (bench/bench_parsers_linear.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtop.sglang.log_line import _quant, batch_pairs
from kvtop.sglang.startup import StartupTracker
from tests.support.parser_sizes import (
    CASES,
    LONG_LINE_SHAPES,
    Case,
    read_like_a_log,
    seconds_per_byte,
)

RATIO_MAX = 5.0
# Small, then larger: a quadratic parser fails at the middle size, before the largest would
# take minutes.
SIZES = {"line": (1 << 10, 16 << 10, 256 << 10), "body": (64 << 10, 512 << 10, 2 << 20)}


def _ratio(case: Case, small: int, large: int) -> float:
    ratios = []
    for _ in range(2):  # a second measurement when the machine was busy during the first
        ratios.append(seconds_per_byte(case, large, repeats=2) / seconds_per_byte(case, small))
        if ratios[-1] < RATIO_MAX:
            break
    return min(ratios)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_time_per_byte_is_flat(case: Case) -> None:
    small, *larger = SIZES[case.kind]
    for large in larger:
        ratio = _ratio(case, small, large)
        assert ratio < RATIO_MAX, (
            f"{case.name}: time per byte grows {ratio:.1f}× from {small} to {large} bytes"
        )


# The scanners that replaced backtracking regexes read exactly what those regexes read.
_OLD_BATCH_PAIR = re.compile(r"(#?[a-zA-Z][\w\-. ()/]*?): ([^,]*)")
_OLD_QUANT = re.compile(r"\b(quant=.*?), avail mem=")
_BATCH_BITS = ["a", "Z", "1", "#", ":", " ", ",", ".", "-", "(", ")", "/", "_", "é", "٣", ": "]
_QUANT_BITS = ["quant=", "a", ", avail mem=", ",", " ", "=", "xquant=", "é"]


@settings(max_examples=800, deadline=None)
@given(st.lists(st.sampled_from(_BATCH_BITS), max_size=30).map("".join))
def test_batch_pairs_as_the_regex_read_them(text: str) -> None:
    assert list(batch_pairs(text)) == _OLD_BATCH_PAIR.findall(text)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_QUANT_BITS), max_size=14).map("".join))
def test_quant_as_the_regex_read_it(text: str) -> None:
    match = _OLD_QUANT.search(text)
    assert _quant(text) == (match.group(1) if match else None)


def test_real_batch_line_pairs() -> None:
    line = (
        "Decode batch [7], #running-req: 12, #token: 5000, token usage: 0.03, cuda graph: True, "
        "gen throughput (token/s): 1234.50, #queue-req: 0, "
    )
    assert list(batch_pairs(line)) == _OLD_BATCH_PAIR.findall(line)
    assert dict(batch_pairs(line))["gen throughput (token/s)"] == "1234.50"


# A 2 MB line of every shape that made a pass over a line quadratic, read the whole way a log
# line goes (parser, tracker, raw-lines ring with its redaction): no time is asserted, but a
# quadratic pass at this size takes hours, so one would hang the suite where it stands.
LONG = 2_000_000


def _what_it_said(tracker: StartupTracker) -> tuple[object, ...]:
    start = tracker.current
    failure = start.failure
    return (
        start.state,
        None if failure is None else (failure.kind, failure.oom, failure.exception_line),
        sorted(start.ranks),
        start.batch_lines,
        {rank: batch.token_usage for rank, batch in start.latest_batch.items()},
        None if start.server_args is None else start.server_args.api_key_set,
        start.listening_url,
    )


@pytest.mark.parametrize("build", [b for _, b in LONG_LINE_SHAPES], ids=dict(LONG_LINE_SHAPES))
def test_a_2_mb_line_reads_as_a_short_one(build: Callable[[int], str]) -> None:
    line = build(LONG)
    assert len(line) > LONG * 0.99
    tracker, raw = read_like_a_log(line)
    short_tracker, _ = read_like_a_log(build(2_000))
    assert _what_it_said(tracker) == _what_it_said(short_tracker)
    (kept,) = raw.lines()
    assert len(kept) <= 2002 and kept.endswith(" …")
    assert "sk-1" not in kept and "pw" not in kept[-10:]


def test_the_long_shapes_say_what_they_should() -> None:
    """Each shape reaches the pass it is there for (a batch, a failure, server_args)."""
    said = {
        name: _what_it_said(read_like_a_log(build(LONG))[0]) for name, build in LONG_LINE_SHAPES
    }
    assert said["decode batch with 'token', long word"][4] == {"TP0": 0.03}
    assert said["server_args, long model path"][5] is True
    assert said["traceback, OOM with a run of digits"][1] is not None
    assert said["traceback, OOM with a run of digits"][1][0] == "out_of_memory"
    assert said["request echo (--log-requests)"][1] is None
