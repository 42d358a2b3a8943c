#!/usr/bin/env python3
"""Time parse_exposition against prometheus_client's parser on a ~115 KB SGLang scrape.

    python bench/bench_metrics_parse.py            # median of 50 runs each
    python bench/bench_metrics_parse.py --runs 200 --strict

The exposition comes from tests/support/sglang_http.py (a real prometheus_client registry with
SGLang's families and labels, TP8, version 0.5.12, histogram buckets filling it to ~115 KB).
Budget: under 5 ms per scrape for parse_exposition. Prints figures and a verdict; --strict
makes an over-budget run exit 3.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from kvtop.sglang.metrics import parse_exposition  # noqa: E402
from tests.support.sglang_http import Deployment, build_exposition  # noqa: E402

BUDGET_MS = 5.0


def _median_ms(func, text: str, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        func(text)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def _prometheus_full(text: str) -> int:
    return sum(len(family.samples) for family in text_string_to_metric_families(text))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--strict", action="store_true")
    args = parser.parse_args()

    text = build_exposition(Deployment(version="0.5.12", tp_size=8))
    series = _prometheus_full(text)
    ours = _median_ms(parse_exposition, text, args.runs)
    theirs = _median_ms(_prometheus_full, text, args.runs)
    sample = parse_exposition(text)
    print(f"exposition: {len(text) / 1024:.1f} KiB, {text.count(chr(10))} lines, {series} series")
    print(f"families seen: {sample.families_seen}, values read: {len(sample.values)}")
    print(
        f"parse_exposition:                       {ours:7.3f} ms per scrape (median of {args.runs})"
    )
    print(
        f"prometheus_client text_string_to_...:   {theirs:7.3f} ms per scrape (median of {args.runs})"
    )
    print(f"speed-up: {theirs / ours:.0f}x")
    within = ours < BUDGET_MS
    print(f"verdict: {'within' if within else 'OVER'} budget ({ours:.3f} ms vs < {BUDGET_MS:g} ms)")
    return 3 if args.strict and not within else 0


if __name__ == "__main__":
    sys.exit(main())
