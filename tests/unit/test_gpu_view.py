"""The GPUs as NVML alone shows them (the live view's first frame): the same views the model
builds from a reading without a log, before the log, the processes' records and the rest of
the model are there."""

from __future__ import annotations

import os

from kvtop.model.analysis import analyse
from kvtop.model.build_snapshot import SnapshotInputs, build_snapshot
from kvtop.model.memory.gpu_memory import lost_memory
from kvtop.model.memory.gpu_reading import GpuProcess, GpuSample, GpuStatus, NvmlReading
from kvtop.model.memory.gpu_view import nvml_views
from kvtop.model.processes.record import ProcessFacts, ProcessRecord
from kvtop.sglang.startup import StartupTracker
from kvtop.sources.process_titles import title_rank, title_ranks
from tests.support.sglang_procs import titled_process


def sample(index: int, *pids: int, status: GpuStatus = GpuStatus.OK) -> GpuSample:
    return GpuSample(
        index=index,
        name="NVIDIA H200",
        uuid=f"GPU-{index}",
        pci_bus_id=f"0000:0{index}:00.0",
        total_gib=139.8,
        used_gib=120.5,
        free_gib=19.3,
        reserved_gib=0.5,
        utilization_pct=40,
        memory_utilization_pct=20,
        temperature_c=50,
        power_w=300.0,
        power_limit_w=700.0,
        processes=tuple(GpuProcess(pid, 110.0) for pid in pids),
        status=status,
    )


READING = NvmlReading(
    gpus=(sample(0, 101), sample(1, 102, 103), sample(2, status=GpuStatus.LOST)),
    available=True,
    problem=None,
    driver_version="580.65.06",
)


def test_each_gpu_with_the_ranks_its_processes_name() -> None:
    views = nvml_views(READING, {101: "TP0", 102: "TP1", 103: "TP1"})
    assert [v.ranks for v in views] == [("TP0",), ("TP1",), ()]
    assert [(p.pid, p.rank) for p in views[1].processes] == [(102, "TP1"), (103, "TP1")]
    # Before the log: what is used and what is free, nothing set apart as another's.
    assert [name for name, _ in views[0].memory.segments()] == ["runtime", "free"]
    assert views[0].memory.runtime_gib == round(139.8 - 19.3, 4)
    assert views[0].memory.other_processes_gib is None
    assert views[2].lost and views[2].memory == lost_memory()


def test_the_same_memory_as_the_models_first_snapshot() -> None:
    """Where every process is the server's, the first frame's bars are the overview's first
    bars (no jump when it takes over): the model's snapshot of the same reading, no log, the
    same titles. A process no title names (pid 103) is set apart by the model's owner rules,
    which need the host's process records: the first frame counts it in use until then."""
    built = build_snapshot(
        SnapshotInputs(
            analyse(StartupTracker(), "no log"),
            taken_at=0.0,
            nvml=READING,
            processes=ProcessFacts(
                {pid: ProcessRecord(pid, rank) for pid, rank in ((101, "TP0"), (102, "TP1"))}
            ),
        )
    )
    views = nvml_views(READING, {101: "TP0", 102: "TP1"})
    assert [v.ranks for v in views] == [g.ranks for g in built.gpus]
    first, overview = views[0].memory.segments(), built.gpus[0].memory.segments()
    assert first == overview == [("runtime", round(139.8 - 19.3, 4)), ("free", 19.3)]
    assert views[2].memory == built.gpus[2].memory == lost_memory()
    assert views[1].memory.segments() == [("runtime", round(139.8 - 19.3, 4)), ("free", 19.3)]
    assert ("other processes", 110.0) in built.gpus[1].memory.segments()


def test_a_title_read_from_proc() -> None:
    """A real process whose argv[0] is a scheduler's title (as setproctitle writes it, spaces
    and all); this process names none; a pid that is gone names none."""
    titled = titled_process("sglang::scheduler_DP1_TP1_EP1 x")
    try:
        assert title_rank(titled.pid) == "DP1 TP1 EP1"
        assert title_rank(os.getpid()) is None
        assert title_ranks([titled.pid, os.getpid(), titled.pid]) == {titled.pid: "DP1 TP1 EP1"}
    finally:
        titled.kill()
        titled.wait()
    assert title_rank(titled.pid) is None  # gone
