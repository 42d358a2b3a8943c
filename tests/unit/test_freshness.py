"""Freshness, pure: source ages, when they are stale, the header's state and level, the KV
panel's source and age, and `sources[].age_s` in the JSON. Snapshots come from the real demo
scenario and the real parser (tests/support/still.py, fixture logs), changed with
dataclasses.replace."""

from __future__ import annotations

import math
import os
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from kvtop.live.view_state import ViewState, kv_facts, status_facts
from kvtop.model.kv_usage import BATCH_CURRENT_S, kv_usage, source_text
from kvtop.model.mismatch import Mismatch
from kvtop.model.snapshot import Snapshot, SourceHealth, SourceState
from kvtop.model.status.freshness import is_fresh, stale_after_s, stale_age_s
from kvtop.model.status.levels import Alert, Level, Thresholds
from kvtop.model.status.server_status import ServerStatus, header_state
from kvtop.model.status.watch import Watch, judged
from kvtop.model.verdict import Verdict
from kvtop.report.json_report import snapshot_json
from kvtop.sglang.metrics import parse_exposition
from tests.support.paths import STORY_LOG
from tests.support.sglang_http import Deployment, build_exposition
from tests.support.tui_support import demo_snapshot, log_snapshot

pytestmark = pytest.mark.usefixtures("utc_zone")

READY = ServerStatus("ready", "ready 2h14m", 0, 8040.0)
STARTING = ServerStatus("starting", "starting: load weights (5/8 ranks)", 0, None)


def _sources(log: float | None = 0.1, metrics: float | None = 0.1, state: str = "ok"):
    return (
        SourceHealth("log", "ok", None, log),
        SourceHealth("nvml", "ok", None, 0.1),
        SourceHealth("metrics", state, None if state == "ok" else "no answer", metrics),
    )


def _with_sources(snapshot: Snapshot, **ages: float | None) -> Snapshot:
    """The snapshot with these sources' ages (and a metrics source down when it is stale)."""
    sources = []
    for s in snapshot.sources:
        if s.name in ages:
            s = replace(s, age_s=ages[s.name])
        sources.append(s)
    return replace(snapshot, sources=tuple(sources))


# -- ages and staleness ------------------------------------------------------------------------
def test_stale_after_three_intervals() -> None:
    assert stale_after_s(1.0) == 3.0 and stale_after_s(0.25) == 0.75
    assert is_fresh(SourceHealth("log", SourceState.OK, None, 3.0), 1.0)
    assert not is_fresh(SourceHealth("log", SourceState.OK, None, 3.1), 1.0)
    assert not is_fresh(SourceHealth("log", SourceState.OK, None, None), 1.0)  # never read
    assert not is_fresh(None, 1.0)
    assert stale_age_s(SourceHealth("metrics", SourceState.OFF, None, 185.0), 1.0) == 185.0
    assert stale_age_s(SourceHealth("metrics", SourceState.OK, None, 2.0), 1.0) is None
    assert stale_age_s(SourceHealth("metrics", SourceState.OFF, None, None), 1.0) is None


# -- the header ----------------------------------------------------------------------------------
OK = Verdict(Level.OK, (), "ready")


def _verdict(*alerts: tuple[Level, str]) -> Verdict:
    found = tuple(Alert(level, kind, f"{kind} words", "server") for level, kind in alerts)
    return Verdict(max((a.level for a in found), key=list(Level).index), found, "words")


def test_ready_is_green_while_the_verdict_is_ok() -> None:
    state = header_state(READY, _sources(), 1.0, OK)
    assert (state.text, state.level) == ("ready 2h14m", Level.OK)


def test_the_header_level_is_the_verdicts_and_counts_its_alerts() -> None:
    # Metrics that stopped answering: the words say for how long, the verdict decides.
    down = _sources(metrics=185.0, state=SourceState.OFF)
    state = header_state(READY, down, 1.0, _verdict((Level.CRITICAL, "server_down")))
    assert (state.text, state.level) == (
        "✖ ready 2h14m · metrics down 3m05s · ✖1",
        Level.CRITICAL,
    )
    # One late scrape is not "down": the age is still within three intervals.
    late = _sources(metrics=2.5, state=SourceState.DEGRADED)
    assert header_state(READY, late, 1.0, OK) == header_state(READY, _sources(), 1.0, OK)


def test_words_without_an_alert_never_colour_the_header() -> None:
    # An idle server without --enable-metrics logs nothing for minutes: said, not alarmed.
    stale = _sources(log=250.0, metrics=None, state=SourceState.OFF)
    state = header_state(READY, stale, 1.0, OK)
    assert (state.text, state.level) == ("ready 2h14m · log stale 4m10s", Level.OK)
    journal = (SourceHealth("journal", SourceState.DEGRADED, "removed", 250.0),)
    assert header_state(READY, journal, 1.0, OK).text == "ready 2h14m · journal stale 4m10s"


