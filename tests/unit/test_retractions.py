"""Retractions: SGLang's retraction lines (real ones, as posted) parsed and folded, its counter
read from /metrics, a count since the start and a rate over a window, the report, the JSON,
--check's performance data, the exporter, and the retractions_frequent warning with SGLang's
rule in this server's values."""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta

import pytest
from rich.console import Console

from kvtop.export import families as ff
from kvtop.export.collector import render
from kvtop.model.analysis import analyse
from kvtop.model.build_snapshot import SnapshotInputs, build_snapshot
from kvtop.model.snapshot import Snapshot, SourceHealth, SourceState
from kvtop.model.status.levels import Level, Thresholds
from kvtop.model.status.watch import Watch
from kvtop.report.check import performance_data
from kvtop.report.json_report import snapshot_json
from kvtop.report.text import print_snapshot
from kvtop.sglang import events as ev
from kvtop.sglang.log_line import parse_line
from kvtop.sglang.metrics import MetricsSample, parse_exposition
from kvtop.sglang.story import fold_lines
from tests.support.paths import STORY_LOG
from tests.support.sglang_http import Deployment, build_exposition

# Real lines as posted: a 0.5.x server under load (a public benchmark's notes), SGLang's own
# tuning guide's example (a build without #new_tokens_gained), and 0.4.6's words for the same
# event on a DeepSeek-R1 TP16 deployment (sgl-project/sglang#4184).
V05 = (
    "[2026-09-13 16:06:07] KV cache pool is full. Retract requests. #retracted_reqs: 1, "
    "#new_tokens_gained: 646, #new_token_ratio: 0.0980 -> 0.3487"
)
GUIDE = "KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_token_ratio: 0.9998 -> 1.0000"
ISSUE_4184 = [
    "[2025-03-07 21:49:33 TP13] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.1474 -> 0.1845",
    "[2025-03-07 21:49:33 TP12] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.1474 -> 0.1845",
    "[2025-03-07 21:49:33 TP10] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.1474 -> 0.1845",
    "[2025-03-07 21:49:45 TP9] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.0980 -> 0.1919",
    "[2025-03-07 21:49:45 TP11] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.0980 -> 0.1919",
    "[2025-03-07 21:49:45 TP8] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.0980 -> 0.1919",
    "[2025-03-07 21:49:45 TP12] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.0980 -> 0.1919",
    "[2025-03-07 21:49:45 TP14] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.0980 -> 0.1919",
    "[2025-03-07 21:49:45 TP13] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.0980 -> 0.1919",
    "[2025-03-07 21:49:45 TP15] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.0980 -> 0.1919",
    "[2025-03-07 21:49:45 TP10] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.0980 -> 0.1919",
]
# The story's server (Kimi-K2.5, TP8, SGLang 0.5.8): schedule_conservativeness=1.0,
# max_running_requests=48; ready at 09:03, its last line at 09:09:04.
STORY = STORY_LOG.read_text().splitlines()
BODY = V05.split("] ", 1)[1]  # the 0.5.x text, to be logged at other times


def retraction(line: str) -> ev.Retraction:
    event = parse_line(line)
    assert isinstance(event, ev.Retraction), event
    return event


@pytest.mark.parametrize(
    ("line", "fields"),
    [
        (V05, (1, 646, None, 0.098, 0.3487)),
        (GUIDE, (1, None, None, 0.9998, 1.0)),
        (ISSUE_4184[0], (1, None, None, 0.1474, 0.1845)),
        # 0.5.14+ for a hybrid model: SGLang's f-string with its #mamba_num_gained.
        (
            "[2026-05-24 03:51:47 TP0] KV cache pool is full. Retract requests. #retracted_reqs: "
            "2, #new_tokens_gained: 13312, #mamba_num_gained: 2, #new_token_ratio: 0.4000 -> 0.5200",
            (2, 13312, 2, 0.4, 0.52),
        ),
    ],
)
def test_each_versions_line_is_a_retraction(
    line: str, fields: tuple[int, int | None, int | None, float, float]
) -> None:
    event = retraction(line)
    assert (
        event.retracted_reqs,
        event.new_tokens_gained,
        event.mamba_num_gained,
        event.ratio_before,
        event.ratio_after,
    ) == fields
    assert event.rejected == ()


def test_an_impossible_number_is_refused_and_named() -> None:
    event = retraction(
        V05.replace("#retracted_reqs: 1", "#retracted_reqs: -3").replace("0.0980", "nan")
    )
    assert (event.retracted_reqs, event.ratio_before, event.ratio_after) == (None, None, 0.3487)
    assert event.rejected == (
        "#retracted_reqs: -3 (negative count)",
        "#new_token_ratio nan (not a ratio from 0 to 1)",
    )


