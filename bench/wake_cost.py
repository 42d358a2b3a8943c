#!/usr/bin/env python3
"""What one wake-up from idle costs on this machine: why kvtop runs its sources on one beat.

    python bench/wake_cost.py

1. A thread that only sleeps in select() with a timeout and wakes: CPU per wake-up (scheduler
   runtime of the thread, /proc/self/task/<tid>/sched; CLOCK_THREAD_CPUTIME where that is
   missing) and percent of a core, for timeouts from 1 s to 1 ms.
2. A fixed 2,000-step loop timed right after such a wake-up and again right after that: on a
   VM whose idle CPU is halted and cold, the first run after a long sleep is many times slower.
Prints; asserts nothing. On the 2-core VM of docs/performance.md a 1 s sleep cost 4.8 ms of CPU
per wake-up, and the loop took 0.5-1.9 ms after it instead of 46 µs.
"""

from __future__ import annotations

import select
import statistics
import threading
import time
from pathlib import Path

WINDOW_S = 5.0


def thread_cpu_ms() -> float:
    sched = Path(f"/proc/self/task/{threading.get_native_id()}/sched")
    try:
        for line in sched.read_text().splitlines():
            if line.startswith("se.sum_exec_runtime"):
                return float(line.split(":")[1])
    except OSError:
        pass
    return time.thread_time() * 1000


def work() -> int:
    total = 0
    for i in range(2000):
        total += i
    return total


def main() -> None:
    print(f"{'sleep':>7} {'wake-ups':>9} {'CPU per wake-up':>16} {'% of a core':>12}")
    for timeout in (1.0, 0.5, 0.25, 0.1, 0.01, 0.001):
        start_cpu, start, count = thread_cpu_ms(), time.monotonic(), 0
        while time.monotonic() - start < WINDOW_S:
            select.select([], [], [], timeout)
            count += 1
        cpu_ms = thread_cpu_ms() - start_cpu
        print(
            f"{timeout:>6g}s {count:>9} {cpu_ms / count * 1000:>13.0f} µs "
            f"{cpu_ms / WINDOW_S / 10:>11.2f}%"
        )
    print()
    print("a 2,000-step loop: right after a wake-up / again at once (µs, median of 5)")
    for timeout in (1.0, 0.1, 0.0):
        cold, warm = [], []
        for _ in range(5):
            select.select([], [], [], timeout)
            t = time.perf_counter()
            work()
            cold.append((time.perf_counter() - t) * 1e6)
            t = time.perf_counter()
            work()
            warm.append((time.perf_counter() - t) * 1e6)
        print(
            f"  after a {timeout:g} s sleep: {statistics.median(cold):7.0f} / "
            f"{statistics.median(warm):.0f}"
        )


if __name__ == "__main__":
    main()
