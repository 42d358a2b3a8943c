"""The demo as a source behind the session: the embedded story's log lines, its simulated GPUs,
host and /metrics, each answering as the real source it stands in for (tui/kvtop/demo/scenario.py
makes the numbers)."""

from __future__ import annotations

import time
from collections.abc import Callable

from kvtop.demo.scenario import LOG_NAME, DemoScenario
from kvtop.model.memory.gpu_reading import NvmlReading
from kvtop.model.memory.process_owner import ProcessInfo
from kvtop.model.processes.record import ProcessFacts, ProcessRecord
from kvtop.model.snapshot import HostMemory, ProcessUsage, SourceHealth, SourceState
from kvtop.sglang.metrics import MetricsSample, parse_exposition
from kvtop.sglang.start_state import Startup

# The demo host (simulated, like its GPUs): 1 TiB of RAM with the 8 HiCache host pools in use;
# 128 cores, the 8 schedulers busy; swap unused.
DEMO_HOST = HostMemory(
    total_gb=1099.51,
    used_gb=412.6,
    available_gb=686.91,
    cpu_percent=6.4,
    swap_total_gb=8.59,
    swap_used_gb=0.0,
)
LOG_HEALTH = SourceHealth("log", SourceState.OK, "demo: the embedded story log, replayed")
NVML_HEALTH = SourceHealth("nvml", SourceState.OK, "demo: simulated GPUs")
METRICS_HEALTH = SourceHealth("metrics", SourceState.OK, "demo: simulated /metrics")
STARTING_HEALTH = SourceHealth(
    "metrics",
    SourceState.DEGRADED,
    "the demo server is still starting: /metrics answers once it is ready.",
)
DEMO_LOG = LOG_NAME  # the story the demo replays (tui/kvtop/data)


class DemoSource:
    """One simulated server on one simulated host."""

    def __init__(
        self,
        scenario: DemoScenario | None = None,
        *,
        speed: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.scenario = scenario if scenario is not None else DemoScenario(speed, clock=clock)
        self._exposition: str | None = None
        self._sample: MetricsSample | None = None
        self._ranks: dict[int, str | None] = dict(self.scenario.process_ranks())

    # -- the log ----------------------------------------------------------------------------------
    def finish_startup(self) -> None:
        """The whole startup due now (the one-shot report and screenshots start served)."""
        self.scenario.finish_startup()

    def due_lines(self) -> list[str]:
        return self.scenario.due_lines()

    # -- the GPUs and the host --------------------------------------------------------------------
    def nvml_reading(self, startup: Startup) -> NvmlReading:
        return self.scenario.nvml_reading(startup)

    def processes(self, reading: NvmlReading | None) -> ProcessFacts:
        """The simulated schedulers: each spins a core, as SGLang's do, and holds a few GiB."""
        ranks, started = self._ranks, self.scenario.started_at()
        records = (
            ProcessRecord(
                pid,
                rank,
                "sglang",
                ProcessInfo(f"sglang::scheduler_{rank} (simulated)", started),
                ProcessUsage(round(99.0 + (i % 3) * 0.3, 1), round(7.1 + 0.05 * i, 2)),
            )
            for i, (pid, rank) in enumerate(ranks.items())
        )
        return ProcessFacts({r.pid: r for r in records})

    @staticmethod
    def memory() -> HostMemory:
        return DEMO_HOST

    @staticmethod
    def nvml_health(reading: NvmlReading | None) -> SourceHealth:
        return NVML_HEALTH

    # -- /metrics ---------------------------------------------------------------------------------
    def metrics(self) -> tuple[MetricsSample | None, SourceHealth]:
        """The latest sample and the source's state: none before the ready line."""
        text = self.scenario.exposition()
        if text is None:
            return self._sample, STARTING_HEALTH
        if text != self._exposition:  # its gauges move only with a new batch line
            self._exposition = text
            self._sample = parse_exposition(text)
        return self._sample, METRICS_HEALTH
