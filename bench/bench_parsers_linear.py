#!/usr/bin/env python3
"""Time per byte of every parser on hostile input from small to large, measured in one run.

    python bench/bench_parsers_linear.py             # lines 1 KB…1 MB, bodies 100 KB…20 MiB
    python bench/bench_parsers_linear.py --quick     # lines up to 256 KB, bodies up to 2 MiB

The shapes are tests/support/parser_sizes.py's (the linearity test uses them too): long runs with no
separator, a separator repeated thousands of times, one series with many labels, deep nesting.
For each it prints ns per byte at each size and the ratio largest/smallest: about 1 for a linear
parser, about the size ratio (1000× for lines, 200× for bodies) for a quadratic one. Log lines
stop at 1 MB because parse_line cuts longer ones (MAX_LINE_CHARS); bodies at 20 MiB because the
fetch refuses more. Figures in docs/reliability.md.
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.parser_sizes import CASES, seconds_per_byte  # noqa: E402

LINE_SIZES = (1_000, 16_000, 256_000, 1_000_000)
BODY_SIZES = (100_000, 1_000_000, 20 * 2**20)


def _label(size: int) -> str:
    if size >= 2**20 and size % 2**20 == 0:
        return f"{size // 2**20} MiB"
    return f"{size / 1e6:g} MB" if size >= 1_000_000 else f"{size / 1e3:g} KB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller largest sizes")
    args = parser.parse_args()
    line_sizes = LINE_SIZES[:3] if args.quick else LINE_SIZES
    body_sizes = (100_000, 2 * 2**20) if args.quick else BODY_SIZES
    where = f"Python {platform.python_version()}, {platform.machine()}"
    print(f"{where}; ns per byte (CPU time of the parsing thread), best of 3")
    for kind, sizes in (("line", line_sizes), ("body", body_sizes)):
        head = " | ".join(_label(s) for s in sizes)
        print(f"\n| {kind} parser and shape | {head} | largest / smallest |")
        print("|---" * (len(sizes) + 2) + "|")
        for case in (c for c in CASES if c.kind == kind):
            per_byte = [seconds_per_byte(case, size) for size in sizes]
            cells = " | ".join(f"{t * 1e9:.1f}" for t in per_byte)
            print(f"| {case.name} | {cells} | {per_byte[-1] / per_byte[0]:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