def test_a_starting_server_is_not_judged_by_its_metrics() -> None:
    # /metrics answers only once the server is ready: no "down" while it starts.
    state = header_state(STARTING, _sources(metrics=None, state=SourceState.OFF), 1.0, OK)
    assert (state.text, state.level) == (STARTING.text, Level.OK)


def test_a_mismatch_and_a_lost_gpu_are_named_at_the_verdicts_level() -> None:
    mismatch = _verdict((Level.WARNING, "mismatch"))
    state = header_state(READY, _sources(), 1.0, mismatch)
    assert (state.text, state.level) == (
        "▲ ready 2h14m · sources disagree · ▲1",
        Level.WARNING,
    )
    lost = _verdict((Level.CRITICAL, "gpu_lost"))
    state = header_state(READY, _sources(), 1.0, lost, lost_gpus=(3,), gpu_count=8)
    assert (state.text, state.level) == ("✖ ready 2h14m · GPU 3 lost · ✖1", Level.CRITICAL)
    many = header_state(READY, (), 1.0, lost, lost_gpus=range(8), gpu_count=8)
    assert "all 8 GPUs lost" in many.text
    assert (
        "GPUs 1, 2 lost" in header_state(READY, (), 1.0, lost, lost_gpus=(1, 2), gpu_count=8).text
    )
    both = _verdict((Level.CRITICAL, "gpu_lost"), (Level.WARNING, "source_down"))
    state = header_state(
        READY,
        _sources(metrics=185.0, state=SourceState.OFF),
        1.0,
        both,
        lost_gpus=(3,),
        gpu_count=8,
    )
    assert state.level == Level.CRITICAL
    assert state.text == "✖ ready 2h14m · GPU 3 lost · metrics down 3m05s · ✖1 ▲1"
    restarted = ServerStatus("ready", "ready 5m00s", 2, 300.0)
    assert header_state(restarted, _sources(), 1.0, OK).text == "ready 5m00s · restarted 2×"


def test_status_facts_from_a_snapshot_with_a_mismatch_and_a_lost_gpu() -> None:
    """The view state's status facts from a real snapshot: the level is its verdict's (a
    mismatch warns, a lost GPU is critical); stale ages beside the markers."""
    base = demo_snapshot()
    state = ViewState(source_label="demo", snapshot=base)
    facts = status_facts(state, lambda: base.taken_at)
    assert facts.level == Level.OK and facts.state == "ready 1m00s"
    assert facts.source_ages == (None, None, None)

    mismatch = Mismatch("max_total_num_tokens", 159277, 655360, "metrics")
    state.snapshot = judged(replace(base, mismatches=(mismatch,)))
    facts = status_facts(state, lambda: base.taken_at)
    assert facts.level == Level.WARNING
    assert facts.state == "▲ ready 1m00s · sources disagree · ▲1"

    gpus = list(base.gpus)
    gpus[3] = replace(gpus[3], sample=replace(gpus[3].sample, status="lost"))
    state.snapshot = judged(replace(base, gpus=tuple(gpus)))
    facts = status_facts(state, lambda: base.taken_at)
    assert facts.level == Level.CRITICAL and facts.state == "✖ ready 1m00s · GPU 3 lost · ✖1"

    state.snapshot = judged(_with_sources(base, metrics=185.0))
    facts = status_facts(state, lambda: base.taken_at)
    assert facts.state == "ready 1m00s · metrics down 3m05s"  # its numbers still arrive: no alert
    assert facts.source_ages == (None, None, "3m05s")
    state.problem = "kvtop stopped reading its sources"
    assert status_facts(state, lambda: base.taken_at).state_kind == "failed"


# -- the KV panel's source and age ----------------------------------------------------------------
def _story_snapshot(tmp_path: Path) -> Snapshot:
    log = tmp_path / "story.log"
    log.write_text(STORY_LOG.read_text())
    return log_snapshot(log)


LAST_BATCH = datetime(2026, 2, 27, 9, 9, 4)  # the story log's latest batch line


def test_a_batch_line_standing_in_says_its_time_and_age(tmp_path: Path) -> None:
    snapshot = _story_snapshot(tmp_path)
    usage = kv_usage(snapshot, now=LAST_BATCH + timedelta(minutes=4, seconds=5))
    assert usage.source_kind == "log" and usage.current
    assert usage.used_tokens == 48211 and usage.age_s == 245.0
    assert source_text(usage, 3.0) == "log decode batch line 09:09:04, 4m05s old"
    # No clock (or the log's clock ahead of ours): the line without an age.
    assert source_text(kv_usage(snapshot), 3.0) == "log decode batch line 09:09:04"
    ahead = kv_usage(snapshot, now=LAST_BATCH - timedelta(hours=1))
    assert ahead.age_s is None and ahead.current


