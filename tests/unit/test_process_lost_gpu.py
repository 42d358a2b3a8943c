"""A GPU NVML cannot read in the process table's model: its rows (one per rank the log places
there), their cells, every order `o` cycles, and the summary line that counts it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvtop.model.analysis import analyse
from kvtop.model.build_snapshot import SnapshotInputs, build_snapshot
from kvtop.model.memory.gpu_reading import GpuProcess, GpuSample, GpuStatus, NvmlReading
from kvtop.model.memory.process_owner import ProcessInfo
from kvtop.model.processes.columns import cells, table_lines
from kvtop.model.processes.record import ProcessFacts, ProcessRecord
from kvtop.model.processes.summary import processes_summary
from kvtop.model.processes.table import ORDER_KEYS, Whose, process_rows, sorted_rows
from kvtop.model.snapshot import Snapshot
from kvtop.sglang.story import fold_lines

HANDLE = ("handle", "Unknown Error, code 999")


def _gpu(index: int, *procs: GpuProcess) -> GpuSample:
    return GpuSample(
        index=index,
        name="NVIDIA H200",
        uuid=f"GPU-{index}",
        pci_bus_id="",
        total_gib=140.0,
        used_gib=10.0,
        free_gib=130.0,
        reserved_gib=0.5,
        utilization_pct=None,
        memory_utilization_pct=None,
        temperature_c=None,
        power_w=None,
        power_limit_w=None,
        processes=procs,
    )


def _lost(index: int, status: GpuStatus = GpuStatus.ERROR) -> GpuSample:
    return replace(_gpu(index), status=status, cause=HANDLE if status == GpuStatus.ERROR else None)


def _snapshot(samples: list[GpuSample], ranks: dict[int, str | None]) -> Snapshot:
    return build_snapshot(
        SnapshotInputs(
            analyse(fold_lines([]), "empty.log"),
            taken_at=1000.0,
            nvml=NvmlReading(tuple(samples), True, None, None),
            processes=ProcessFacts(
                {
                    pid: ProcessRecord(
                        pid,
                        rank,
                        info=ProcessInfo(
                            f"sglang::scheduler_{rank}" if rank else "python3 train.py", 900.0
                        ),
                    )
                    for pid, rank in ranks.items()
                }
            ),
        )
    )


def test_a_lost_gpu_keeps_a_row_and_is_counted() -> None:
    snapshot = _snapshot(
        [_gpu(0, GpuProcess(100, 60.0)), _lost(1), _gpu(2, GpuProcess(300, 4.0))],
        {100: "TP0", 300: None},
    )
    rows = process_rows(snapshot)
    assert [(r.gpu, r.pid) for r in rows] == [(0, 100), (1, None), (2, 300)]
    lost = rows[1]
    assert (lost.whose, lost.readable, lost.foreign) == (Whose.UNKNOWN, False, False)
    assert lost.lost == "cannot be read through NVML (handle: Unknown Error, code 999)"
    words = cells(lost)
    assert (words["pid"], words["whose"], words["gpu_memory"], words["time"]) == (
        "—",
        "?",
        "—",
        "—",
    )
    assert words["command"] == lost.lost
    assert processes_summary(rows) == (
        "2 processes on 2 of 3 GPUs, 1 foreign: python3 train.py 4.00 GiB on GPU 2; "
        "GPU 1 cannot be read"
    )
    table = table_lines(sorted_rows(rows, "gpu_memory"), 120, "gpu_memory")
    assert table.rows[-1][1] == "warn" and table.rows[-1][0].endswith(lost.lost)


@pytest.mark.parametrize("order", ORDER_KEYS)
def test_every_order_sorts_a_lost_gpus_rows(order: str) -> None:
    """No pid, no figures: the rows sort in every order, without a pid to compare."""
    snapshot = _snapshot([_gpu(0, GpuProcess(100, 60.0)), _lost(1), _lost(2)], {100: "TP0"})
    rows = process_rows(snapshot)
    assert len(sorted_rows(rows, order)) == 3


def test_a_lost_gpu_with_no_process_elsewhere() -> None:
    rows = process_rows(_snapshot([_gpu(0), _lost(1, GpuStatus.LOST)], {}))
    assert processes_summary(rows) == "no process on the other GPU; GPU 1 cannot be read"
    assert cells(rows[0])["command"] == "lost (fallen off the bus)"
    every = process_rows(_snapshot([_lost(0), _lost(1), _lost(2)], {}))
    assert [r.gpu for r in every] == [0, 1, 2]
    assert processes_summary(every) == ("none of the 3 GPUs can be read through NVML (GPU 0–2)")
