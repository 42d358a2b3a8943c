#!/usr/bin/env python3
"""Time finding and reading a unit's latest run with 10,000 and 1,000,000 older journal entries.

    python bench/bench_journal_seek.py              # median of 5 runs each
    python bench/bench_journal_seek.py --runs 9 --rebuild --strict

The journals are real files written by systemd-journal-remote (several older invocations of
sglang-kimi.service, then a latest one of 300 entries), built once and cached under the
temporary directory. The figure that matters is the ratio of the two read times: JournalSource
seeks from the tail and reads the latest invocation through journald's field index, so the
history before it should cost next to nothing (target: a ratio near 1). Also prints the CPU
cost per entry of following live appends. --strict exits 3 when the ratio is over 3.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvtop.sources.journal import JournalSource  # noqa: E402
from tests.support.journal_tools import (  # noqa: E402
    BOOT_AT_US,
    JOURNAL_REMOTE,
    export_format,
    invocation,
    journal_remote_missing,
    sglang_entries,
    write_journal,
)

UNIT = "sglang-kimi.service"
LATEST = 300
OLD_INVOCATIONS = 8
CHUNK = 50_000
MAX_RATIO = 3.0
CACHE = Path(tempfile.gettempdir()) / "kvtop-bench-journal"
STEP_US = 100  # 1,000,000 entries span 100 s of a boot that is an hour old at the latest run


def _old_entries(count: int, start: int, stop: int) -> list[dict[str, str | bytes | int]]:
    per = -(-count // OLD_INVOCATIONS)
    out = []
    for i in range(start, stop):
        run = i // per
        out.append(
            sglang_entries(
                UNIT,
                invocation(100 + run),
                [
                    f"[2026-01-09 08:00:00 TP{i % 8}] Decode batch. #running-req: {i % 40}, #token: {i}"
                ],
                BOOT_AT_US + 1_000_000 + i * STEP_US,
                pid=3000 + run,
            )[0]
        )
    return out


def build(old: int, rebuild: bool) -> Path:
    """DIR with OLD older entries and a latest run of LATEST, written once and then cached."""
    directory = CACHE / f"old-{old}"
    done = directory / "complete"
    if done.exists() and not rebuild:
        print(f"  {old:>9,} older entries: cached in {directory}")
        return directory
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    start = time.perf_counter()
    # Streamed in chunks: a million entries in export format is a few hundred MB.
    with subprocess.Popen(
        [JOURNAL_REMOTE, "-o", str(directory / "bench.journal"), "-"],
        stdin=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    ) as proc:
        assert proc.stdin is not None
        for first in range(0, old, CHUNK):
            proc.stdin.write(export_format(_old_entries(old, first, min(old, first + CHUNK))))
        proc.stdin.close()
        if proc.wait() != 0:
            raise SystemExit(f"systemd-journal-remote failed building {directory}")
    latest_at = BOOT_AT_US + 3_600_000_000
    lines = [f"[2026-01-10 10:00:{i % 60:02d} TP0] latest run line {i}" for i in range(LATEST)]
    write_journal(directory, sglang_entries(UNIT, invocation(2), lines, latest_at), "bench.journal")
    done.write_text(f"{old}\n")
    size_mb = sum(p.stat().st_size for p in directory.glob("*.journal")) / 1e6
    print(
        f"  {old:>9,} older entries: built in {time.perf_counter() - start:.1f} s "
        f"({size_mb:.0f} MB of journal files)"
    )
    return directory


async def _read_latest(directory: Path, backend: str) -> float:
    start = time.perf_counter()
    source = JournalSource(UNIT, directory=str(directory), backend=backend)
    got = [line async for line in source.read_latest()]
    elapsed = time.perf_counter() - start
    # Closing a reader takes ~14 ms here (tearing down its inotify watches), off the event loop;
    # let it finish so it does not overlap the next timed run.
    if source._executor is not None:
        await asyncio.to_thread(source._executor.shutdown, True)
    if len(got) != LATEST or source.status is not None:
        raise SystemExit(
            f"expected {LATEST} lines from {directory}, got {len(got)}: {source.status}"
        )
    return elapsed


def median_read_ms(directory: Path, backend: str, runs: int) -> float:
    return (
        statistics.median(asyncio.run(_read_latest(directory, backend)) for _ in range(runs)) * 1000
    )


async def _follow_cost(directory: Path, count: int) -> tuple[float, float]:
    """CPU µs per followed entry in this process (journal-remote's own work is a child's)."""
    source = JournalSource(UNIT, directory=str(directory), backend="python")
    got = 0
    first_batch = asyncio.Event()
    all_in = asyncio.Event()

    async def consume() -> None:
        nonlocal got
        async for _ in source.lines():
            got += 1
            if got == LATEST:
                first_batch.set()
            if got == LATEST + count:
                all_in.set()

    task = asyncio.ensure_future(consume())
    await asyncio.wait_for(first_batch.wait(), 30)
    entries = sglang_entries(
        UNIT, invocation(2), (f"live line {i}" for i in range(count)), BOOT_AT_US + 3_700_000_000
    )
    cpu = time.process_time()
    wall = time.perf_counter()
    await asyncio.to_thread(write_journal, directory, entries, "live.journal")
    await asyncio.wait_for(all_in.wait(), 60)
    cpu = time.process_time() - cpu
    wall = time.perf_counter() - wall
    source.close()
    await task
    return cpu / count * 1e6, wall


def follow_cost(journals: Path, count: int) -> tuple[float, float]:
    """CPU µs per followed entry and wall seconds, appending `count` entries to a scratch copy
    of the journals in `journals` (the cached ones stay untouched)."""
    scratch = Path(tempfile.mkdtemp(prefix="kvtop-bench-follow-"))
    try:
        for path in journals.glob("*.journal"):
            shutil.copy2(path, scratch / path.name)
        return asyncio.run(_follow_cost(scratch, count))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rebuild", action="store_true", help="rewrite the cached journals")
    parser.add_argument("--strict", action="store_true", help=f"exit 3 if the ratio > {MAX_RATIO}")
    args = parser.parse_args()
    why = journal_remote_missing()
    if why:
        print(f"cannot run: {why}")
        return 2

    print("journals (sglang-kimi.service, latest run of 300 entries after older runs):")
    small, large = build(10_000, args.rebuild), build(1_000_000, args.rebuild)

    print(f"open + find latest run + read its {LATEST} entries (median of {args.runs}):")
    figures = {}
    for backend in ("python", "journalctl"):
        small_ms = median_read_ms(small, backend, args.runs)
        large_ms = median_read_ms(large, backend, args.runs)
        figures[backend] = large_ms / small_ms
        print(
            f"  {backend:<10}  10k older: {small_ms:7.2f} ms   1M older: {large_ms:7.2f} ms   "
            f"ratio {large_ms / small_ms:.2f}"
        )

    per_entry_us, wall_s = follow_cost(small, 10_000)
    print(
        f"follow: 10,000 appended entries in {wall_s:.2f} s wall (journal-remote writing them "
        f"included), {per_entry_us:.1f} µs CPU per entry in kvtop's process"
    )

    ratio = figures["python"]
    verdict = "near 1: the history is not scanned" if ratio <= MAX_RATIO else "TOO HIGH"
    print(f"verdict (python back-end): ratio {ratio:.2f}, {verdict}")
    return 3 if args.strict and ratio > MAX_RATIO else 0


if __name__ == "__main__":
    sys.exit(main())
