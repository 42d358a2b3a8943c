"""The verdict and the watch, pure: one judgement per Snapshot, since when each alert is
active, the timeline of what changed, the server gone by NVML's accounting, host RAM only for
this host's log, one version string, one name per quantity. Snapshots come from the real demo
and the real parser (tests/support/still.py, fixture logs)."""

from __future__ import annotations

import io
from dataclasses import replace

from rich.console import Console

from kvtop.model.memory.gpu_memory import lost_memory
from kvtop.model.snapshot import (
    METRICS_DISABLED,
    NOT_YET,
    UNREACHABLE,
    GpuProcessView,
    HostMemory,
    Snapshot,
    SourceHealth,
    SourceState,
)
from kvtop.model.status.judge import judge
from kvtop.model.status.levels import Level
from kvtop.model.status.liveness import server_gone
from kvtop.model.status.watch import TIMELINE_MAX, Watch, judged
from kvtop.model.verdict import (
    ALERT_CLEARED,
    ALERT_RAISED,
    GPU_BACK,
    GPU_LOST,
    RESTART,
    SOURCE_BACK,
    SOURCE_DOWN,
)
from kvtop.report.json_report import snapshot_json
from kvtop.sglang.start_state import READY, STARTING
from tests.support.paths import STORY_LOG
from tests.support.still import still_snapshot
from tests.support.tui_support import log_snapshot


def _metrics(snapshot: Snapshot, health: SourceHealth, *, numbers: bool = False) -> Snapshot:
    sources = tuple(health if s.name == "metrics" else s for s in snapshot.sources)
    return replace(snapshot, sources=sources, metrics=snapshot.metrics if numbers else None)


def _lost(snapshot: Snapshot, index: int) -> Snapshot:
    gpus = list(snapshot.gpus)
    gpu = gpus[index]
    gpus[index] = replace(gpu, sample=replace(gpu.sample, status="lost"), memory=lost_memory())
    return replace(snapshot, gpus=tuple(gpus))


# -- the server's endpoint: only no answer at all is "unreachable" ------------------------------
def test_metrics_404_is_a_healthy_server_without_enable_metrics() -> None:
    words = "answers 404: the server runs without --enable-metrics (SGLang's default)"
    off = SourceHealth("metrics", SourceState.OFF, words, cause=METRICS_DISABLED)
    verdict = judge(_metrics(still_snapshot(), off))
    assert (verdict.level, verdict.alerts) == (Level.OK, ())
    assert verdict.summary.startswith("ready 1m00s")


def test_no_answer_after_ready_is_critical_an_answer_without_numbers_a_warning() -> None:
    base = still_snapshot()
    gone = SourceHealth("metrics", SourceState.OFF, "nothing listens", cause=UNREACHABLE)
    assert [a.kind for a in judge(_metrics(base, gone)).alerts] == ["server_down"]
    refused = SourceHealth("metrics", SourceState.OFF, "the API key was refused", cause="answered")
    verdict = judge(_metrics(base, refused))
    assert (verdict.level, [a.kind for a in verdict.alerts]) == (Level.WARNING, ["source_down"])
    # The first scrape on its way is nothing to judge yet.
    waiting = SourceHealth("metrics", SourceState.DEGRADED, "waiting", cause=NOT_YET)
    assert judge(_metrics(base, waiting)).level == Level.OK


def test_nothing_read_is_unknown_with_the_reasons() -> None:
    base = still_snapshot()
    nothing = replace(
        base,
        gpus=(),
        metrics=None,
        analysis=replace(base.analysis, lines_seen=0),
        sources=(SourceHealth("log", SourceState.OFF, "no such file"),),
    )
    verdict = judge(nothing)
    assert verdict.level == Level.UNKNOWN and verdict.alerts == ()
    assert verdict.summary == "no source could be read (log: no such file)"
    assert snapshot_json(judged(nothing))["verdict"] == {
        "level": "unknown",
        "alerts": [],
        "summary": "no source could be read (log: no such file)",
    }


