#!/usr/bin/env python3
"""`kvtop --export` at `ulimit -n 1024` while 1,100 connections hold requests they never finish
(reopened as soon as the exporter closes them), for a minute: scrapes every 0.5 s (each must be
answered within a second), the exporter's RSS, threads and open descriptors before and at their
peak. The suite runs the same attack shorter (tests/process/test_export_idle_connections.py).

    python bench/bench_export_idle.py               # 60 s, 1,100 connections
    python bench/bench_export_idle.py --hold 300    # longer

Prints; asserts nothing. docs/exporter.md quotes the figures.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.process.test_export_idle_connections import CLIENTS, idle_attack  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hold", type=float, default=60.0, help="seconds the attack is held")
    parser.add_argument("--clients", type=int, default=CLIENTS, help="unfinished requests")
    args = parser.parse_args()
    figures, failures = idle_attack(args.hold, args.clients)
    for name, value in figures.items():
        print(f"{name:20} {value:g}")
    print("failed scrapes:", ", ".join(failures) or "none")


if __name__ == "__main__":
    main()
