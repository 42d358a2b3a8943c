"""A followed log replaced by a link to a device that never ends (/dev/zero): a source problem,
said once, then idle (the process' CPU stays near nothing); a log put back is followed again."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from kvtop.sources.log_follow import LogFollower


async def _collect(follower: LogFollower, into: list[str]) -> None:
    async for line in follower.lines():
        into.append(line)


async def test_a_log_replaced_by_dev_zero_is_a_problem_then_idle(tmp_path: Path) -> None:
    log = tmp_path / "sglang.log"
    log.write_text("[2026-02-27 09:05:51 TP0] first line\n")
    follower = LogFollower(str(log), poll_interval_s=0.05)
    lines: list[str] = []
    task = asyncio.create_task(_collect(follower, lines))
    try:
        for _ in range(100):
            if lines:
                break
            await asyncio.sleep(0.05)
        assert lines == ["[2026-02-27 09:05:51 TP0] first line\n"]
        log.unlink()
        log.symlink_to("/dev/zero")
        for _ in range(200):
            if follower.status:
                break
            await asyncio.sleep(0.05)
        assert follower.status is not None and "never ends" in follower.status, follower.status
        assert "/dev/zero" in follower.status
        before = os.times()
        started = time.monotonic()
        await asyncio.sleep(2.0)
        cpu = (os.times().user - before.user) + (os.times().system - before.system)
        assert cpu < 0.2 * (time.monotonic() - started), cpu  # idle, not reading zeros
        assert len(lines) == 1
        log.unlink()
        log.write_text("[2026-02-27 09:06:00 TP0] back\n")
        for _ in range(200):
            if len(lines) > 1:
                break
            await asyncio.sleep(0.05)
        assert lines[-1] == "[2026-02-27 09:06:00 TP0] back\n" and follower.status is None
    finally:
        follower.close()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