def test_an_old_batch_line_is_the_last_known_usage_not_the_current_one(tmp_path: Path) -> None:
    snapshot = _story_snapshot(tmp_path)
    at_bound = kv_usage(snapshot, now=LAST_BATCH + timedelta(seconds=BATCH_CURRENT_S))
    assert at_bound.current
    old = kv_usage(snapshot, now=LAST_BATCH + timedelta(days=294))
    assert not old.current and old.used_tokens == 48211  # the numbers stay, as the last known
    assert all(c.fit_free_now is None for c in old.capacity)  # nothing is known to be free now
    assert source_text(old, 3.0) == (
        "last known usage: log decode batch line 2026-02-27 09:09:04, 294d0h ago"
    )
    low = Thresholds(kv_usage_warning_pct=10, kv_usage_critical_pct=20)
    then = (LAST_BATCH + timedelta(days=294)).timestamp()
    state = ViewState(source_label="log", snapshot=judged(replace(snapshot, taken_at=then), low))
    facts = kv_facts(state, lambda: then)
    assert facts is not None and facts.usage_level == Level.OK  # no alert colour for old numbers
    soon = (LAST_BATCH + timedelta(seconds=5)).timestamp()
    state.snapshot = judged(replace(snapshot, taken_at=soon), low)
    fresh = kv_facts(state, lambda: soon)
    assert fresh is not None and fresh.usage_level == Level.CRITICAL  # 30 % over a 20 % threshold


def test_metrics_say_their_age_only_once_stale() -> None:
    base = demo_snapshot()
    usage = kv_usage(base)
    assert usage.source_kind == "metrics" and source_text(usage, 3.0) is None
    stale = kv_usage(_with_sources(base, metrics=7.0))
    assert stale.age_s == 7.0 and source_text(stale, 3.0) == "metrics, 7s old"


def test_metrics_from_another_server_keep_their_label(tmp_path: Path) -> None:
    snapshot = _story_snapshot(tmp_path)
    other = parse_exposition(build_exposition(Deployment(max_total_num_tokens=655360)))
    mismatch = Mismatch("max_total_num_tokens", 159277, 655360, "metrics")
    snapshot = replace(snapshot, metrics=other, mismatches=(mismatch,))
    usage = kv_usage(snapshot, now=LAST_BATCH + timedelta(seconds=30))
    assert usage.source_kind == "log" and usage.max_tokens != 655360
    assert source_text(usage, 3.0) == (
        "log decode batch line 09:09:04, 30s old (metrics are from another server)"
    )


def test_kv_usage_and_queue_levels_from_the_thresholds() -> None:
    base = demo_snapshot()
    state = ViewState(source_label="demo", snapshot=base)
    facts = kv_facts(state, lambda: base.taken_at)
    assert facts is not None and facts.usage_level == Level.OK and facts.queue_level == Level.OK
    assert facts.usage.usage_pct is not None and 60 < facts.usage.usage_pct < 85
    state.snapshot = judged(base, Thresholds(kv_usage_warning_pct=50, kv_usage_critical_pct=95))
    facts = kv_facts(state, lambda: base.taken_at)
    assert facts is not None and facts.usage_level == Level.WARNING
    # The queue: how long it has not emptied, from successive snapshots the watch judged.
    queued = parse_exposition(build_exposition(Deployment(queued=4)))
    watch = Watch()
    for seconds in (0, 20, 40):
        later = replace(base, taken_at=base.taken_at + seconds, metrics=queued)
        verdict, _ = watch.look(later)
    state.snapshot = replace(later, verdict=verdict)
    facts = kv_facts(state, lambda: base.taken_at + 40)
    assert facts is not None and facts.queued_for_s == 40.0 and facts.queue_level == Level.WARNING


# -- JSON -----------------------------------------------------------------------------------------
def test_json_sources_carry_their_age_rounded_or_null() -> None:
    snapshot = _with_sources(demo_snapshot(), log=0.04, nvml=12.345, metrics=None)
    sources = {s["name"]: s for s in snapshot_json(snapshot)["sources"]}  # type: ignore[union-attr]
    assert sources["log"]["age_s"] == 0.0
    assert sources["nvml"]["age_s"] == 12.3
    assert sources["metrics"]["age_s"] is None
    assert set(sources["log"]) == {"name", "state", "detail", "age_s"}
    assert not any(
        isinstance(s["age_s"], float) and math.isnan(s["age_s"]) for s in sources.values()
    )


def test_text_report_says_each_sources_age_and_where_kv_comes_from(tmp_path: Path) -> None:
    from rich.console import Console

    from kvtop.report.text import render_snapshot

    def text(snapshot: Snapshot) -> str:
        console = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
        console.print(render_snapshot(snapshot))
        console.file.close()
        return console.export_text()

    demo = _with_sources(demo_snapshot(), log=0.04, nvml=1.25, metrics=None)
    report = text(demo)
    assert "last good reading: log 0.0 s ago · nvml 1.2 s ago · metrics none yet" in report
    assert "KV usage from: metrics" in report
    story = _story_snapshot(tmp_path)  # taken at the fixed clock: months after its batch line
    assert "KV usage from: last known usage: log decode batch line 2026-02-27 09:09:04" in text(
        story
    )
