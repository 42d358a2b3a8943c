#!/usr/bin/env python3
"""CPU of one /metrics fetch (113 KB) on loopback: kvtop's HttpGetter (h11 on asyncio streams)
against httpx's AsyncClient, which kvtop used before.

    python bench/bench_fetch.py              # median of 200 fetches each
    python bench/bench_fetch.py --runs 1000

The server is FakeSGLang (tests/sglang_http.py) in a thread of this process, so the CPU is
counted for the event loop's thread only (time.thread_time): the client's side. Both keep one
connection alive, as in a live session. httpx comes with the test extras; without it only
HttpGetter is measured. Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from sglang_http import FakeSGLang  # noqa: E402

from tui.sources.http_get import HttpGetter  # noqa: E402

HEADERS = {"Accept": "text/plain, application/json"}


async def _cpu_ms(fetch: Callable[[], Awaitable[int]], runs: int) -> tuple[float, int]:
    size = await fetch()  # connect outside the measurement
    times = []
    for _ in range(runs):
        start = time.thread_time()
        size = await fetch()
        times.append(time.thread_time() - start)
    return statistics.median(times) * 1000, size


async def _measure(url: str, runs: int) -> None:
    getter = HttpGetter(url, max_body_bytes=20 << 20)

    async def ours() -> int:
        return len((await getter.get("/metrics", HEADERS))[1])

    ms, size = await _cpu_ms(ours, runs)
    await getter.aclose()
    print(f"HttpGetter (h11 on asyncio):  {ms:6.3f} ms CPU per fetch of {size / 1000:.0f} KB")
    try:
        import httpx
    except ImportError:
        print("httpx: not installed (pip install -e '.[test]')")
        return
    async with httpx.AsyncClient() as client:

        async def theirs() -> int:
            async with client.stream("GET", url + "/metrics", headers=HEADERS) as response:
                return len(b"".join([chunk async for chunk in response.aiter_bytes()]))

        their_ms, _ = await _cpu_ms(theirs, runs)
    print(f"httpx.AsyncClient.stream:     {their_ms:6.3f} ms CPU per fetch")
    print(f"httpx / HttpGetter: {their_ms / ms:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    with FakeSGLang() as server:
        asyncio.run(_measure(server.url, args.runs))


if __name__ == "__main__":
    main()