def test_decode_out_of_memory_is_a_retraction_never_a_failure() -> None:
    tracker = fold_lines([*STORY, *ISSUE_4184[:1]])
    startup = tracker.current
    assert startup.failures == [] and startup.state == "ready"
    assert startup.retractions.requests == 1


def test_every_tp_rank_logs_the_same_retraction_once_counted() -> None:
    record = fold_lines(ISSUE_4184).current.retractions
    # TP8-TP15 of one DP group: TP10, TP12 and TP13 logged both retractions, the others one.
    assert (record.lines, record.requests, record.new_token_ratio) == (11, 2, 0.1919)
    assert record.latest_at == datetime(2025, 3, 7, 21, 49, 45)


def test_dp_groups_retract_on_their_own_and_add_up() -> None:
    lines = [f"[2026-09-13 16:06:07 DP{dp} TP{dp}] {BODY}" for dp in (0, 1) for _ in range(dp + 1)]
    record = fold_lines(lines).current.retractions
    assert (record.requests, record.tokens_gained) == (3, 3 * 646)


# -- a server retracting: the story's server, then retraction lines at `at` -------------------
READY = datetime(2026, 2, 27, 9, 9, 4)  # the story's last line


def log_snapshots(
    times_s: list[float], looks_s: list[float], t: Thresholds | None = None
) -> list[Snapshot]:
    """The story's log with one retraction line `times_s` after its end, looked at `looks_s`
    after it by one watch (as the live view does)."""
    watch = Watch(t or Thresholds())
    out = []
    for look in looks_s:
        lines = [f"[{READY + timedelta(seconds=s):%Y-%m-%d %H:%M:%S} TP0] {BODY}" for s in times_s]
        analysis = analyse(
            fold_lines(
                [*STORY, *[line for s, line in zip(times_s, lines, strict=True) if s <= look]]
            ),
            "story",
        )
        out.append(snapshot(analysis, (READY + timedelta(seconds=look)).timestamp(), None, watch))
    return out


def snapshot(analysis, taken_at: float, metrics: MetricsSample | None, watch: Watch) -> Snapshot:
    return build_snapshot(
        SnapshotInputs(
            analysis,
            taken_at=taken_at,
            metrics=metrics,
            sources=(
                SourceHealth("log", SourceState.OK),
                SourceHealth("nvml", SourceState.OFF, "--no-gpus", asked_off=True),
            ),
        ),
        watch=watch,
    )


STORM = [20.0 * i for i in range(14)]  # 14 retractions in 4m20s


def alert_text(snap: Snapshot) -> str:
    (alert,) = [a for a in snap.verdict.alerts if a.kind == "retractions_frequent"]
    return alert.text


def test_a_storm_in_the_log_is_a_warning_with_sglangs_rule_in_this_servers_values() -> None:
    (snap,) = log_snapshots(STORM, [270.0])
    found = snap.retractions
    assert found is not None
    assert (found.count, found.in_window, found.per_min, found.window_s, found.source) == (
        14,
        14,
        2.8,
        300.0,
        "log",
    )
    assert snap.verdict.level == Level.WARNING
    assert alert_text(snap) == (
        "14 requests retracted in the last 5 min (2.8/min): the KV pool fills during decode and "
        "SGLang takes running requests back to compute again later; SGLang's rule: raise "
        "--schedule-conservativeness (now 1.0, try 1.3); if they go on, lower "
        "--max-running-requests (now 48); warning from 2/min"
    )


def test_a_few_retractions_are_fine_and_the_storm_clears_when_the_window_passes() -> None:
    few = log_snapshots([0.0, 60.0, 120.0], [130.0])[0]
    assert few.retractions is not None and few.retractions.count == 3
    assert few.verdict.level_of("retractions_frequent") == Level.OK
    # Ten minutes on: the 14 are still counted since the start, none within the window.
    later = log_snapshots(STORM, [270.0, 900.0])
    assert [s.verdict.level_of("retractions_frequent") for s in later] == [Level.WARNING, Level.OK]
    assert later[1].retractions is not None
    assert (later[1].retractions.count, later[1].retractions.per_min) == (14, 0.0)


def test_the_rate_and_its_window_are_the_users_to_set() -> None:
    (lenient,) = log_snapshots(STORM, [270.0], Thresholds(retractions_per_min_warning=3))
    assert lenient.verdict.level_of("retractions_frequent") == Level.OK
    # A one-minute window holds the last 3 (at 3m40s, 4m00s, 4m20s): 3/min.
    (short,) = log_snapshots(STORM, [270.0], Thresholds(retractions_window_s=60))
    assert short.retractions is not None and short.retractions.per_min == 3.0
    assert alert_text(short).startswith("3 requests retracted in the last 1 min (3.0/min)")


