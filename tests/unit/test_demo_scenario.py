"""The `--demo` scenario: replay timing, rewritten stamps, simulated GPUs and /metrics."""

from __future__ import annotations

import math
import re
from datetime import datetime

import pytest

from kvtop.demo.scenario import STARTUP_S, DemoScenario
from kvtop.sglang.events import BatchStats
from kvtop.sglang.log_line import parse_line
from kvtop.sglang.metrics import parse_exposition
from kvtop.sglang.startup import StartupTracker
from kvtop.sglang.story import fold_lines
from tests.support.paths import STORY_LOG

T0 = 1_780_000_000.0
STAMP = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
FILE_LINES = STORY_LOG.read_text(encoding="utf-8").split("\n")[:-1]
READY_TEXT = "The server is fired up and ready to roll!"
TOTAL_GIB = 95.59


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _fmt(epoch: float) -> str:
    return datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S")


def _stamp(line: str) -> datetime:
    match = STAMP.search(line)
    assert match, line
    return datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S")


def _replay(speed: float, until_s: float, step: float = 0.25, seed: int = 7):
    """Poll like the app would; returns (scenario, clock, [(clock offset, line)])."""
    clock = FakeClock()
    demo = DemoScenario(speed, clock=clock, seed=seed)
    out: list[tuple[float, str]] = []
    while True:
        out += [(clock.now - T0, line) for line in demo.due_lines()]
        if clock.now - T0 + step > until_s:
            return demo, clock, out
        clock.now += step


def _served(speed: float = 1.0, seed: int = 7):
    """A scenario after finish_startup, its released lines folded into a tracker."""
    clock = FakeClock()
    demo = DemoScenario(speed, clock=clock, seed=seed)
    demo.finish_startup()
    tracker = fold_lines(demo.due_lines(), StartupTracker())
    return demo, clock, tracker


def test_ready_line_released_after_the_startup_replay_at_speed_1() -> None:
    clock = FakeClock()
    demo = DemoScenario(clock=clock)
    seen_ready_at = None
    while clock.now - T0 < 25:
        lines = demo.due_lines()
        if any(READY_TEXT in line for line in lines):
            seen_ready_at = clock.now - T0
            assert demo.ready
            assert demo.exposition() is not None
            break
        assert not demo.ready
        assert demo.exposition() is None  # not listening before the ready line
        clock.now += 0.25
    assert seen_ready_at is not None
    assert 18.0 <= seen_ready_at <= 22.0


def test_speed_10_replays_the_startup_in_about_two_seconds() -> None:
    _, _, released = _replay(10.0, 3.0, step=0.05)
    ready_at = next(t for t, line in released if READY_TEXT in line)
    assert 1.8 <= ready_at <= 2.2
    # the weight load gap (3.5 minutes in the story) is capped, so phases step visibly
    load_end = next(t for t, line in released if "Load weight end" in line)
    load_begin = next(t for t, line in released if "Load weight begin" in line)
    assert 0.2 <= load_end - load_begin <= 0.2 * STARTUP_S / 10 + 0.06


def test_lines_come_in_file_order_once_with_only_the_stamp_rewritten() -> None:
    demo, _, released = _replay(5.0, 60.0, step=0.5)
    lines = [line for _, line in released]
    assert len(lines) > len(FILE_LINES)  # the file, then generated batch lines
    for original, replayed in zip(FILE_LINES, lines, strict=False):
        assert STAMP.sub("[X", original) == STAMP.sub("[X", replayed)
    for line in lines[len(FILE_LINES) :]:
        assert "TP0] Decode batch, " in line or "TP0] Prefill batch, " in line
    assert demo.due_lines() == []  # nothing twice


def test_ready_stamp_is_the_release_clock_and_startup_keeps_its_durations() -> None:
    clock = FakeClock()
    demo = DemoScenario(clock=clock)
    lines: list[str] = []
    while not demo.ready:
        clock.now += demo.next_due_in_s()
        lines += demo.due_lines()
    ready = next(line for line in lines if READY_TEXT in line)
    assert _stamp(ready).strftime("%Y-%m-%d %H:%M:%S") == _fmt(clock.now)
    assert ready.startswith(f"[{_fmt(clock.now)}] ")
    assert "[" + _fmt(clock.now) + " TP0] " not in ready
    # every startup line is shifted by the same constant: the story's phase durations hold
    shifts = {
        (_stamp(new) - _stamp(old)).total_seconds()
        for old, new in zip(FILE_LINES, lines, strict=False)
        if STAMP.search(old)
    }
    assert len(shifts) == 1
    first_rank_line = next(line for line in lines if " TP0] " in line)
    assert (_stamp(ready) - _stamp(first_rank_line)).total_seconds() == 260  # 09:02:11 -> 06:31
    assert " TP0] Init torch distributed begin." in first_rank_line


