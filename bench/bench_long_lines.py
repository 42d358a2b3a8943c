#!/usr/bin/env python3
"""CPU time to read one long log line, as `--once` and the live view read it, by size and shape.

    python bench/bench_long_lines.py              # 20 KB, 200 KB and 2 MB lines, 60 s cap each
    python bench/bench_long_lines.py --cap 10     # give up on a measurement after 10 s

Every line goes the whole way a line of a log goes: `fold_lines` (the parser, the tracker) and
the raw-lines ring (the secrets' redaction, the control-character filter). The shapes are those
that made a pass over a line quadratic or could: a batch line with "token" in it (the word that
wakes the redaction), a run of word characters ending `_api_key`, `x_` repeated, a server_args
line, a traceback's exception line with a long message, a request echo (`--log-requests`).
Each measurement runs in a child process with a cap, so a quadratic pass prints "> cap" instead
of running for hours. Figures in docs/reliability.md.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.parser_sizes import LONG_LINE_SHAPES  # noqa: E402

SIZES = (20_000, 200_000, 2_000_000)

_CHILD = """
import sys, time
sys.path.insert(0, {root!r})
from tests.support.parser_sizes import LONG_LINE_SHAPES, read_like_a_log
line = dict(LONG_LINE_SHAPES)[{name!r}]({size})
started = time.process_time()
read_like_a_log(line)
print(time.process_time() - started)
"""


def _label(size: int) -> str:
    return f"{size / 1e6:g} MB" if size >= 1_000_000 else f"{size / 1e3:g} KB"


def _measure(name: str, size: int, cap: float) -> str:
    code = _CHILD.format(root=str(ROOT), name=name, size=size)
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=cap, check=True
        )
    except subprocess.TimeoutExpired:
        return f"> {cap:g} s"
    seconds = float(done.stdout.strip())
    return f"{seconds * 1e3:.1f} ms" if seconds < 10 else f"{seconds:.1f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap", type=float, default=60.0, help="seconds before giving up")
    args = parser.parse_args()
    where = f"Python {platform.python_version()}, {platform.machine()}"
    print(f"{where}; CPU time to read one line (parser, tracker, raw-lines ring)")
    print("\n| shape | " + " | ".join(_label(s) for s in SIZES) + " |")
    print("|---" * (len(SIZES) + 1) + "|")
    for name, _build in LONG_LINE_SHAPES:
        cells = " | ".join(_measure(name, size, args.cap) for size in SIZES)
        print(f"| {name} | {cells} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