# -- the watch: since when, the queue, the timeline ---------------------------------------------
def test_an_alert_keeps_the_time_it_was_first_seen_and_clears_on_the_timeline() -> None:
    base = still_snapshot()
    watch = Watch()
    ok, _ = watch.look(base)
    assert ok.level == Level.OK
    at = base.taken_at
    lost, _ = watch.look(_lost(replace(base, taken_at=at + 10), 3))
    again, _ = watch.look(_lost(replace(base, taken_at=at + 20), 3))
    assert [a.since for a in lost.alerts] == [at + 10]
    assert [a.since for a in again.alerts] == [at + 10]  # the same alert: since it began
    _, timeline = watch.look(replace(base, taken_at=at + 30))
    kinds = [(s.kind, s.subject) for s in timeline]
    assert kinds == [
        (GPU_LOST, "GPU 3"),
        (ALERT_RAISED, "GPU 3"),
        (GPU_BACK, "GPU 3"),
        (ALERT_CLEARED, "GPU 3"),
    ]
    assert [s.at for s in timeline] == [at + 10, at + 10, at + 30, at + 30]
    assert timeline[1].level == Level.CRITICAL and timeline[1].text.startswith(
        "GPU 3 (TP3) is lost"
    )


def test_sources_down_and_back_and_a_restart_are_on_the_timeline() -> None:
    base = still_snapshot()
    watch = Watch()
    watch.look(base)
    gone = SourceHealth("metrics", SourceState.OFF, "nothing listens", cause=UNREACHABLE)
    watch.look(_metrics(replace(base, taken_at=base.taken_at + 1), gone))
    startup = replace(base.analysis.startup, restarts=base.analysis.startup.restarts + 1)
    restarted = replace(base, analysis=replace(base.analysis, startup=startup))
    _, timeline = watch.look(replace(restarted, taken_at=base.taken_at + 2))
    kinds = [s.kind for s in timeline]
    assert kinds == [SOURCE_DOWN, ALERT_RAISED, RESTART, SOURCE_BACK, ALERT_CLEARED]
    assert timeline[0].text == "/metrics off: nothing listens"


def test_the_timeline_is_bounded() -> None:
    base = still_snapshot()
    watch = Watch()
    for i in range(TIMELINE_MAX):  # each look loses and finds GPU 3: four changes
        watch.look(_lost(replace(base, taken_at=base.taken_at + 2 * i), 3))
        watch.look(replace(base, taken_at=base.taken_at + 2 * i + 1))
    assert len(watch.timeline) == TIMELINE_MAX
    assert watch.timeline[-1].kind == ALERT_CLEARED


def test_the_queue_is_watched_from_one_look_to_the_next() -> None:
    from kvtop.sglang.metrics import parse_exposition
    from tests.support.sglang_http import Deployment, build_exposition

    queued = replace(
        still_snapshot(), metrics=parse_exposition(build_exposition(Deployment(queued=4)))
    )
    watch = Watch()
    verdicts = [watch.look(replace(queued, taken_at=queued.taken_at + t))[0] for t in (0, 20, 40)]
    assert [v.queued_for_s for v in verdicts] == [0.0, 20.0, 40.0]
    assert [v.level_of("queue") for v in verdicts] == [Level.OK, Level.OK, Level.WARNING]
    # One look (--check, --once) cannot know how long: the queue raises nothing there.
    assert judged(replace(queued, taken_at=queued.taken_at + 40)).verdict.level == Level.OK


# -- the server gone by NVML's accounting ------------------------------------------------------
def _emptied(snapshot: Snapshot, used_gib: float = 0.5) -> tuple[Snapshot, dict[str, object]]:
    gpus = tuple(
        replace(g, sample=replace(g.sample, used_gib=used_gib), processes=()) for g in snapshot.gpus
    )
    return replace(snapshot, gpus=gpus), {b.rank: b for b in snapshot.analysis.breakdowns}


def test_a_ready_server_whose_processes_left_and_memory_is_free_is_gone() -> None:
    base = still_snapshot()
    emptied, breakdowns = _emptied(base)
    sentence = server_gone(base.analysis.startup, emptied.gpus, breakdowns)  # type: ignore[arg-type]
    assert sentence is not None and sentence.startswith(
        "its processes are gone from GPUs 0–7 and their memory is released (NVML)"
    )
    # Still holding its weights' worth of memory: not released, not gone.
    held, _ = _emptied(base, used_gib=80.0)
    assert server_gone(base.analysis.startup, held.gpus, breakdowns) is None  # type: ignore[arg-type]
    # One process of the server's still on a GPU: not gone.
    gpus = list(emptied.gpus)
    gpus[5] = replace(gpus[5], processes=(GpuProcessView(4242, 70.0, "TP5"),))
    assert server_gone(base.analysis.startup, tuple(gpus), breakdowns) is None  # type: ignore[arg-type]
    # A process of someone else's does not keep the server alive.
    gpus[5] = replace(gpus[5], processes=(GpuProcessView(4242, 0.3, None, other=True),))
    assert server_gone(base.analysis.startup, tuple(gpus), breakdowns) is not None  # type: ignore[arg-type]