def test_released_lines_fold_into_a_ready_8_rank_startup() -> None:
    _, _, tracker = _served()
    startup = tracker.current
    assert startup.state == "ready"
    assert len(startup.ranks) == 8
    assert startup.summary is not None
    assert startup.summary.max_total_num_tokens == 159277
    assert all(r.target.kv_tokens == 159277 for r in startup.ranks.values())
    assert startup.latest_batch["TP0"].kind in ("prefill", "decode")
    assert startup.failure is None


def test_gpu_memory_follows_the_startup_phases() -> None:
    clock = FakeClock()
    demo = DemoScenario(clock=clock)
    tracker = StartupTracker()
    bare = demo.nvml_reading(tracker.current)
    assert bare.available and bare.problem is None and bare.driver_version == "580.95.05"
    assert [g.index for g in bare.gpus] == list(range(8))
    assert len({g.uuid for g in bare.gpus}) == 8
    for gpu in bare.gpus:
        assert gpu.total_gib == TOTAL_GIB
        assert gpu.free_gib == pytest.approx(TOTAL_GIB - 0.42, abs=0.02)
        assert gpu.utilization_pct == 0 and gpu.processes == ()
        assert 34 <= gpu.temperature_c <= 38 and 70 <= gpu.power_w <= 90
        assert re.fullmatch(r"00000000:1[0-9A-F]:00\.0", gpu.pci_bus_id)
    # mid weight load: free is the rank's "Load weight begin" avail, the GPU is busy
    while not any(r.target.load_begun for r in tracker.current.ranks.values()):
        clock.now += demo.next_due_in_s()
        fold_lines(demo.due_lines(), tracker)
    clock.now += 0.5
    fold_lines(demo.due_lines(), tracker)
    loading = demo.nvml_reading(tracker.current).gpus[0]
    assert loading.free_gib == pytest.approx(93.17)
    assert 15 <= loading.utilization_pct <= 35


def test_gpu_memory_after_startup_is_last_avail_minus_runtime() -> None:
    demo, _, tracker = _served()
    reading = demo.nvml_reading(tracker.current)
    gpu0 = reading.gpus[0]
    assert 7.0 <= gpu0.free_gib < 7.40  # summary line: available_gpu_mem=7.40 GB
    assert gpu0.used_gib == pytest.approx(TOTAL_GIB - gpu0.free_gib, abs=1e-4)
    assert gpu0.reserved_gib is None
    for gpu in reading.gpus:
        assert 35 <= gpu.utilization_pct <= 97  # story traffic is running at +60 s
        assert len(gpu.processes) == 1
        proc = gpu.processes[0]
        assert proc.used_gib == pytest.approx(gpu.used_gib - 0.5, abs=1e-4)
        assert demo.process_ranks()[proc.pid] == f"TP{gpu.index}"
    assert sorted(demo.process_ranks().values()) == [f"TP{i}" for i in range(8)]


def test_exposition_parses_and_the_load_moves() -> None:
    demo, clock, _ = _served()
    text = demo.exposition()
    assert text is not None and "# TYPE sglang:num_running_reqs gauge" in text
    sample = parse_exposition(text)
    assert list(sample.per_rank) == ["TP0"]  # one publisher, like SGLang's default
    assert sample.max_total_num_tokens == 159277
    assert sample.used_tokens is not None and 0 < sample.used_tokens <= 159277
    assert sample.running_requests is not None and 0 < sample.running_requests <= 48
    assert sample.context_len == 262144 and sample.page_size == 1
    assert sample.hicache_host_total_tokens == 637109
    assert 0 <= (sample.hicache_host_used_tokens or 0) <= 637109
    clock.now += 30
    later = parse_exposition(demo.exposition() or "")
    assert (later.running_requests, later.used_tokens) != (
        sample.running_requests,
        sample.used_tokens,
    )


