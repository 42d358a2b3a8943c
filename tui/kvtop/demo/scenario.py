"""The `kvtop --demo` scenario: the story log replayed in real time, then a simulated server.

Needs no GPU, no SGLang, no root. The embedded 8-GPU startup log is released line by line in
SGLang's own format (the caller runs kvtop's real parser on it), then the story's traffic, then
generated `Decode batch` lines. NVML readings and a `/metrics` exposition are simulated from the
same clock, consistent with the startup phases the caller folded and with the load the batch
lines report. Everything is a function of (seed, clock calls): tests and SVG snapshots rely on it.
"""

from __future__ import annotations

import functools
import hashlib
import math
import random
import re
import time
from bisect import bisect_right
from collections.abc import Callable
from datetime import datetime
from importlib import resources
from typing import NamedTuple

from kvtop.model.memory.gpu_reading import GpuProcess, GpuSample, NvmlReading
from kvtop.sglang.events import BatchStats
from kvtop.sglang.log_line import parse_line
from kvtop.sglang.start_state import READY, RankStartup, Startup

__all__ = ["LOG_NAME", "STARTUP_S", "DemoScenario"]

STARTUP_S = 20.0  # wall seconds the startup replay takes at speed 1
LOG_NAME = "kimi-k25-tp8-eagle3-hicache-0.5.8.log"

# The story's deployment (tests/fixtures/kimi-k25-tp8-eagle3-hicache-0.5.8.json).
GPUS = 8
TOTAL_GIB = 95.59
POOL_TOKENS = 159277
HOST_TOKENS = 637109  # HiCache host pool, per rank
CONTEXT_LEN = 262144
MAX_RUNNING = 48
GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
DRIVER_VERSION = "580.95.05"
PID_BASE = 41200

# Timeline rule: each gap between two distinct story seconds gets a share of the replay in
# proportion to its length, clamped to [1 %, 20 %] of the replay. Proportional alone would spend
# 80 % of it on the 3.5-minute weight load and flash through the ~20 phases after it.
_GAP_FLOOR = 0.01
_GAP_CAP = 0.20
_TICK_S = 4.0  # serving seconds between generated batch lines
_CATCH_UP_TICKS = 10  # after a long pause only the latest ticks are written, never a backlog
_BLEND_S = 48.0  # serving seconds over which the story's last load hands over to the waves
_TEMP_TAU_S = 30.0  # GPU thermal time constant, in serving seconds
_FULL = 0.92  # the scheduler keeps this much of the pool at most; beyond it requests queue
_EPS = 1e-6

_STAMP_RE = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
_STAMP_FMT = "%Y-%m-%d %H:%M:%S"
_READY_TEXT = "The server is fired up and ready to roll!"
# prometheus_client's multiprocess collector writes labels sorted by name; only TP0 publishes
# (SGLang's attn_tp_rank 0 scheduler, without --enable-metrics-for-all-schedulers).
_LABELS = (
    'engine_type="unified",model_name="moonshotai/Kimi-K2.5",'
    'moe_ep_rank="0",pp_rank="0",tp_rank="0"'
)


class _Load(NamedTuple):
    """What TP0's scheduler reports at one batch line (and its gauges hold until the next)."""

    running: int
    queue: int
    tokens: int
    accept: float
    throughput: float
    hit: float


_IDLE = _Load(0, 0, 0, 0.0, 0.0, 0.0)


class _Story(NamedTuple):
    lines: tuple[str, ...]
    rel_s: tuple[float, ...]  # story seconds relative to the ready line
    ready: int  # index of the ready line
    key_u: tuple[float, ...]  # serving seconds of the story's batch lines
    key_load: tuple[_Load, ...]


def _story_lines() -> list[str]:
    # Bytes split on "\n" only: the content is released byte for byte (tqdm's "\r" included).
    raw = resources.files("kvtop.data").joinpath(LOG_NAME).read_bytes().decode("utf-8")
    lines = raw.split("\n")
    if lines and not lines[-1]:
        lines.pop()
    return lines


def _line_times(lines: list[str]) -> list[datetime | None]:
    """Each line's time; unstamped lines (tqdm, warnings) inherit the previous line's time."""
    stamps: list[datetime | None] = []
    last: datetime | None = None
    for line in lines:
        match = _STAMP_RE.search(line)
        if match:
            stamp = datetime.strptime(match.group(1), _STAMP_FMT)
            last = stamp if last is None or stamp > last else last
        stamps.append(last)
    return stamps


