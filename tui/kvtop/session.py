"""Run the sources side by side and turn what they deliver into Snapshots (once, or every refresh)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from kvtop.model.analysis import Analysis, analyse
from kvtop.model.build_snapshot import SnapshotInputs, build_snapshot
from kvtop.model.memory.gpu_reading import GpuStatus, NvmlReading
from kvtop.model.processes.record import ProcessFacts
from kvtop.model.server_target import FROM_CONFIG, FROM_DEFAULT, FROM_FLAG, FROM_LOG, ServerTarget
from kvtop.model.sizing.model_config import ConfigFile
from kvtop.model.snapshot import HostMemory, Snapshot, SourceHealth
from kvtop.model.status.identity import find_mismatches, server_info_mismatches
from kvtop.model.status.watch import Watch
from kvtop.server_url import is_loopback, url_problem

# What a session is asked to read lives in a light module (the live view forms it before its
# first frame); named here too, where the report, the exporter and the tests look for it.
from kvtop.session_options import VISIBLE_DEVICES_VARS as VISIBLE_DEVICES_VARS
from kvtop.session_options import Options as Options
from kvtop.session_options import api_key_from as api_key_from
from kvtop.session_options import visible_devices as visible_devices
from kvtop.sglang.metrics import MetricsSample, ServerInfo
from kvtop.sglang.raw_lines import RawLines
from kvtop.sglang.startup import StartupTracker
from kvtop.sources.gpu_sources import GpuSource, HostGpus
from kvtop.sources.local_host import LocalHost
from kvtop.sources.log_reader import LogReader
from kvtop.sources.metrics import MetricsSource
from kvtop.sources.model_config_file import read_model_config
from kvtop.sources.pacing import Lane, Pacer
from kvtop.sources.server_readings import ServerReadings, age_s

DEFAULT_URL = "http://127.0.0.1:30000"
# How long the first live frame waits for the sources' first round (a GPU reading, the log read
# so far, a scrape); a hung driver must not keep the screen empty: after this the frame shows
# what there is, and the rest follows.
FIRST_READING_WAIT_S = 0.5
# The longest a tick waits for its sources' round before the snapshot (also at most half the
# interval): a normal round takes milliseconds; a slow source joins a later tick.
SETTLE_MAX_S = 0.25
# `--once`: the CPU of the GPU processes and of the host is measured over at least this long
# (their counters start when NVML has listed the processes; a percentage needs two readings).
ONCE_CPU_WINDOW_S = 0.2
# Shutting the sources down: cancel, wait this long, cancel again (see _stop).
STOP_WAIT_S, STOP_TRIES = 0.5, 10


class LogSource(Protocol):
    """What the session reads the log through: a file or the journal (sources/log_reader.py),
    or the demo's story (demo/sources.py)."""

    health: SourceHealth
    good_at: float | None

    @property
    def from_this_host(self) -> bool: ...

    def read_file(self) -> None: ...

    async def read_journal(self) -> None: ...

    async def follow(self, lane: Lane) -> None: ...

    def state_now(self) -> tuple[str, ...]: ...


class Host(Protocol):
    """The machine beside the GPUs: this one (tui/kvtop/sources/local_host.py) or the demo's."""

    def processes(self, reading: NvmlReading | None) -> ProcessFacts: ...

    def memory(self) -> HostMemory | None: ...

    def nvml_health(self, reading: NvmlReading | None) -> SourceHealth: ...


def server_url(
    explicit: str | None, tracker: StartupTracker, from_config: bool = False
) -> tuple[str, str]:
    """(URL, where it came from): --url (or the config file's url), else host and port from
    the logged server_args, else SGLang's default on loopback."""
    if explicit:
        return explicit, FROM_CONFIG if from_config else FROM_FLAG
    args = tracker.current.server_args
    if args is not None and args.port:
        host = args.host or "127.0.0.1"
        if host in ("0.0.0.0", "::", "[::]"):  # listening everywhere: reach it on loopback
            host = "127.0.0.1"
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        url = f"http://{host}:{args.port}"
        if url_problem(url) is None:  # a hostile log must not steer kvtop anywhere odd
            return url, FROM_LOG
    return DEFAULT_URL, FROM_DEFAULT


