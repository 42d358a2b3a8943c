"""The GPU libraries' worker: a poll begun before the event loop exists (the live view's
first reading, begun while its screen is imported) answers the first wait, and a hung one
still hands back the stale reading."""

from __future__ import annotations

import asyncio
import threading

from kvtop.sources.call_worker import DeadlinePoll


def test_a_poll_begun_early_runs_at_once_and_answers_the_first_wait() -> None:
    running, release = threading.Event(), threading.Event()
    threads: list[str] = []

    def poll() -> int:
        threads.append(threading.current_thread().name)
        running.set()
        release.wait(10)
        return len(threads)

    deadline = DeadlinePoll("early-test", timeout_s=10)
    deadline.start(poll)
    assert running.wait(10)  # under way in the worker before any loop waited on it
    release.set()

    async def two_waits() -> tuple[int | str, int | str]:
        return (
            await deadline.run(poll, lambda: "stale"),
            await deadline.run(poll, lambda: "stale"),
        )

    try:
        assert asyncio.run(two_waits()) == (1, 2)  # the early answer, then a poll of its own
    finally:
        deadline.stop()
    assert threads == ["early-test", "early-test"]


def test_an_early_poll_that_hangs_gives_the_stale_reading_and_no_second_call() -> None:
    release = threading.Event()
    calls: list[int] = []

    def poll() -> str:
        calls.append(1)
        release.wait(10)
        return "fresh"

    deadline = DeadlinePoll("hung-test", timeout_s=0.05)
    deadline.start(poll)

    async def two_waits() -> tuple[str, str]:
        return (
            await deadline.run(poll, lambda: "stale"),
            await deadline.run(poll, lambda: "stale"),
        )

    try:
        assert asyncio.run(two_waits()) == ("stale", "stale")
        assert calls == [1]  # the hung call still holds the worker: nothing queued behind it
    finally:
        release.set()
        deadline.stop()
