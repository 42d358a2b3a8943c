#!/usr/bin/env python3
"""CPU of one /metrics fetch (113 KB) on loopback: kvtop's HttpGetter (httpx with kvtop's
policy: the size cap on the decoded stream, same-origin redirects) against a bare
httpx.AsyncClient stream, to show what the policy costs.

    python bench/bench_fetch.py              # median of 200 fetches each
    python bench/bench_fetch.py --runs 1000

The server is FakeSGLang (tests/support/sglang_http.py) in a thread of this process, so the CPU is
counted for the event loop's thread only (time.thread_time): the client's side. Both keep one
connection alive, as in a live session. Before kvtop went back to httpx, HttpGetter was a
hand-written h11 client; its figure is in docs/performance.md (run this script from a checkout
of that version to see it again). Prints; asserts nothing.
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
sys.path.insert(0, str(ROOT))

from kvtop.sources.http_get import HttpGetter  # noqa: E402
from tests.support.sglang_http import FakeSGLang  # noqa: E402

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
    print(f"kvtop's HttpGetter:       {ms:6.3f} ms CPU per fetch of {size / 1000:.0f} KB")
    import httpx

    async with httpx.AsyncClient() as client:

        async def theirs() -> int:
            async with client.stream("GET", url + "/metrics", headers=HEADERS) as response:
                return len(b"".join([chunk async for chunk in response.aiter_bytes()]))

        their_ms, _ = await _cpu_ms(theirs, runs)
    print(f"bare httpx.AsyncClient:   {their_ms:6.3f} ms CPU per fetch")
    print(f"HttpGetter / bare httpx: {ms / their_ms:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    with FakeSGLang() as server:
        asyncio.run(_measure(server.url, args.runs))


if __name__ == "__main__":
    main()
