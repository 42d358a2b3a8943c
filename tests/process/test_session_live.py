"""The live session: a followed log and a loopback server turned into a Snapshot every refresh."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kvtop.model.snapshot import Snapshot
from kvtop.session import Options, Session
from tests.support.paths import STORY_LOG
from tests.support.sglang_http import Deployment, FakeSGLang


async def next_matching(stream, predicate, timeout_s: float = 5.0) -> Snapshot:  # type: ignore[no-untyped-def]
    async def find() -> Snapshot:
        async for snapshot in stream:
            if predicate(snapshot):
                return snapshot
        raise AssertionError("the stream ended")

    return await asyncio.wait_for(find(), timeout_s)


async def test_follows_the_log_and_the_server(tmp_path: Path) -> None:
    lines = STORY_LOG.read_text().splitlines(keepends=True)
    ready = next(i for i, line in enumerate(lines) if "fired up and ready" in line)
    log = tmp_path / "sglang.log"
    log.write_text("".join(lines[: ready - 40]))  # mid-startup
    with FakeSGLang() as server:
        session = Session(Options(log_file=str(log), url=server.url, nvml=False, interval_s=0.05))
        stream = session.snapshots()
        try:
            first = await next_matching(stream, lambda s: s.analysis.ranks)
            assert first.analysis.startup.state == "starting"
            with log.open("a") as handle:  # the server finishes starting
                handle.writelines(lines[ready - 40 :])
            ready_snap = await next_matching(
                stream, lambda s: s.analysis.startup.state == "ready" and s.metrics is not None
            )
            assert ready_snap.metrics is not None
            assert ready_snap.metrics.max_total_num_tokens == 159277
            assert {s.name: s.state for s in ready_snap.sources} == {
                "log": "ok",
                "nvml": "off",
                "metrics": "ok",
            }
            # the service restarts: a new server_args line begins a new startup story
            args_line = next(line for line in lines if "server_args=" in line)
            with log.open("a") as handle:
                handle.write(args_line)
            restarted = await next_matching(stream, lambda s: s.analysis.startup.restarts == 1)
            assert restarted.analysis.startup.state == "starting"
        finally:
            await stream.aclose()


async def test_metrics_fault_and_recovery(tmp_path: Path) -> None:
    log = tmp_path / "empty.log"
    log.write_text("")
    with FakeSGLang(Deployment()) as server:
        server.switches.status["/metrics"] = 404  # the server runs without --enable-metrics
        session = Session(Options(log_file=str(log), url=server.url, nvml=False, interval_s=0.05))
        stream = session.snapshots()
        try:
            off = await next_matching(
                stream, lambda s: any(x.name == "metrics" and x.state == "off" for x in s.sources)
            )
            detail = next(x.detail for x in off.sources if x.name == "metrics")
            assert detail is not None and "--enable-metrics" in detail
            server.switches.status.pop("/metrics")
            await next_matching(
                stream,
                lambda s: any(x.name == "metrics" and x.state == "ok" for x in s.sources),
                timeout_s=8.0,  # back-off after one failure is 1 s
            )
        finally:
            await stream.aclose()


async def test_one_tick_per_refresh_and_a_failed_source_is_reported(tmp_path: Path) -> None:
    """Every refresh releases the sources once (the log is read, /metrics fetched, once per
    snapshot); a source loop that dies of a bug ends the feed with its name instead of
    leaving that source frozen without a word."""
    log = tmp_path / "sglang.log"
    log.write_text(STORY_LOG.read_text())
    with FakeSGLang() as server:
        session = Session(Options(log_file=str(log), url=server.url, nvml=False, interval_s=0.2))
        stream = session.snapshots()
        try:
            await next_matching(stream, lambda s: s.metrics is not None)
            before = len([p for p, _ in server.requests if p == "/metrics"])
            for _ in range(5):
                await stream.__anext__()
            after = len([p for p, _ in server.requests if p == "/metrics"])
            # One scrape per snapshot (a scrape slower than the tick's wait, 0.1 s here, would
            # be taken up by the next tick: one fewer, never more).
            assert 4 <= after - before <= 5

            async def broken() -> None:
                raise RuntimeError("a bug in the scrape")

            session._scrape = broken  # type: ignore[method-assign]
            try:
                await next_matching(stream, lambda s: False, timeout_s=2.0)
            except RuntimeError as exc:
                assert "the metrics source failed" in str(exc) and "a bug in the scrape" in str(exc)
            else:  # pragma: no cover - next_matching raises either way
                raise AssertionError("the failure was not reported")
        finally:
            await stream.aclose()