@dataclass
class Session:
    """Owns the sources and the startup tracker; `collect_once()` or `snapshots()` for a live view."""

    options: Options
    tracker: StartupTracker = field(default_factory=StartupTracker)
    # The latest log lines as written (bounded): the events pane's raw log view.
    raw_lines: RawLines = field(default_factory=RawLines)
    # The host's GPUs: NVML's and AMD SMI's together (sources/gpu_sources.py).
    nvml: GpuSource | None = None
    # The log: a file, stdin or the journal, folded into the tracker and the raw lines.
    log: LogSource = field(init=False)
    # The server's /metrics and /server_info, and the state of each read.
    server: ServerReadings = field(default_factory=ServerReadings)
    # time.monotonic() of each source's latest good reading (None: none yet): SourceHealth.age_s.
    _nvml_at: float | None = None  # a poll with GPUs answering
    latest_nvml: NvmlReading | None = None
    _analysis: Analysis | None = None
    _analysed_at: tuple[int, int, int] = (-1, -1, -1)
    # The model's config.json as read for (--model-config, the server's model path): the
    # sizing's cell size; read in a thread when that pair changes, never on the event loop.
    _model_config: ConfigFile | None = None
    _model_config_for: tuple[str | None, str | None] | None = None
    host: Host = field(default_factory=LocalHost)
    # The live refresh period; the TUI changes it with +/-.
    interval_s: float = 1.0
    # A screen: the first snapshot as soon as NVML answers (unjudged), before the other
    # sources' first readings. Off for the exporter, whose every snapshot is judged.
    gpus_first: bool = False
    clock: Callable[[], float] = time.time  # stamps snapshots (tests fix it)
    # Judges every Snapshot in turn: one verdict for every view, and the timeline.
    watch: Watch = field(init=False)

    def __post_init__(self) -> None:
        self.interval_s = self.options.interval_s
        self.watch = Watch(self.options.thresholds)
        opts = self.options
        self.log = LogReader(
            self.tracker,
            self.raw_lines,
            log_file=opts.log_file,
            unit=opts.unit,
            journal_dir=opts.journal_dir,
        )
        if self.options.demo:
            # The demo's story stands in for every source: from here on it is read as they are.
            from kvtop.demo.sources import install

            install(self)
        elif self.options.nvml and self.nvml is None:  # else given, maybe already polling
            self.nvml = HostGpus(process_interval_s=self.options.process_interval_s)

    # -- log ------------------------------------------------------------------------------------
    def _read_whole_log(self) -> None:
        self.log.read_file()

    # -- metrics --------------------------------------------------------------------------------
    def server_target(self) -> ServerTarget:
        """The server to scrape, why that one, and whether it may have the API key."""
        url, source = server_url(self.options.url, self.tracker, self.options.url_from_config)
        return ServerTarget(
            url=url.rstrip("/"),
            url_source=source,
            loopback=is_loopback(url),
            key_given=bool(self.options.api_key),
            contacted=self.options.metrics,
        )

    @property
    def latest_metrics(self) -> MetricsSample | None:
        return self.server.sample

    @property
    def latest_info(self) -> ServerInfo | None:
        return self.server.info

    def _metrics(self) -> MetricsSource:
        return self.server.client(self.server_target(), self.options.api_key, self.interval_s)

    async def _scrape(self, *, wait_info: bool = False) -> None:
        await self.server.scrape(
            self.server_target(),
            api_key=self.options.api_key,
            interval_s=self.interval_s,
            restarts=self.tracker.current.restarts,
            wait_info=wait_info,
        )

    def forget_server_info(self) -> None:
        """Read /server_info again (the server started anew); a fetch in flight is discarded."""
        self.server.forget_server_info()

    # -- snapshot -------------------------------------------------------------------------------
    def _model_path(self) -> str | None:
        """The model path the sizing reads config.json for: the log's, else /server_info's."""
        args = self.tracker.current.server_args
        if args is None:
            info = self._same_server_info()
            args = info.server_args if info else None
        return args.model_path if args else None

    async def read_model_config(self) -> None:
        """Read the model's config.json again when --model-config or the model path changed:
        in a thread (a slow disk or a large Hugging Face cache must not stop the screen)."""
        wanted = (self.options.model_config, self._model_path())
        if wanted == self._model_config_for:
            return
        self._model_config = await asyncio.to_thread(read_model_config, *wanted)
        self._model_config_for = wanted

    def analysis(self) -> Analysis:
        """Re-analysed only when the log, /server_info or the model's config.json changed."""
        key = (self.tracker.changes, id(self.latest_info), id(self._model_config))
        if self._analysis is None or key != self._analysed_at:
            opts = self.options
            info = self._same_server_info()
            fallback = info.server_args if info else None
            self._analysis = analyse(
                self.tracker,
                opts.source_name,
                model_config=self._model_config,
                # The server knows its version; the log only narrows it down.
                version_override=opts.sglang_version or (info.version if info else None),
                what_if_mfs=opts.what_if,
                request_len=opts.request_len,
                server_args_fallback=fallback,
                safe_margin_gib=opts.thresholds.safe_margin_gib,
            )
            self._analysed_at = key
        return self._analysis

    def _same_server_info(self) -> ServerInfo | None:
        """/server_info, unless it is about another server than the log's latest start."""
        info = self.latest_info
        if info is None or server_info_mismatches(self.tracker.current, info):
            return None
        return info

    def snapshot(self, judged: bool = True) -> Snapshot:
        """One Snapshot of everything read so far, built once (the model's notes, the server
        scraped and the facts on which the sources disagree are inputs, never patched in).
        `judged=False`: the GPUs before the other sources' first readings, not judged (its
        verdict would be about readings not yet taken, and its alerts would enter the timeline)."""
        reading = self.latest_nvml
        processes = self.host.processes(reading)
        nvml_on = self.options.nvml
        nvml_health = self.host.nvml_health(reading if nvml_on else None)
        notes = self.log.state_now()
        host_memory = self.host.memory()
        host_problem = getattr(self.host, "problem", None)  # a simulated host has none
        if host_problem:
            notes += (host_problem,)
        sources = [
            self._aged(self.log.health, self.log.good_at),
            self._aged(nvml_health, self._nvml_at),
        ]
        if self.options.metrics:
            sources.append(self._aged(self.server.shown_health(), self.server.good_at))
        server = self.server_target() if self.server.shows_target else None
        if server is not None and server.contacted and server.key_withheld:
            notes += (server.withheld_sentence(),)
        inputs = SnapshotInputs(
            self.analysis(),
            taken_at=self.clock(),
            nvml=reading,
            processes=processes,
            metrics=self.latest_metrics,
            # Another server's version and args are not shown as this one's (the header).
            server_info=self._same_server_info(),
            host=host_memory,
            sources=tuple(sources),
            cuda_visible_devices=self.options.cuda_visible_devices,
            notes=notes,
            server=server,
            mismatches=find_mismatches(self.tracker.current, self.latest_metrics, self.latest_info),
            # This host's journal (not files copied from another host), or the demo's story.
            log_from_this_host=self.log.from_this_host,
        )
        return build_snapshot(inputs, watch=self.watch, judged=judged)

    @staticmethod
    def _aged(health: SourceHealth, good_at: float | None) -> SourceHealth:
        """The source's health with its age: seconds since its last good reading."""
        return replace(health, age_s=age_s(good_at))

    async def collect_once(self) -> Snapshot:
        """Read the whole log, one NVML poll and one scrape (concurrently), and join them."""
        await asyncio.to_thread(self._read_whole_log)
        if self.options.unit:
            await self.log.read_journal()
        jobs = []
        if self.nvml is not None:
            jobs.append(self._poll_nvml())
        if self.options.metrics:
            jobs.append(self._scrape(wait_info=True))
        await asyncio.gather(*jobs)
        window = self._start_cpu_window()
        await self.read_model_config()
        if window is not None:
            await asyncio.sleep(max(0.0, window - time.monotonic()))
        return self.snapshot()

    def _start_cpu_window(self) -> float | None:
        """Start the CPU counters of the GPU processes NVML listed and of the host; when the
        one-shot snapshot may be taken (monotonic), None when there is nothing to measure."""
        reading = self.latest_nvml
        prime = getattr(self.host, "prime", None)  # a simulated host has its numbers
        if prime is None or reading is None or not any(g.processes for g in reading.gpus):
            return None
        prime(reading)
        return time.monotonic() + ONCE_CPU_WINDOW_S

    async def _poll_nvml(self) -> None:
        assert self.nvml is not None
        self.take_gpus(await self.nvml.poll_async())

    def take_gpus(self, reading: NvmlReading) -> None:
        """The GPU source's latest reading; its age counts from one with GPUs answering."""
        self.latest_nvml = reading
        answered = not reading.gpus or any(g.status == GpuStatus.OK for g in reading.gpus)
        if reading.available and not reading.stale and answered:
            self._nvml_at = time.monotonic()

    # -- live -------------------------------------------------------------------------------------
    async def snapshots(self) -> AsyncGenerator[Snapshot, None]:
        """A Snapshot every interval. One tick per refresh releases every source for one round
        (see sources.pacing): they run back to back, the snapshot follows once they are done
        (or after `_settle_s()`, when one is slow; it joins a later tick when it is done)."""
        pacer = Pacer()
        pacer.interval_s = self.interval_s
        # The log first: its round runs first in a tick, so a GPU source that follows the
        # log's progress (the demo's) reads the lines of the same tick.
        tasks = {"log": asyncio.create_task(self.log.follow(pacer.lane("log")))}
        if self.nvml is not None:
            tasks["nvml"] = asyncio.create_task(self._nvml_loop(pacer.lane("nvml")))
        if self.options.metrics:
            tasks["metrics"] = asyncio.create_task(self._metrics_loop(pacer.lane("metrics")))
        await asyncio.sleep(0)  # every loop to its first wait, so the first tick releases all
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        first = True
        try:
            while True:
                pacer.interval_s = self.interval_s  # +/- in the TUI change it
                pacer.tick()
                if first and self.gpus_first and "nvml" in tasks:
                    # The first frame draws what is known at once: the GPUs as soon as NVML
                    # answers (milliseconds), while the log is read whole and the first scrape
                    # is on its way; they fill in with the next frame, at once when done.
                    started = loop.time()
                    if await pacer.done("nvml", FIRST_READING_WAIT_S) and pacer.busy:
                        _raise_failed(tasks)
                        yield self.snapshot(judged=False)
                    waited = loop.time() - started
                    await pacer.settled(max(0.0, FIRST_READING_WAIT_S - waited))
                else:
                    await pacer.settled(FIRST_READING_WAIT_S if first else self._settle_s())
                first = False
                _raise_failed(tasks)
                await self.read_model_config()
                yield self.snapshot()
                # A fixed beat: the period stays the interval however long the round took.
                next_at += self.interval_s
                now = loop.time()
                if next_at < now:
                    next_at = now  # fell behind (a suspended terminal, a long round): start over
                await asyncio.sleep(next_at - now)
        finally:
            await _stop(list(tasks.values()))
            await self.close()

    def _settle_s(self) -> float:
        """How long a tick waits for its sources: long enough for a normal round (a few ms),
        short enough that a slow one does not hold the screen back."""
        return min(SETTLE_MAX_S, self.interval_s / 2)

    async def _nvml_loop(self, lane: Lane) -> None:
        # One poll per tick; a poll that hangs returns a stale reading after its own timeout
        # (each library's call_timeout_s) and the next tick polls again.
        while True:
            await lane.next()
            await self._poll_nvml()

    async def _metrics_loop(self, lane: Lane) -> None:
        due = 0.0  # time.monotonic() of the next scrape: every tick, or later after failures
        while True:
            await lane.next()
            if time.monotonic() < due:
                continue
            await self._scrape()
            # Backing off counts in ticks: half an interval early is the tick it was meant for.
            due = time.monotonic() + self.server.next_delay_s(self.interval_s) - self.interval_s / 2

    async def close(self) -> None:
        if self.server.info_task is not None:
            await _stop([self.server.info_task])
        await self.server.close()
        if self.nvml is not None:
            self.nvml.close()


def _raise_failed(tasks: dict[str, asyncio.Task[None]]) -> None:
    """A source loop that died of an error stops the feed with it (the app says so on screen)
    rather than leaving that source frozen without a word."""
    for name, task in tasks.items():
        if task.done() and not task.cancelled() and task.exception() is not None:
            raise RuntimeError(f"the {name} source failed: {task.exception()!r}")


async def _stop(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel the source loops and wait for them. Cancelled again until they end: on Python
    before 3.12, asyncio.wait_for can swallow a cancellation that arrives just as its inner
    wait finishes, and a loop that missed it would keep the app from ever closing."""
    pending = {t for t in tasks if not t.done()}
    for _ in range(STOP_TRIES):
        if not pending:
            break
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=STOP_WAIT_S)
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: a source's failure is not re-raised at shutdown