def test_no_retraction_line_is_none_counted_and_nothing_shown() -> None:
    (quiet,) = log_snapshots([], [60.0])
    assert quiet.retractions is not None
    assert (quiet.retractions.count, quiet.retractions.per_min) == (0, 0.0)
    out = io.StringIO()
    print_snapshot(quiet, Console(file=out, width=300, highlight=False, soft_wrap=False))
    assert "retractions:" not in out.getvalue()
    assert "retractions=0;;;0; retractions_per_min=0.00;2;;0;" in performance_data(
        quiet, Thresholds()
    )


def test_the_report_json_check_and_exporter_say_the_same() -> None:
    (snap,) = log_snapshots(STORM, [270.0])
    out = io.StringIO()
    print_snapshot(snap, Console(file=out, width=300, highlight=False, soft_wrap=False))
    assert (
        "retractions: 14 retracted since start · 2.8/min over 5 min (from the log; latest "
        "2026-02-27 09:13:24; new_token_ratio 0.3487)"
    ) in out.getvalue()
    data = json.loads(json.dumps(snapshot_json(snap)))
    assert data["retractions"] == {
        "count": 14,
        "per_min": 2.8,
        "window_s": 300.0,
        "in_window": 14,
        "latest_at": "2026-02-27 09:13:24",
        "source": "log",
        "rate_source": "log",
        "new_token_ratio": 0.3487,
    }
    assert data["verdict"]["alerts"][0]["name"] == "retractions_frequent"
    perf = performance_data(snap, Thresholds())
    assert "retractions=14;;;0; retractions_per_min=2.80;2;;0;" in perf
    families = {f.name: f for f in render(snap, "gpu-host")}
    total = families[ff.RETRACTED_REQUESTS.removesuffix("_total")]
    assert [s.value for s in total.samples if s.name == ff.RETRACTED_REQUESTS] == [14]
    assert [s.value for s in families[ff.RETRACTIONS_PER_MINUTE].samples] == [2.8]


# -- from /metrics: SGLang's counter -----------------------------------------------------------
def scraped(retracted: int | None, dp_size: int = 1) -> MetricsSample:
    dep = Deployment(version="0.5.8", tp_size=8, dp_size=dp_size, retracted=retracted)
    return parse_exposition(build_exposition(dep))


def test_the_counter_adds_dp_groups_and_its_absence_before_the_first_is_zero() -> None:
    assert scraped(7, dp_size=2).retracted_requests_total == 14
    assert scraped(0).retracted_requests_total == 0  # only the gauge: none yet
    assert scraped(None).retracted_requests_total is None  # before 0.5.8: not exported


def metrics_snapshots(totals: list[int], step_s: float = 30.0) -> list[Snapshot]:
    """The story's log (no retraction line) and /metrics read every `step_s`."""
    watch = Watch()
    analysis = analyse(fold_lines(STORY), "story")
    return [
        snapshot(analysis, READY.timestamp() + step_s * i, scraped(total), watch)
        for i, total in enumerate(totals)
    ]


def test_metrics_count_and_rate_win_over_the_log_once_their_readings_span_a_minute() -> None:
    snaps = metrics_snapshots([0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44])
    first = snaps[0].retractions
    assert first is not None
    # One reading: the count is the counter's; the rate the log's (no line: 0) until a minute.
    assert (first.count, first.source, first.rate_source, first.per_min) == (
        0,
        "metrics",
        "log",
        0.0,
    )
    assert snaps[1].retractions is not None and snaps[1].retractions.rate_source == "log"
    at_minute = snaps[2].retractions
    assert at_minute is not None
    assert (at_minute.count, at_minute.rate_source, at_minute.per_min) == (8, "metrics", 8.0)
    last = snaps[-1].retractions
    assert last is not None  # 5 minutes of readings: 40 in 300 s
    assert (last.count, last.in_window, last.per_min, last.window_s) == (44, 40, 8.0, 300.0)
    assert last.latest_at == READY.timestamp() + 30 * 11  # when the counter last grew
    assert [s.verdict.level_of("retractions_frequent") for s in snaps[:3]] == [
        Level.OK,
        Level.OK,
        Level.WARNING,
    ]


def test_a_counter_that_starts_again_is_a_new_start() -> None:
    snaps = metrics_snapshots([30, 40, 50, 2, 2, 2])
    after = snaps[-1].retractions
    assert after is not None
    assert (after.count, after.per_min) == (2, 0.0)  # readings from the restart on