def _next_load(load: _Load, event: BatchStats) -> _Load:
    """The load after one batch line: what it logged, the rest carried over from before."""
    hit = load.hit
    if event.kind == "prefill":
        new, cached = event.new_tokens or 0, event.cached_tokens or 0
        hit = cached / (new + cached) if new + cached else hit
    tokens = event.tokens
    if tokens is None:
        tokens = round((event.token_usage or 0.0) * POOL_TOKENS)
    return _Load(
        event.running_reqs or 0,
        event.queued_reqs or 0,
        tokens,
        load.accept if event.accept_len is None else event.accept_len,
        load.throughput if event.gen_throughput is None else event.gen_throughput,
        round(hit, 4),
    )


@functools.cache
def _story() -> _Story:
    lines = _story_lines()
    stamps = _line_times(lines)
    first = next(s for s in stamps if s is not None)
    ready = next(i for i, line in enumerate(lines) if _READY_TEXT in line)
    base = stamps[ready] or first
    rel = tuple(((s or first) - base).total_seconds() for s in stamps)
    key_u: list[float] = []
    key_load: list[_Load] = []
    load = _IDLE
    for i in range(ready + 1, len(lines)):
        event = parse_line(lines[i])
        if isinstance(event, BatchStats):
            load = _next_load(load, event)
            key_u.append(rel[i])
            key_load.append(load)
    return _Story(tuple(lines), rel, ready, tuple(key_u), tuple(key_load))


def _spread(gaps: list[float], total: float) -> list[float]:
    """Wall seconds per story gap: proportional, each within [floor, cap], summing to total."""
    if not gaps:
        return []
    low, high = _GAP_FLOOR * total, _GAP_CAP * total
    if len(gaps) * low >= total or len(gaps) * high <= total:
        return [total / len(gaps)] * len(gaps)

    def walls(scale: float) -> list[float]:
        return [min(high, max(low, scale * gap)) for gap in gaps]

    lo, hi = 0.0, 1.0
    while sum(walls(hi)) < total:
        hi *= 2
    for _ in range(80):  # bisection: the clamped sum grows monotonically with the scale
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sum(walls(mid)) < total else (lo, mid)
    out = walls(hi)
    return [w * total / sum(out) for w in out]


def _clamp(value: float, low: float, high: float) -> float:
    return min(high, max(low, value))


def _lerp(a: float, b: float, s: float) -> float:
    return a + (b - a) * s


def _fmt(epoch: float) -> str:
    return datetime.fromtimestamp(epoch).strftime(_STAMP_FMT)