def test_a_start_that_took_no_memory_yet_or_unreadable_processes_are_not_gone() -> None:
    base = still_snapshot()
    emptied, breakdowns = _emptied(base)
    launching = replace(base.analysis.startup, state=STARTING)
    assert server_gone(launching, emptied.gpus, {}) is None  # nothing loaded yet: no evidence
    unreadable = tuple(
        replace(g, sample=replace(g.sample, field_errors=(("processes", "Unknown Error"),)))
        for g in emptied.gpus
    )
    ready = replace(base.analysis.startup, state=READY)
    assert server_gone(ready, unreadable, breakdowns) is None  # type: ignore[arg-type]
    assert server_gone(ready, (), breakdowns) is None  # type: ignore[arg-type]  # no GPU read here


# -- host RAM only for this host's log -------------------------------------------------------
def test_host_ram_is_compared_only_for_a_log_of_this_host(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "story.log"
    log.write_text(STORY_LOG.read_text())
    small = HostMemory(total_gb=25.3, used_gb=0.7, available_gb=24.6)
    other_host = replace(log_snapshot(log), host=small)  # 358 GB of HiCache, 25 GB of RAM here
    assert "host_ram" not in judged(other_host).verdict.kinds()
    here = judged(replace(other_host, log_from_this_host=True))
    (alert,) = [a for a in here.verdict.alerts if a.kind == "host_ram"]
    assert alert.level == Level.WARNING and "358.16 GB" in alert.text and "25.3 GB" in alert.text


def test_a_stopped_server_is_named_before_a_lost_gpu() -> None:
    """--check names the worst first: the server stopped (or gone) before a GPU of it."""
    base = _lost(still_snapshot(), 3)
    startup = replace(base.analysis.startup, state="stopped", stopped_by="SIGTERM received")
    # Stopped: /metrics no longer answers.
    stopped = replace(base, analysis=replace(base.analysis, startup=startup), metrics=None)
    assert [a.kind for a in judge(stopped).alerts][:2] == ["server_stopped", "gpu_lost"]


def test_a_log_that_says_stopped_while_metrics_answer_is_flagged() -> None:
    """ "server stopped" never sits unflagged next to /metrics answering with fresh numbers."""
    base = still_snapshot()
    assert base.metrics is not None
    startup = replace(base.analysis.startup, state="stopped", stopped_by="SIGTERM received")
    both = judge(replace(base, analysis=replace(base.analysis, startup=startup)))
    assert both.level == Level.WARNING
    (alert,) = [a for a in both.alerts if a.subject == "server"]
    assert alert.kind == "mismatch"
    assert "the log says the server stopped" in alert.text
    assert "but /metrics answers with fresh numbers" in alert.text


def test_a_rounded_usage_on_the_batch_line_is_never_read_as_the_edge() -> None:
    """`#token: 151000, token usage: 0.95` of a 159,277-token pool is 94.80 %: SGLang rounds its
    own ratio to 0.01, the exact count is on the same line. A warning at 94.8 %, never the
    critical 95 %; the report says 94.80 %."""
    from datetime import datetime

    from kvtop.model.analysis import analyse
    from kvtop.report.text import print_snapshot
    from kvtop.sglang.story import fold_lines
    from tests.support.tui_support import analysis_snapshot

    line = (
        "[2026-02-27 09:09:07 TP0] Decode batch, #running-req: 12, #token: 151000, token usage: "
        "0.95, accept len: 2.81, accept rate: 0.60, cuda graph: True, gen throughput (token/s): "
        "512.34, #queue-req: 0, "
    )
    lines = [*STORY_LOG.read_text().splitlines(), line]
    snapshot = analysis_snapshot(analyse(fold_lines(lines), "story"))
    at = datetime(2026, 2, 27, 9, 9, 8).timestamp()  # one second after the line: current
    verdict = judge(replace(snapshot, taken_at=at))
    (alert,) = [a for a in verdict.alerts if a.kind == "kv_usage"]
    assert alert.level == Level.WARNING
    assert alert.text.startswith("KV cache 94.8% full (151,000 of 159,277 tokens, warning from 85%")
    out = io.StringIO()
    print_snapshot(snapshot, Console(file=out, width=300, highlight=False, soft_wrap=False))
    assert "151,000 tokens in use, KV usage 94.80%" in out.getvalue()
