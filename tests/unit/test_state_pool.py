"""A hybrid model's recurrent-state pool beside the KV usage: parsed from real batch lines,
shown in the report and the JSON, exported, and watched for a climb the running requests do
not explain (the slot leak that preceded a watchdog hang)."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import datetime

import pytest
from rich.console import Console

from kvtop.model.analysis import analyse
from kvtop.model.kv_usage import kv_now
from kvtop.model.snapshot import Snapshot
from kvtop.model.status.levels import DEFAULT_THRESHOLDS, Level, Thresholds
from kvtop.model.status.watch import Watch, judged
from kvtop.report.json_report import snapshot_json
from kvtop.report.text import print_snapshot
from kvtop.sglang.events import BatchStats
from kvtop.sglang.log_line import parse_line
from kvtop.sglang.metrics import parse_exposition
from kvtop.sglang.story import fold_lines
from tests.support.paths import REAL_LOGS
from tests.support.sglang_http import Deployment, build_exposition
from tests.support.still import still_snapshot
from tests.support.tui_support import analysis_snapshot

GRANITE_LOG = REAL_LOGS / "50-pr18040-granite-4h-micro-mamba-single-gpu.log"  # 38 state slots

# Real batch lines of hybrid models, as posted: a Mamba hybrid's decode line (fixture 40, a
# public benchmark's notes), a MiniCPM prefill line (fixture 70), an NPU Qwen3-Next prefill line
# (sgl-project/sglang#30047) and a DP-attention Qwen3-Next one (sgl-project/sglang#10622).
DECODE_40 = (REAL_LOGS / "40-sigterm-drain-hybrid-decode.log").read_text().splitlines()[0]
PREFILL_70 = (
    (REAL_LOGS / "70-minicpm-serving-runtimeerror-sigquit-shell-killed.log")
    .read_text()
    .splitlines()[0]
)
PREFILL_NPU = (
    "[2026-07-04 04:31:24 TP0] Prefill batch, #new-seq: 12, #new-token: 43008, #cached-token: "
    "0, full token usage: 0.14, mamba usage: 0.20, #running-req: 1, #queue-req: 97, "
    "#pending-token: 109585, npu graph: False, input throughput (token/s): 15734.14"
)
PREFILL_DP = (
    "[2025-12-26 23:02:39 DP1 TP1 EP1] Prefill batch, #new-seq: 1, #new-token: 6, "
    "#cached-token: 0, full token usage: 0.00, mamba usage: 0.00, #running-req: 0, "
    "#queue-req: 0, "
)


def batch(line: str) -> BatchStats:
    event = parse_line(line)
    assert isinstance(event, BatchStats)
    return event


@pytest.mark.parametrize(
    ("line", "usage", "slots", "running"),
    [
        (DECODE_40, 0.13, 4, 1),
        (PREFILL_70, 0.15, None, 2),
        (PREFILL_NPU, 0.20, None, 1),
        (PREFILL_DP, 0.0, None, 0),
    ],
)
def test_real_batch_lines_carry_the_state_pool(
    line: str, usage: float, slots: int | None, running: int
) -> None:
    event = batch(line)
    assert (event.mamba_usage, event.mamba_slots_used, event.running_reqs) == (
        usage,
        slots,
        running,
    )
    assert not any(key.startswith("mamba") for key in event.extra)


def test_a_plain_models_batch_line_has_no_state_pool() -> None:
    event = batch(
        "[2026-04-05 20:02:51] Decode batch, #running-req: 32, #token: 11179, token usage: 0.08, "
        "cuda graph: True, gen throughput (token/s): 1635.11, #queue-req: 0"
    )
    assert (event.mamba_usage, event.mamba_slots_used) == (None, None)


# -- a Granite-4H server (38 state slots) serving: decode lines as SGLang 0.5.8 prints them ---
def decode_line(at: datetime, running: int, slots_used: int) -> str:
    """The exact text of SGLang 0.5.8's hybrid decode line (scheduler_metrics_mixin's f-string)."""
    return (
        f"[{at:%Y-%m-%d %H:%M:%S} TP0] Decode batch, #running-req: {running}, #full token: "
        f"{running * 900}, full token usage: 0.02, mamba num: {slots_used}, mamba usage: "
        f"{slots_used / 38:.2f}, cuda graph: True, gen throughput (token/s): 412.50, "
        "#queue-req: 0, "
    )


START = datetime(2026, 2, 1, 0, 10, 0)


def serving(readings: list[tuple[int, int]]) -> list[Snapshot]:
    """One snapshot per minute, each a second after that minute's decode line; `readings`:
    (running requests, state slots used) per minute."""
    base = GRANITE_LOG.read_text().splitlines()
    snapshots = []
    lines: list[str] = []
    for minute, (running, used) in enumerate(readings):
        at = START.replace(minute=START.minute + minute)
        lines.append(decode_line(at, running, used))
        snapshot = analysis_snapshot(analyse(fold_lines([*base, *lines]), "granite"))
        snapshots.append(replace(snapshot, taken_at=at.timestamp() + 1))
    return snapshots


def test_the_report_and_the_json_show_the_state_pool_beside_the_kv_usage() -> None:
    (snapshot,) = serving([(8, 22)])
    pool = kv_now(snapshot).state_pool
    assert pool is not None
    # 22 of the log's 38 slots: the exact share, not the line's rounded 0.58.
    assert (round(pool.usage_pct or 0, 2), pool.slots_used, pool.slots) == (57.89, 22, 38)
    out = io.StringIO()
    print_snapshot(snapshot, Console(file=out, width=300, highlight=False, soft_wrap=False))
    assert "state pool: 57.89% in use (22 / 38 slots; from the log's batch line)" in out.getvalue()
    data = json.loads(json.dumps(snapshot_json(snapshot)))
    assert data["state_pool"] == {
        "usage_pct": 57.89,
        "slots_used": 22,
        "slots": 38,
        "source": "log",
    }
    assert data["runtime"]["latest_batch"]["TP0"]["mamba_slots_used"] == 22


def test_a_plain_model_has_no_state_pool_anywhere() -> None:
    plain = still_snapshot()  # Kimi-K2.5, metrics without any mamba family
    assert kv_now(plain).state_pool is None
    assert snapshot_json(plain)["state_pool"] is None
    out = io.StringIO()
    print_snapshot(plain, Console(file=out, width=300, highlight=False, soft_wrap=False))
    assert "state pool" not in out.getvalue()
    # SGLang 0.5.14 sends the state-pool gauges as zeros for a plain model: still none.
    zeros = parse_exposition(build_exposition(Deployment(version="0.5.14", mamba_slots=0)))
    assert zeros.mamba_usage == 0.0
    assert kv_now(replace(plain, metrics=zeros)).state_pool is None


def test_metrics_win_over_the_batch_line_when_scraped() -> None:
    (snapshot,) = serving([(8, 22)])
    scraped = parse_exposition(
        build_exposition(Deployment(version="0.5.14", mamba_slots=38, mamba_used=30))
    )
    pool = kv_now(replace(snapshot, metrics=scraped)).state_pool
    assert pool is not None
    assert (round(pool.usage_pct or 0, 2), pool.slots_used, pool.slots, pool.source_kind) == (
        78.95,
        30,
        38,
        "metrics",
    )


# -- the climb -------------------------------------------------------------------------------
def watched(snapshots: list[Snapshot], t: Thresholds = DEFAULT_THRESHOLDS) -> list[Level]:
    watch = Watch(t)
    return [watch.look(s)[0].level_of("state_pool_climbing") for s in snapshots]


def test_a_pool_that_climbs_while_the_running_requests_stay_level_is_a_warning() -> None:
    slots = [22, 22, 23, 24, 25, 26, 27]
    snapshots = serving([(8, used) for used in slots])
    watch = Watch()
    verdicts = [watch.look(s)[0] for s in snapshots]
    levels = [v.level_of("state_pool_climbing") for v in verdicts]
    # 4 of 38 slots (10.5 points) by minute 5, from the 22 slots of minute 0.
    assert levels == [Level.OK] * 5 + [Level.WARNING] * 2
    (alert,) = [a for a in verdicts[-1].alerts if a.kind == "state_pool_climbing"]
    assert alert.subject == "state pool"
    assert alert.text.startswith(
        "state pool usage climbed from 0.58 to 0.71, 22 to 27 slots over 6m00s while running "
        "requests stayed at 8: slots are not being freed"
    )
    assert "warning from 10 points within 10m00s" in alert.text
    # One look (--once, --check) cannot see a climb.
    assert judged(snapshots[-1]).verdict.level_of("state_pool_climbing") == Level.OK


def test_a_pool_that_climbs_with_the_running_requests_is_load() -> None:
    readings = [(8, 22), (8, 22), (9, 23), (9, 24), (10, 25), (11, 26), (11, 27)]
    assert watched(serving(readings)) == [Level.OK] * 7


def test_the_climb_and_its_window_are_the_users_to_set() -> None:
    snapshots = serving([(8, used) for used in [22, 22, 23, 24, 25, 26, 27]])
    # 20 points: 5 of 38 slots (13.2 points) are under it.
    assert watched(snapshots, Thresholds(state_pool_climb_pct=20)) == [Level.OK] * 7
    # A 2-minute window: never 4 slots within it.
    assert watched(snapshots, Thresholds(state_pool_window_s=120)) == [Level.OK] * 7


def test_a_climb_seen_on_metrics_with_the_running_requests_level() -> None:
    plain = still_snapshot()

    def at(minute: int, used: int, running: int = 16) -> Snapshot:
        dep = Deployment(version="0.5.14", mamba_slots=64, mamba_used=used, running=running)
        metrics = parse_exposition(build_exposition(dep))
        return replace(plain, metrics=metrics, taken_at=plain.taken_at + 60 * minute)

    leak = [at(0, 36), at(2, 39), at(4, 42), at(6, 46)]  # 9.4 points by minute 4, then 15.6
    assert watched(leak) == [Level.OK, Level.OK, Level.OK, Level.WARNING]
    watch = Watch()
    (alert,) = [a for s in leak for a in watch.look(s)[0].alerts if a.kind == "state_pool_climbing"]
    assert alert.text.startswith(
        "state pool usage climbed from 0.56 to 0.72, 36 to 46 slots over 6m00s while running "
        "requests stayed at 16"
    )
    load = [at(0, 36, 16), at(2, 39, 18), at(4, 42, 20), at(6, 46, 21)]
    assert watched(load) == [Level.OK] * 4
