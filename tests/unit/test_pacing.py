"""tui/kvtop/sources/pacing.py: one tick releases every waiting source for one round; `settled` waits
for exactly those, not for a source still busy from an earlier tick."""

from __future__ import annotations

import asyncio

from kvtop.sources.pacing import Pacer


async def _rounds(pacer: Pacer, name: str, log: list[str], work_s: float = 0.0) -> None:
    lane = pacer.lane(name)
    while True:
        await lane.next()
        log.append(name)
        if work_s:
            await asyncio.sleep(work_s)


async def test_a_tick_runs_each_source_once_and_settles() -> None:
    pacer, log = Pacer(), []
    tasks = [asyncio.create_task(_rounds(pacer, n, log)) for n in ("nvml", "metrics", "log")]
    await asyncio.sleep(0)
    assert log == []  # nothing runs before the first tick
    for tick in range(1, 4):
        pacer.tick()
        assert await pacer.settled(1.0)
        assert sorted(log) == sorted(["nvml", "metrics", "log"] * tick)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_settled_waits_for_the_round_to_finish() -> None:
    pacer, log = Pacer(), []
    task = asyncio.create_task(_rounds(pacer, "metrics", log, work_s=0.05))
    await asyncio.sleep(0)
    pacer.tick()
    assert pacer.busy == ["metrics"]
    assert not await pacer.settled(0.01)  # still in its round
    assert await pacer.settled(1.0)
    assert pacer.busy == []
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_source_busy_from_an_earlier_tick_is_not_waited_for() -> None:
    pacer, log = Pacer(), []
    hung = asyncio.create_task(_rounds(pacer, "nvml", log, work_s=10))
    quick = asyncio.create_task(_rounds(pacer, "log", log))
    await asyncio.sleep(0)
    pacer.tick()
    assert not await pacer.settled(0.05)  # nvml hangs in its first round
    pacer.tick()  # the next refresh: only "log" was waiting
    assert await pacer.settled(0.05)
    assert log.count("log") == 2 and log.count("nvml") == 1
    for task in (hung, quick):
        task.cancel()
    await asyncio.gather(hung, quick, return_exceptions=True)


async def test_wait_s_counts_ticks_and_leave_releases_the_tick() -> None:
    pacer = Pacer()
    pacer.interval_s = 0.02
    lane = pacer.lane("retry")
    waiting = asyncio.create_task(lane.wait_s(0.1))
    ticks = 0
    while not waiting.done():
        await asyncio.sleep(0.02)
        pacer.tick()
        ticks += 1
        await asyncio.sleep(0)
    assert 3 <= ticks <= 8  # ~0.1 s of 0.02 s ticks, not the first one
    # A source that ended (lane.leave) no longer holds a tick back.
    pacer.tick()
    ended = pacer.lane("stdin")
    ended.leave()
    assert await pacer.settled(0.01)


async def test_cancelled_while_waiting_is_not_part_of_the_next_tick() -> None:
    pacer, log = Pacer(), []
    task = asyncio.create_task(_rounds(pacer, "log", log))
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    pacer.tick()
    assert pacer.busy == []
    assert await pacer.settled(0.01)


async def test_done_waits_for_one_source_alone() -> None:
    pacer, log = Pacer(), []
    quick = asyncio.create_task(_rounds(pacer, "nvml", log))
    slow = asyncio.create_task(_rounds(pacer, "log", log, work_s=10))
    await asyncio.sleep(0)
    pacer.tick()
    assert await pacer.done("nvml", 1.0)  # the GPUs' round is over...
    assert pacer.busy == ["log"]  # ...while the log is still being read
    assert not await pacer.done("log", 0.02)
    assert await pacer.done("metrics", 0.0)  # no such source this tick: nothing to wait for
    for task in (quick, slow):
        task.cancel()
    await asyncio.gather(quick, slow, return_exceptions=True)