class DemoScenario:
    """The demo server: `due_lines` for the log, `nvml_reading` and `exposition` for the rest.

    Time runs in two units: wall seconds since construction (the clock, plus what
    `finish_startup` skipped) and serving seconds since the ready line (story pace, = wall x
    speed). The load the gauges, GPUs and batch lines show is one function of serving seconds:
    during the story's own traffic it is the story's batch lines (log and /metrics agree), after
    it seeded slow waves plus bursts, blended in over `_BLEND_S`.
    """

    def __init__(
        self, speed: float = 1.0, *, clock: Callable[[], float] = time.time, seed: int = 7
    ) -> None:
        speed = float(speed)
        if not math.isfinite(speed) or speed <= 0:
            raise ValueError(f"demo speed must be a positive number, not {speed}")
        self._speed = speed
        self._clock = clock
        self._seed = seed
        self._t0 = clock()
        self._offset = 0.0  # moved forward by finish_startup
        self._story = story = _story()
        self._startup_s = STARTUP_S / speed
        rel, ready = story.rel_s, story.ready
        gaps = [rel[i] - rel[i - 1] for i in range(1, ready + 1) if rel[i] > rel[i - 1]]
        steps = iter(_spread(gaps, self._startup_s))
        wall, acc = [0.0], 0.0
        for i in range(1, ready + 1):
            acc += next(steps) if rel[i] > rel[i - 1] else 0.0
            wall.append(min(acc, self._startup_s))
        wall[ready] = self._startup_s  # exactly: the ready line lands on the planned second
        wall += [self._startup_s + r / speed for r in rel[ready + 1 :]]
        self._wall = tuple(wall)
        self._end_u = rel[-1]  # serving seconds of the story's last line
        self._story_end = story.key_load[-1] if story.key_load else _IDLE
        self._next = 0  # next file line
        self._next_tick = 1  # next generated batch tick (tick 0 is the story's last line)
        self._ready = False
        self._ready_clock: float | None = None  # clock time the ready line carries
        rng = random.Random(seed)
        # demand slow / fast, context per request, accept length, cache hit
        ranges = ((240, 360), (70, 110), (150, 260), (90, 150), (120, 200))
        self._periods = [rng.uniform(low, high) for low, high in ranges]
        self._phases = [rng.uniform(0.0, math.tau) for _ in ranges]
        # bursts: (period, shift, height), s
        self._bursts = [
            (rng.uniform(150, 420), rng.uniform(0, 420), rng.uniform(0.25, 0.45)) for _ in range(3)
        ]
        self._temps: list[float] | None = None
        self._temps_at = 0.0

    # -- clock ----------------------------------------------------------------------------------
    def _w(self) -> float:
        """Scenario wall seconds since construction."""
        return self._clock() + self._offset - self._t0

    def _serving_u(self) -> float:
        """Serving seconds since the ready line (story pace; negative before it)."""
        return (self._w() - self._startup_s) * self._speed

    def _tick_wall(self, k: int) -> float:
        return self._wall[-1] + k * _TICK_S / self._speed

    @property
    def ready(self) -> bool:
        """True once the server-ready line has been released."""
        return self._ready

    def started_at(self) -> float:
        """Clock time the simulated server's processes started: its log's first line."""
        ready = self._ready_clock
        if ready is None:
            ready = self._t0 - self._offset + self._startup_s
        return ready + self._story.rel_s[0]

    def finish_startup(self) -> None:
        """Jump so the whole startup is due now and 60 serving seconds have passed.

        Call it before the first `due_lines` (as `--once` and screenshots do): the stamps'
        shift is fixed by the first release, so the ready line then reads one minute ago.
        """
        target = self._startup_s + 60.0 / self._speed
        now = self._w()
        if now < target:
            self._offset += target - now

    def next_due_in_s(self) -> float:
        """Seconds until the next line is due: a file line, else the next generated batch."""
        if self._next < len(self._wall):
            return max(0.0, self._wall[self._next] - self._w())
        return max(0.0, self._tick_wall(self._next_tick) - self._w())

    # -- log lines ------------------------------------------------------------------------------
    def due_lines(self) -> list[str]:
        """Lines due since the previous call, in order, each once, with rewritten stamps."""
        w = self._w()
        if self._ready_clock is None:  # fixed once: all startup lines share one constant shift
            self._ready_clock = self._t0 - self._offset + self._startup_s
        out: list[str] = []
        lines = self._story.lines
        while self._next < len(lines) and self._wall[self._next] <= w + _EPS:
            out.append(self._render(self._next))
            self._ready = self._ready or self._next == self._story.ready
            self._next += 1
        if self._next == len(lines):
            now_k = math.floor((w - self._wall[-1]) * self._speed / _TICK_S + _EPS)
            if now_k >= self._next_tick:
                for k in range(max(self._next_tick, now_k - _CATCH_UP_TICKS + 1), now_k + 1):
                    out.extend(self._tick_lines(k))
                self._next_tick = now_k + 1
        return out

    def _render(self, i: int) -> str:
        assert self._ready_clock is not None
        rel = self._story.rel_s[i]
        # Startup lines keep the story's real durations (the server started minutes ago);
        # traffic lines carry the clock time they are released at, like generated ones.
        epoch = self._ready_clock + (rel if i <= self._story.ready else rel / self._speed)
        return _STAMP_RE.sub("[" + _fmt(epoch), self._story.lines[i])

    def _tick_lines(self, k: int) -> list[str]:
        assert self._ready_clock is not None
        load, before = self._tick_load(k), self._tick_load(k - 1)
        prefix = f"[{_fmt(self._ready_clock + self._tick_wall(k) - self._startup_s)} TP0] "
        usage = load.tokens / POOL_TOKENS
        out = []
        if load.running > before.running:  # new requests were admitted since the last line
            seqs = load.running - before.running
            prompt = round(seqs * load.tokens / load.running * 0.85)
            cached = int(prompt * load.hit) // 256 * 256
            out.append(
                f"{prefix}Prefill batch, #new-seq: {seqs}, #new-token: {prompt - cached}, "
                f"#cached-token: {cached}, token usage: {usage:.2f}, "
                f"#running-req: {before.running}, #queue-req: {load.queue}, "
            )
        out.append(
            f"{prefix}Decode batch, #running-req: {load.running}, #token: {load.tokens}, "
            f"token usage: {usage:.2f}, accept len: {load.accept:.2f}, "
            f"accept rate: {(load.accept - 1) / 3:.2f}, cuda graph: True, "
            f"gen throughput (token/s): {load.throughput:.2f}, #queue-req: {load.queue}, "
        )
        return out

    # -- load -----------------------------------------------------------------------------------
    def _wave(self, n: int, u: float) -> float:
        return math.sin(math.tau * u / self._periods[n] + self._phases[n])

    def _jitter(self, k: int, channel: int) -> float:
        """Deterministic noise in [-1, 1) per (seed, tick, channel), without keeping state."""
        digest = hashlib.blake2b(f"{self._seed}:{k}:{channel}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2**63 - 1.0

    def _tick_load(self, k: int) -> _Load:
        """The load at generated tick k: slow waves plus bursts, blended in from the story."""
        end = self._story_end
        if k <= 0:
            return end
        u = self._end_u + k * _TICK_S
        level = 0.5 + 0.25 * self._wave(0, u) + 0.12 * self._wave(1, u)
        for period, shift, height in self._bursts:  # rise over 8 s, decay over ~30 s
            x = (u + shift) % period
            level += height * (x / 8.0 if x < 8.0 else math.exp(-(x - 8.0) / 30.0))
        s = min(1.0, k * _TICK_S / _BLEND_S)
        s = s * s * (3 - 2 * s)
        demand = _lerp(end.running + end.queue, 52.0 * _clamp(level, 0.03, 1.2), s)
        story_ctx = end.tokens / end.running if end.running else 3500.0
        ctx = _lerp(story_ctx, 3500.0 + 600.0 * self._wave(2, u), s)  # tokens per request
        want = max(1, round(demand))
        running = min(MAX_RUNNING, want, int(_FULL * POOL_TOKENS / ctx))
        tokens = round(running * ctx * (1 + 0.02 * self._jitter(k, 1)))
        tokens = min(int(_FULL * POOL_TOKENS), tokens)
        accept = _clamp(2.8 + 0.25 * self._wave(3, u) + 0.1 * self._jitter(k, 2), 2.4, 3.2)
        accept = round(_lerp(end.accept or 2.8, accept, s), 2)
        per_req = accept * 14.5 * (1 - 0.2 * running / MAX_RUNNING)  # ~40 tok/s per request
        throughput = round(running * per_req * (1 + 0.04 * self._jitter(k, 3)), 2)
        hit = _clamp(0.4 + 0.14 * self._wave(4, u) + 0.04 * self._jitter(k, 4), 0.2, 0.6)
        hit = round(_lerp(end.hit, hit, s), 4)
        return _Load(running, want - running, tokens, accept, throughput, hit)

    def _load_at(self, u: float) -> _Load:
        """What the gauges hold at serving second u: the latest batch line's numbers."""
        if u >= self._end_u:
            return self._tick_load(math.floor((u - self._end_u) / _TICK_S + _EPS))
        i = bisect_right(self._story.key_u, u + _EPS) - 1
        return self._story.key_load[i] if i >= 0 else _IDLE

    # -- /metrics -------------------------------------------------------------------------------
    def exposition(self) -> str | None:
        """TP0's /metrics text now (SGLang 0.5.8 gauges); None before the ready line."""
        u = self._serving_u()
        if u < -_EPS:
            return None  # not listening yet
        load = self._load_at(u)
        first = self._story.key_u[0] if self._story.key_u else 0.0
        host = HOST_TOKENS * 0.75 * (1 - math.exp(-max(0.0, u - first) / 900.0))
        accept_rate = round(max(0.0, load.accept - 1) / 3, 4)  # 3 draft tokens per step
        gauges = (
            ("num_running_reqs", "The number of running requests.", load.running),
            ("num_used_tokens", "The number of used tokens.", load.tokens),
            ("token_usage", "The token usage.", round(load.tokens / POOL_TOKENS, 2)),
            ("gen_throughput", "The generation throughput (token/s).", load.throughput),
            ("num_queue_reqs", "The number of requests in the waiting queue.", load.queue),
            ("cache_hit_rate", "The prefix cache hit rate.", load.hit),
            ("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", POOL_TOKENS),
            ("spec_accept_length", "The average acceptance length of speculative decoding.", load.accept),
            ("spec_accept_rate", "The average acceptance rate of speculative decoding (`accepted tokens / total draft tokens` in batch).", accept_rate),
            ("decode_sum_seq_lens", "The sum of all sequence lengths in decode.", load.tokens),
            # Newer families (0.5.10 / 0.5.12) that kvtop reads, so the demo shows them too.
            ("hicache_host_used_tokens", "Number of tokens currently used in the host KV cache.", round(host)),
            ("hicache_host_total_tokens", "Total capacity of the host KV cache in tokens.", HOST_TOKENS),
            ("page_size", "KV cache page size in tokens.", 1),
            ("context_len", "Maximum context length.", CONTEXT_LEN),
        )  # fmt: skip
        out = []
        for name, doc, value in gauges:
            # repr(float) is prometheus_client's format for values below 1e6 (all of these).
            out += [
                f"# HELP sglang:{name} {doc}",
                f"# TYPE sglang:{name} gauge",
                f"sglang:{name}{{{_LABELS}}} {float(value)!r}",
            ]
        return "\n".join(out) + "\n"

    # -- NVML -----------------------------------------------------------------------------------
    def process_ranks(self) -> dict[int, str]:
        """pid -> rank label of the simulated scheduler processes."""
        return {PID_BASE + i: f"TP{i}" for i in range(GPUS)}

    def nvml_reading(self, startup: Startup) -> NvmlReading:
        """8 GPUs now: memory from each rank's latest logged avail, the rest from the load."""
        u, w = self._serving_u(), self._w()
        serving = startup.state == READY and u >= 0
        load = self._load_at(u) if serving else _IDLE
        act = min(1.0, load.running / 44.0)
        keep = None  # thermal lag: how much of the last temperature survives since last read
        if self._temps is not None:
            keep = math.exp(-max(0.0, w - self._temps_at) * self._speed / _TEMP_TAU_S)
        gpus: list[GpuSample] = []
        temps: list[float] = []
        for i in range(GPUS):
            rank = startup.ranks.get(f"TP{i}")
            wobble = math.sin(w * 0.9 + i * 1.7)
            offset = ((i * 5) % 7 - 3) * 0.7  # small, stable per-GPU differences
            free = TOTAL_GIB - (0.41 + 0.005 * (i % 5))  # bare CUDA context
            util, activity = 0.0, 0.0
            if rank is not None:
                avail = next(
                    (p.avail_gib for p in reversed(rank.phases) if p.avail_gib is not None), None
                )
                free = avail if avail is not None else free - (rank.target.init_dist_gib or 0.0)
                if serving:
                    free -= 0.05 + 0.30 * act  # runtime buffers grow with the batch
                    if load.running:
                        util, activity = _clamp(35 + 62 * act + 2 * wobble + offset, 35, 97), act
                elif _busy(rank):
                    util, activity = 24 + 9 * wobble, 0.25
            free = _clamp(free, 0.0, TOTAL_GIB)
            used = TOTAL_GIB - free
            idle_w = 72.0 + (i * 7) % 17
            idle_c, hot_c = 34.0 + (i * 3) % 5, 66.0 + (i * 5) % 7
            temp = idle_c + (hot_c - idle_c) * activity  # where the GPU settles at this load
            if keep is not None and self._temps is not None:
                temp += (self._temps[i] - temp) * keep  # ... approached smoothly, never a jump
            temps.append(temp)
            process = GpuProcess(PID_BASE + i, round(max(0.0, used - 0.5), 4))
            gpus.append(
                GpuSample(
                    index=i,
                    name=GPU_NAME,
                    uuid=_uuid(i),
                    pci_bus_id=f"00000000:{0x18 + i:02X}:00.0",
                    total_gib=TOTAL_GIB,
                    used_gib=round(used, 4),
                    free_gib=round(free, 4),
                    reserved_gib=None,
                    utilization_pct=round(util),
                    memory_utilization_pct=round(
                        _clamp(0.8 * util + offset, 0, 100) if util else 0
                    ),
                    temperature_c=round(temp),
                    power_w=round(idle_w + (556 - idle_w) * activity + 8 * wobble * activity, 1),
                    power_limit_w=600.0,
                    processes=() if rank is None else (process,),
                )
            )
        self._temps, self._temps_at = temps, w
        return NvmlReading(
            gpus=tuple(gpus),
            available=True,
            problem=None,
            driver_version=DRIVER_VERSION,
            taken_at=self._clock(),
        )


def _busy(rank: RankStartup) -> bool:
    """Loading weights or capturing CUDA graphs right now (the GPU works, moderately)."""
    for model in (rank.target, rank.draft):
        if model is None:
            continue
        if model.load_begun and not model.load_ended:
            return True
        if model.graphs and not model.graphs[-1].done:
            return True
    return False


def _uuid(index: int) -> str:
    h = hashlib.sha1(f"kvtop-demo-gpu-{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
