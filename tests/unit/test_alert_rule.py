"""The alert rule (tui/kvtop/model/status/alert_rule.py) on real snapshots: the demo's still (a ready TP8
server with GPUs and metrics) and fixture logs through the real parser, each changed in the one
way a test is about with dataclasses.replace."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvtop.model.memory.gpu_reading import RefusedValue
from kvtop.model.mismatch import Mismatch
from kvtop.model.snapshot import Snapshot, SourceHealth, SourceState
from kvtop.model.status.alert_rule import (
    anything_read,
    asked_off,
    evaluate,
    pct_1,
    queue_since,
)
from kvtop.model.status.gpu_alerts import gpu_alerts
from kvtop.model.status.levels import DEFAULT_THRESHOLDS, Level, Thresholds, glyph
from kvtop.model.status.watch import Watch, judged
from kvtop.report.check import check
from kvtop.session import Options, Session
from tests.support.paths import REAL_LOGS
from tests.support.still import still_snapshot
from tests.support.tui_support import log_snapshot

FAILED_LOG = REAL_LOGS / "17-inferencex2128-dsv4-pro-h200-tp8-mfs-valueerror.log"
STARTING_LOG = REAL_LOGS / "02-pr17392-dp4-tp4-ep4-qwen3moe-a.log"


@pytest.fixture(scope="module")
def ready() -> Snapshot:
    return still_snapshot()


def kinds(
    snapshot: Snapshot, t: Thresholds = DEFAULT_THRESHOLDS, **kw: float
) -> list[tuple[str, str]]:
    return [(a.level, a.kind) for a in evaluate(snapshot, t, **kw)]  # type: ignore[arg-type]


def with_gpu(snapshot: Snapshot, index: int, **changes: object) -> Snapshot:
    gpus = list(snapshot.gpus)
    gpu = gpus[index]
    gpus[index] = replace(gpu, sample=replace(gpu.sample, **changes))
    return judged(replace(snapshot, gpus=tuple(gpus)))


def with_source(snapshot: Snapshot, health: SourceHealth) -> Snapshot:
    sources = tuple(health if s.name == health.name else s for s in snapshot.sources)
    return judged(replace(snapshot, sources=sources))


def test_a_healthy_ready_server_has_no_alert(ready: Snapshot) -> None:
    assert evaluate(ready) == ()
    assert check(ready, DEFAULT_THRESHOLDS).line.startswith("KVTOP OK - ")


def test_kv_usage_bands(ready: Snapshot) -> None:
    # The still's pool is 70.0% full.
    assert kinds(ready, Thresholds(kv_usage_warning_pct=60)) == [(Level.WARNING, "kv_usage")]
    critical = evaluate(ready, Thresholds(kv_usage_warning_pct=50, kv_usage_critical_pct=70))
    assert [(a.level, a.kind, a.subject) for a in critical] == [
        (Level.CRITICAL, "kv_usage", "KV cache")
    ]
    assert "70.0% full" in critical[0].text and "critical from 70%" in critical[0].text
    assert "111,494 of 159,277 tokens" in critical[0].text


def test_a_lost_gpu_is_critical_and_has_no_other_alert(ready: Snapshot) -> None:
    lost = with_gpu(ready, 3, status="lost", temperature_c=120, free_gib=0.0)
    alerts = evaluate(lost)
    assert [(a.level, a.kind, a.subject) for a in alerts] == [(Level.CRITICAL, "gpu_lost", "GPU 3")]
    assert "GPU 3 (TP3) is lost" in alerts[0].text


def test_a_gpu_whose_memory_cannot_be_read(ready: Snapshot) -> None:
    error = with_gpu(ready, 0, status="error", field_errors=(("memory", "Unknown Error"),))
    (alert,) = evaluate(error)
    assert (alert.level, alert.kind) == (Level.CRITICAL, "gpu_lost")
    assert "memory: Unknown Error" in alert.text


def test_temperature_and_power(ready: Snapshot) -> None:
    hot = with_gpu(ready, 1, temperature_c=85)
    assert kinds(hot) == [(Level.WARNING, "temperature")]
    hotter = with_gpu(ready, 1, temperature_c=94)
    assert kinds(hotter) == [(Level.CRITICAL, "temperature")]
    # A GPU drawing its enforced limit (the software power cap engaged) is normal under load.
    at_limit = with_gpu(ready, 2, power_w=600.0, power_limit_w=600.0, clock_event_reasons=0x4)
    assert evaluate(at_limit) == ()


@pytest.mark.parametrize(
    ("bits", "named"),
    [
        (0x8, "HW slowdown"),
        (0x20, "SW thermal slowdown"),
        (0x40 | 0x4, "HW thermal slowdown"),
        (0x80, "HW power brake slowdown"),
    ],
)
def test_throttled_for_heat_or_hardware_is_a_warning(
    ready: Snapshot, bits: int, named: str
) -> None:
    (alert,) = evaluate(with_gpu(ready, 2, clock_event_reasons=bits))
    assert (alert.level, alert.kind, alert.subject) == (Level.WARNING, "throttle", "GPU 2")
    assert f"GPU 2 (TP2) clocks lowered: {named}" in alert.text
    assert "power cap" not in alert.text


def test_idle_or_settings_reasons_raise_nothing(ready: Snapshot) -> None:
    # Idle, application clocks, sync boost, display clocks: settings, not trouble.
    assert evaluate(with_gpu(ready, 2, clock_event_reasons=0x1 | 0x2 | 0x10 | 0x100)) == ()


def test_an_unreadable_handle_names_the_gpu_its_rank_and_the_error(ready: Snapshot) -> None:
    bad = with_gpu(ready, 3, status="error", field_errors=(("handle", "Unknown Error, code 999"),))
    (alert,) = evaluate(bad)
    assert (alert.level, alert.kind, alert.subject) == (Level.CRITICAL, "gpu_lost", "GPU 3")
    assert alert.text.startswith("GPU 3 (TP3) cannot be read through NVML (handle: Unknown Error")
    result = check(bad, DEFAULT_THRESHOLDS)
    assert result.exit_code == 2
    assert "KVTOP CRITICAL - GPU 3 (TP3) cannot be read" in result.line


def test_ranks_without_a_gpu_here_are_critical(ready: Snapshot) -> None:
    seven = judged(replace(ready, gpus=ready.gpus[:7], missing_ranks=("TP7",)))
    (alert,) = evaluate(seven)
    assert (alert.level, alert.kind, alert.subject) == (Level.CRITICAL, "gpu_missing", "TP7")
    assert "TP7 from the log has no GPU here (NVML sees 7 GPUs)" in alert.text
    result = check(seven, DEFAULT_THRESHOLDS)
    assert (result.exit_code, result.line.split(" - ")[0]) == (2, "KVTOP CRITICAL")
    assert "TP7" in result.line


def test_headroom_after_startup_under_the_safe_margin(ready: Snapshot) -> None:
    # The still keeps about 7.2 GiB free per GPU.
    assert kinds(ready, Thresholds(safe_margin_gib=8)) == [(Level.WARNING, "headroom")] * 8
    low = evaluate(with_gpu(ready, 5, free_gib=2.5))
    assert [(a.level, a.kind, a.subject) for a in low] == [(Level.WARNING, "headroom", "GPU 5")]
    assert "2.50 GiB free after startup, under the 5 GiB safe margin" in low[0].text


def test_headroom_from_the_log_without_gpus(ready: Snapshot) -> None:
    no_gpus = replace(ready, gpus=())
    assert kinds(no_gpus) == []
    (alert,) = evaluate(no_gpus, Thresholds(safe_margin_gib=8))
    assert (alert.kind, alert.subject) == ("headroom", "TP0")
    assert "reference rank" in alert.text


def test_server_down_after_ready_is_critical(ready: Snapshot) -> None:
    down = with_source(
        ready, SourceHealth("metrics", SourceState.OFF, "nothing listens on http://x:1.")
    )
    down = replace(down, metrics=None)
    (alert,) = evaluate(down)
    assert (alert.level, alert.kind, alert.subject) == (Level.CRITICAL, "server_down", "server")
    assert alert.text.startswith("server stopped or unreachable after the log said ready")


def test_a_scrape_problem_while_numbers_arrive_is_a_warning(ready: Snapshot) -> None:
    slow = with_source(
        ready, SourceHealth("metrics", SourceState.DEGRADED, "the scrape timed out.")
    )
    assert kinds(slow) == [(Level.WARNING, "source_down")]


def test_metrics_down_while_starting_is_no_alert() -> None:
    starting = log_snapshot(STARTING_LOG)
    began = starting.analysis.startup.first_time
    assert began is not None
    down = replace(
        starting,
        taken_at=began.timestamp() + 60,
        sources=(
            *starting.sources,
            SourceHealth("metrics", SourceState.OFF, "connection refused."),
        ),
    )
    assert kinds(down) == []


def test_other_sources_down(ready: Snapshot) -> None:
    gone = with_source(
        ready, SourceHealth("log", SourceState.DEGRADED, "log file x.log was removed.")
    )
    (alert,) = evaluate(gone)
    assert (alert.level, alert.kind, alert.subject) == (Level.WARNING, "source_down", "log")
    assert "removed" in alert.text
    nvml = with_source(ready, SourceHealth("nvml", SourceState.OFF, "NVML library not found."))
    assert kinds(nvml) == [(Level.WARNING, "source_down")]


def test_sources_the_user_turned_off_are_no_alert() -> None:
    """A source the user did not ask for is marked so by the session (SourceHealth.asked_off)."""
    session = Session(Options(nvml=False, metrics=False))
    snapshot = session.snapshot()
    assert all(asked_off(s) for s in snapshot.sources), snapshot.sources
    assert evaluate(snapshot) == ()
    assert not anything_read(snapshot)


def test_a_mismatch_is_a_warning(ready: Snapshot) -> None:
    other = replace(
        ready,
        mismatches=(
            Mismatch("model", "Kimi-K2.5", "glm-5.3-flash", "metrics"),
            Mismatch("max_total_num_tokens", 158_616, 655_360, "metrics"),
        ),
    )
    (alert,) = evaluate(other)
    assert (alert.level, alert.kind, alert.subject) == (Level.WARNING, "mismatch", "metrics")
    assert "glm-5.3-flash, 655,360 tokens" in alert.text


def test_startup_failed_is_critical() -> None:
    failed = log_snapshot(FAILED_LOG)
    alerts = evaluate(failed)
    assert alerts[0].level == Level.CRITICAL and alerts[0].kind == "startup_failed"
    assert "not enough memory" in alerts[0].text and "mem-fraction-static" in alerts[0].text


def test_a_startup_in_progress_too_long() -> None:
    starting = log_snapshot(STARTING_LOG)
    began = starting.analysis.startup.first_time
    assert began is not None
    at = began.timestamp()
    assert kinds(replace(starting, taken_at=at + 60)) == []
    slow = evaluate(replace(starting, taken_at=at + 3600))
    assert [(a.level, a.kind) for a in slow] == [(Level.WARNING, "startup_slow")]
    assert "after 1h00m" in slow[0].text and "last line" in slow[0].text
    assert kinds(replace(starting, taken_at=at + 3600), Thresholds(startup_warning_s=7200)) == []


def test_queue_counts_only_with_its_duration(ready: Snapshot) -> None:
    assert kinds(ready) == []  # one snapshot: how long the queue has waited is unknown
    assert kinds(ready, queued_for_s=45) == [(Level.WARNING, "queue")]
    assert kinds(ready, queued_for_s=400) == [(Level.CRITICAL, "queue")]
    assert queue_since(None, 0, 100.0) is None
    assert queue_since(None, None, 100.0) is None
    assert queue_since(None, 3, 100.0) == 100.0
    assert queue_since(100.0, 5, 130.0) == 100.0
    assert queue_since(100.0, 0, 130.0) is None


def test_critical_comes_first(ready: Snapshot) -> None:
    many = with_gpu(with_gpu(ready, 1, temperature_c=85), 6, status="lost")
    assert kinds(many) == [(Level.CRITICAL, "gpu_lost"), (Level.WARNING, "temperature")]
    hot_and_low = with_gpu(many, 1, free_gib=1.0)
    rows = gpu_alerts(hot_and_low)  # the level each GPU row is coloured by
    assert {i: a.level for i, a in rows.items() if a.level != Level.OK} == {
        6: Level.CRITICAL,
        1: Level.WARNING,
    }
    assert check(hot_and_low, DEFAULT_THRESHOLDS).line.startswith("KVTOP CRITICAL - ")
    assert glyph(Level.WARNING) == "▲" and glyph(Level.CRITICAL) == "✖" and glyph(Level.OK) == ""


@pytest.mark.parametrize(
    ("value", "shown"),
    [(99.97, "99.97%"), (84.99, "84.99%"), (95.0, "95.0%"), (0.04, "0.04%"), (87.897, "87.9%")],
)
def test_percentages_never_read_as_an_edge_they_are_not_on(value: float, shown: str) -> None:
    """kvtop.fmt's rule, as on every screen: never 100% below 100, never 0% above 0, and never
    the threshold (85, 95) a value under it is compared with."""
    assert pct_1(value, 85, 95) == shown


def test_ranks_without_a_gpu_for_a_log_not_tied_to_this_host_are_a_warning(ready: Snapshot) -> None:
    """A log copied from another machine says nothing about this one's GPUs: nothing ties it
    to this host (no journal here, no process titles, no GPU holding what it itemises)."""
    elsewhere = judged(
        replace(
            ready,
            gpus=(),
            rank_mapping="none",
            log_from_this_host=False,
            missing_ranks=("TP0", "TP1"),
        )
    )
    alerts = [a for a in elsewhere.verdict.alerts if a.kind == "gpu_missing"]
    assert [(a.level, a.subject) for a in alerts] == [(Level.WARNING, "TP0, TP1")]
    assert "nothing here ties the log to this host" in alerts[0].text


def _without_server_processes(snapshot: Snapshot, **sample: object) -> Snapshot:
    gpus = tuple(
        replace(g, processes=(), sample=replace(g.sample, processes=(), **sample))
        for g in snapshot.gpus
    )
    return replace(snapshot, gpus=gpus, taken_at=snapshot.taken_at + 5)


def test_the_servers_processes_leaving_nvml_with_their_memory_held_is_critical(
    ready: Snapshot,
) -> None:
    # Watched: the ranks' processes were listed, now none is while every GPU still holds the
    # memory (killed, or hung): critical, naming the ranks and the GPUs.
    watch = Watch()
    healthy, _ = watch.look(ready)
    assert healthy.level == Level.OK
    gone, _ = watch.look(_without_server_processes(ready))
    assert gone.level == Level.CRITICAL
    (alert,) = [a for a in gone.alerts if a.kind == "processes_gone"]
    assert "(TP0–7 on GPUs 0–7)" in alert.text and "still hold 706.6 GiB" in alert.text
    assert gone.summary.startswith("the server's processes left NVML's list")
    # Back (a restart): cleared.
    back, timeline = watch.look(replace(ready, taken_at=ready.taken_at + 10))
    assert "processes_gone" not in back.kinds()
    assert any(seen.text.startswith("cleared: the server's processes") for seen in timeline)


def test_no_process_listed_from_the_first_look_is_no_alert(ready: Snapshot) -> None:
    # A host whose NVML lists no process at all (a container without the host's PID
    # namespace): one look, or looks that never listed the server, judge nothing.
    watch = Watch()
    for _ in range(3):
        verdict, _ = watch.look(_without_server_processes(ready))
        assert "processes_gone" not in verdict.kinds()


def test_processes_gone_and_memory_released_is_no_held_memory_alert(ready: Snapshot) -> None:
    watch = Watch()
    watch.look(ready)
    released = _without_server_processes(ready, used_gib=0.4, free_gib=139.0)
    verdict, _ = watch.look(released)
    assert "processes_gone" not in verdict.kinds()


def test_the_cause_named_is_the_check_that_failed_not_a_missing_feature(
    ready: Snapshot,
) -> None:
    # GPU 6's used memory one byte above its total, and clocks event reasons not found on this
    # driver (tolerated on every GPU): the memory is the cause named.
    total = ready.gpus[6].sample.total_gib
    refused = RefusedValue("memory_used", str(int(total * 2**30) + 1), "more than the GPU's total")
    broken = with_gpu(
        ready,
        6,
        status="error",
        field_errors=(("clock_event_reasons", "Function Not Found (NVML error 13)"),),
        rejected=(refused,),
        cause=("memory", "memory_used … (more than the GPU's total)"),
    )
    (alert,) = evaluate(broken)
    assert alert.kind == "gpu_lost"
    assert "its memory cannot be read" in alert.text and "memory_used" in alert.text
    assert "Function Not Found" not in alert.text


def test_a_serious_call_is_named_before_a_missing_feature(ready: Snapshot) -> None:
    broken = with_gpu(
        ready,
        2,
        status="error",
        field_errors=(
            ("clock_event_reasons", "Function Not Found (NVML error 13)"),
            ("temperature", "GPU is lost (NVML error 15)"),
        ),
        cause=("temperature", "GPU is lost (NVML error 15)"),
    )
    (alert,) = evaluate(broken)
    assert "(temperature: GPU is lost (NVML error 15))" in alert.text
    assert "Function Not Found" not in alert.text


def _metrics_404(snapshot: Snapshot, enable_metrics: bool | None) -> Snapshot:
    from kvtop.model.build_snapshot import _metrics_against_the_log
    from kvtop.model.snapshot import METRICS_DISABLED

    args = replace(snapshot.analysis.startup.server_args, enable_metrics=enable_metrics)  # type: ignore[type-var]
    analysis = replace(
        snapshot.analysis, startup=replace(snapshot.analysis.startup, server_args=args)
    )
    health = SourceHealth(
        "metrics",
        SourceState.OFF,
        "http://127.0.0.1:30000/metrics answers 404: the server runs without --enable-metrics",
        cause=METRICS_DISABLED,
    )
    sources = tuple(health if s.name == "metrics" else s for s in snapshot.sources)
    sources = _metrics_against_the_log(sources, analysis)
    return judged(replace(snapshot, analysis=analysis, sources=sources, metrics=None))


def test_metrics_404_against_a_log_with_enable_metrics_warns_naming_the_url(
    ready: Snapshot,
) -> None:
    warned = _metrics_404(ready, True)
    (alert,) = [a for a in warned.verdict.alerts if a.subject == "metrics"]
    assert alert.level == Level.WARNING
    assert "http://127.0.0.1:30000/metrics answers 404, but the log's server_args say " in (
        alert.text
    )
    assert "--url reaches another server or service" in alert.text
    source = next(s for s in warned.sources if s.name == "metrics")
    assert "runs without --enable-metrics" not in (source.detail or "")


@pytest.mark.parametrize("enable_metrics", [False, None])
def test_metrics_404_of_a_server_without_enable_metrics_is_no_alert(
    ready: Snapshot, enable_metrics: bool | None
) -> None:
    quiet = _metrics_404(ready, enable_metrics)
    assert not [a for a in quiet.verdict.alerts if a.subject == "metrics"]