def test_load_stays_in_range_over_two_hours() -> None:
    demo, clock, tracker = _served()
    running, queued, used, temps = [], [], [], []
    previous_temps = None
    for _ in range(1800):
        clock.now += 4.0
        fold_lines(demo.due_lines(), tracker)
        sample = parse_exposition(demo.exposition() or "")
        assert sample.running_requests is not None and sample.used_tokens is not None
        running.append(sample.running_requests)
        queued.append(sample.queued_requests or 0)
        used.append(sample.used_tokens)
        assert 0 <= sample.running_requests <= 48
        assert sample.used_tokens <= 0.921 * 159277
        throughput, accept = sample.gen_throughput or 0.0, sample.spec_accept_length or 0.0
        if clock.now - T0 > 300:  # the story's traffic has handed over to the waves
            assert 2.4 <= accept <= 3.2
            assert 0.2 <= (sample.cache_hit_rate or 0) <= 0.6
            assert 20 * sample.running_requests <= throughput <= 50 * sample.running_requests
        gpus = demo.nvml_reading(tracker.current).gpus
        temps.append(max(g.temperature_c for g in gpus))
        for gpu in gpus:
            assert 0 < gpu.power_w <= 600 and gpu.temperature_c <= 72
            assert 7.0 <= gpu.free_gib <= 7.45
        if previous_temps is not None:  # 4 s apart: no jumps
            assert all(
                abs(a - g.temperature_c) <= 4 for a, g in zip(previous_temps, gpus, strict=True)
            )
        previous_temps = [g.temperature_c for g in gpus]
    assert max(running) >= 40 and min(running) <= 15  # waves and bursts, not a flat line
    assert max(used) >= 0.85 * 159277
    assert max(queued) > 0  # requests queue when the pool is near full
    assert max(temps) >= 60


def test_generated_batch_lines_parse_and_match_the_metrics() -> None:
    clock = FakeClock()
    demo = DemoScenario(clock=clock)
    clock.now += 400  # past the story's traffic
    demo.due_lines()
    for _ in range(20):
        clock.now += demo.next_due_in_s()
        lines = demo.due_lines()
        assert lines
        event = parse_line(lines[-1])
        assert isinstance(event, BatchStats) and event.kind == "decode"
        assert event.prefix.rank == "TP0"
        assert lines[-1].startswith(f"[{_fmt(clock.now)} TP0] Decode batch, #running-req: ")
        assert lines[-1].endswith(", #queue-req: " + str(event.queued_reqs) + ", ")
        sample = parse_exposition(demo.exposition() or "")
        assert sample.running_requests == event.running_reqs
        assert sample.used_tokens == event.tokens
        assert sample.gen_throughput == event.gen_throughput
        assert sample.spec_accept_length == event.accept_len
        assert event.accept_rate == pytest.approx((event.accept_len - 1) / 3, abs=0.006)
        for line in lines[:-1]:
            prefill = parse_line(line)
            assert isinstance(prefill, BatchStats) and prefill.kind == "prefill"
            assert prefill.new_seqs and prefill.new_seqs > 0


def test_same_seed_and_clock_give_identical_output() -> None:
    def run(seed: int) -> list[object]:
        clock = FakeClock()
        demo = DemoScenario(3.0, clock=clock, seed=seed)
        tracker = StartupTracker()
        out: list[object] = []
        for _ in range(400):
            lines = demo.due_lines()
            fold_lines(lines, tracker)
            out += [lines, demo.exposition(), demo.nvml_reading(tracker.current)]
            clock.now += 1.0
        return out

    assert run(7) == run(7)
    assert run(7) != run(8)


@pytest.mark.parametrize("speed", [0, -1.0, math.nan, math.inf])
def test_bad_speed_is_refused(speed: float) -> None:
    with pytest.raises(ValueError):
        DemoScenario(speed, clock=FakeClock())


def test_a_long_pause_does_not_build_a_backlog() -> None:
    clock = FakeClock()
    demo = DemoScenario(clock=clock)
    clock.now += 10 * 3600
    first = demo.due_lines()
    assert len(FILE_LINES) < len(first) <= len(FILE_LINES) + 20
    assert demo.ready
    clock.now += 3600
    assert 0 < len(demo.due_lines()) <= 20
    assert demo.due_lines() == []
    assert 0 < demo.next_due_in_s() <= 4.0


def test_finish_startup_marks_an_hour_old_server_as_ready_a_minute_ago() -> None:
    clock = FakeClock()
    demo = DemoScenario(clock=clock)
    demo.finish_startup()
    lines = demo.due_lines()
    ready = next(line for line in lines if READY_TEXT in line)
    assert ready.startswith(f"[{_fmt(clock.now - 60)}] ")
    assert demo.ready
    # the story's traffic up to +60 s has been released, nothing after it yet
    assert parse_line(lines[-1]) is not None or "HTTP/1.1" in lines[-1]
    assert all((_stamp(line) - _stamp(ready)).total_seconds() <= 60 for line in lines[-5:])
